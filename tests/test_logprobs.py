"""The memory-bounded scorer equals the plain one: values and gradients, padded, C = 1, empty
completions, mixed samplings, chunk boundaries, and models that post-process their logits."""
import pytest
import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, GraniteConfig, GraniteForCausalLM, LlamaConfig,
                          LlamaForCausalLM)

from spade_mini.policy import PLAIN, Sampling, left_pad, logprobs, sampled_logprobs, token_logprobs

V = 97
TRUNCATED = Sampling(temperature=0.6, top_k=20, top_p=0.95)
SIZES = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def reference_logprobs(model, prompts, completions, pad_id, micro_batch=8, samplings=None):
    """The plain scorer: logits (B, C + 1, V) for the whole micro-batch, then one row at a time."""
    samplings = samplings or [PLAIN] * len(prompts)
    out = []
    for start in range(0, len(prompts), micro_batch):
        ps, cs = prompts[start:start + micro_batch], completions[start:start + micro_batch]
        ss = samplings[start:start + micro_batch]
        ids, mask = left_pad([p + c for p, c in zip(ps, cs)], pad_id, "cpu")  # (B, T), (B, T)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
        C = max(len(c) for c in cs)
        if C == 0:
            out.extend(torch.zeros(0) for _ in cs)
            continue
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                       logits_to_keep=C + 1).logits  # (B, C + 1, V)
        targets = ids[:, -C:]  # (B, C)
        for i, (c, s) in enumerate(zip(cs, ss)):
            out.append(sampled_logprobs(logits[i, C - len(c):C], targets[i, C - len(c):], s))  # (L,)
    return out


def random_batch(seed, lengths):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, V, (p,), generator=g).tolist() for p, _ in lengths]
    completions = [torch.randint(1, V, (c,), generator=g).tolist() for _, c in lengths]
    return prompts, completions


def values_and_grads(fn, model, prompts, completions, samplings, micro_batch):
    model.zero_grad(set_to_none=True)
    lps = fn(model, prompts, completions, 0, micro_batch=micro_batch, samplings=samplings)
    g = torch.Generator().manual_seed(1)
    weights = [torch.randn(len(lp), generator=g) for lp in lps]  # stand-ins for advantages
    loss = sum((w * lp).sum() for w, lp in zip(weights, lps))
    if loss.requires_grad:
        loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return [lp.detach() for lp in lps], grads


def assert_same(model, prompts, completions, samplings, micro_batch=8):
    want, want_grads = values_and_grads(reference_logprobs, model, prompts, completions, samplings, micro_batch)
    got, got_grads = values_and_grads(token_logprobs, model, prompts, completions, samplings, micro_batch)
    for g, w, c in zip(got, want, completions):
        assert g.shape == w.shape == (len(c),)
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    assert got_grads.keys() == want_grads.keys()
    for n in want_grads:
        torch.testing.assert_close(got_grads[n], want_grads[n], atol=1e-5, rtol=1e-4, msg=n)
    return want_grads


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(logprobs, "LOGIT_CHUNK_ELEMENTS", 3 * V)  # 3 positions a chunk: many boundaries


def llama(tied=True):
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**SIZES, tie_word_embeddings=tied)).eval()


def frozen_head(model):
    """As with LoRA: the output layer (and with tied weights, the embeddings) is not trained."""
    for p in model.get_output_embeddings().parameters():
        p.requires_grad_(False)
    return model


@pytest.mark.parametrize("sampling", [PLAIN, TRUNCATED], ids=["plain", "truncated"])
@pytest.mark.parametrize("head", ["tied", "own", "frozen"])
def test_same_values_and_gradients_with_padding(small_chunks, sampling, head):
    model = frozen_head(llama()) if head == "frozen" else llama(tied=head == "tied")
    prompts, completions = random_batch(0, [(3, 7), (9, 2), (5, 11), (1, 4), (6, 1)])
    grads = assert_same(model, prompts, completions, [sampling] * 5, micro_batch=3)
    assert any(g.abs().sum() > 0 for g in grads.values())
    assert ("lm_head.weight" in grads) == (head == "own")  # tied: the gradient lands on the embeddings
    assert ("model.embed_tokens.weight" in grads) == (head != "frozen")


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen_head", "trained_head"])
def test_the_backward_recomputes_logits_only_for_a_trained_head(small_chunks, frozen):
    model = frozen_head(llama()) if frozen else llama()
    prompts, completions = random_batch(8, [(3, 7), (5, 2)])
    calls = []
    model.lm_head.register_forward_hook(lambda m, args, out: calls.append(args[0].shape[:-1].numel()))
    lps = token_logprobs(model, prompts, completions, 0)
    forward = list(calls)
    sum(lp.sum() for lp in lps).backward()
    assert forward[:2] == [2, 2]  # the model's last position, and its check
    assert sum(forward[2:]) == (0 if frozen else 9)  # a frozen head is applied inside FrozenHeadLogprobs
    assert sum(calls[len(forward):]) == (0 if frozen else 9)  # a trained one is recomputed in backward


def test_same_with_one_token_completions(small_chunks):
    prompts, completions = random_batch(1, [(4, 1), (8, 1), (2, 1)])
    assert_same(llama(), prompts, completions, [PLAIN, TRUNCATED, PLAIN])


def test_same_with_empty_completions(small_chunks):
    model = llama()
    prompts, completions = random_batch(2, [(4, 0), (8, 5), (2, 0), (3, 3)])
    assert_same(model, prompts, completions, [TRUNCATED, TRUNCATED, PLAIN, PLAIN], micro_batch=4)
    prompts, completions = random_batch(3, [(4, 0), (8, 0)])  # a micro-batch with nothing to score
    got = token_logprobs(model, prompts, completions, 0)
    assert [g.shape for g in got] == [(0,), (0,)]


def test_mixed_samplings_in_one_micro_batch_are_each_scored_their_way():
    model = llama()
    prompts, completions = random_batch(4, [(5, 6), (5, 6)])
    prompts[1], completions[1] = prompts[0], completions[0]  # the same sample twice
    with torch.no_grad():
        plain, truncated = token_logprobs(model, prompts, completions, 0, samplings=[PLAIN, TRUNCATED])
    assert (truncated - plain).abs().max() > 0.1  # two different distributions, not one applied to both


def head_inputs(model, prompts, completions):
    """How many positions each call of the output head saw, while scoring without gradients."""
    seen = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda m, args, out: seen.append(args[0].shape[:-1].numel()))
    with torch.no_grad():
        token_logprobs(model, prompts, completions, 0)
    hook.remove()
    return seen


def test_only_completion_positions_reach_the_head():
    prompts, completions = random_batch(5, [(30, 2), (3, 40)])
    # the model's own last position (2 rows) and its check (2), then the 42 scored positions:
    # never the 2 x 41 positions of a (B, C + 1, V) logits tensor
    assert head_inputs(llama(), prompts, completions) == [2, 2, 42]


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen_head", "trained_head"])
def test_soft_capped_logits_are_scored_like_the_model(small_chunks, frozen):
    torch.manual_seed(0)
    config = Gemma2Config(**SIZES, head_dim=8, final_logit_softcapping=2.0, attn_logit_softcapping=None)
    model = Gemma2ForCausalLM(config).eval()
    model = frozen_head(model) if frozen else model
    prompts, completions = random_batch(6, [(3, 5), (6, 2)])
    assert_same(model, prompts, completions, [PLAIN, TRUNCATED])
    assert max(head_inputs(model, prompts, completions)) <= 3  # chunked: no fallback was needed


def test_a_model_that_scales_logits_its_own_way_falls_back_to_full_logits(small_chunks):
    torch.manual_seed(0)
    model = GraniteForCausalLM(GraniteConfig(**SIZES, logits_scaling=4.0)).eval()
    prompts, completions = random_batch(7, [(3, 5), (6, 2)])
    assert_same(model, prompts, completions, [PLAIN, TRUNCATED])
    assert max(head_inputs(model, prompts, completions)) == 2 * 8  # every position of both rows
