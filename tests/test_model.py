"""The policy: loading, batched chat generation, token log-probs, and what an update changes."""
import pytest
import torch

from spade_mini.config import Config
from spade_mini.model import load_policy, load_trainable, save_trainable, token_logprobs

CHATS = [
    [{"role": "user", "content": "Say hello."}],
    [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}],
]
LOGPROB_TOL = 1e-4  # fp32 on CPU: padding changes the matmul shapes, not the maths


def _logprobs_alone_and_batched(policy, completions):
    prompts = [c.prompt_ids for c in completions]
    ids = [c.completion_ids for c in completions]
    batched = token_logprobs(policy.model, prompts, ids, policy.pad_id, micro_batch=8)
    alone = [token_logprobs(policy.model, [p], [c], policy.pad_id)[0] for p, c in zip(prompts, ids)]
    return batched, alone


def test_tiny_generate_lengths_and_flags(tiny_policy):
    outs = tiny_policy.generate(CHATS, max_new_tokens=12)
    assert len(outs) == 3
    for out, chat in zip(outs, CHATS):
        assert 1 <= len(out.completion_ids) <= 12
        assert out.prompt_ids == tiny_policy.prompt_ids(chat)
        # finished means the last kept token is EOS; unfinished means the budget was used up
        assert out.finished == (out.completion_ids[-1] in tiny_policy.eos_ids)
        assert out.finished or len(out.completion_ids) == 12


def test_tiny_greedy_is_batch_invariant(tiny_policy):
    batched = tiny_policy.generate(CHATS, max_new_tokens=8, temperature=0)
    for chat, b in zip(CHATS, batched):
        alone = tiny_policy.generate([chat], max_new_tokens=8, temperature=0)[0]
        assert alone.completion_ids == b.completion_ids


def test_tiny_logprobs_same_alone_and_left_padded(tiny_policy):
    outs = tiny_policy.generate(CHATS, max_new_tokens=10, temperature=1.0)
    batched, alone = _logprobs_alone_and_batched(tiny_policy, outs)
    for b, a, o in zip(batched, alone, outs):
        assert b.shape == (len(o.completion_ids),)
        assert torch.allclose(b, a, atol=LOGPROB_TOL)


def test_logprobs_count_an_eos_that_equals_pad(tiny_policy):
    # SmolLM2's pad token IS its EOS token: a mask built from `ids != pad` would drop the EOS
    eos = tiny_policy.pad_id
    assert eos in tiny_policy.eos_ids
    lp = token_logprobs(tiny_policy.model, [[5, 6, 7]], [[8, eos]], tiny_policy.pad_id)[0]
    assert lp.shape == (2,) and torch.isfinite(lp).all()


def test_full_finetune_changes_base_weights():
    policy = load_policy(Config(model="tiny", quantize="none", full_finetune=True), verbose=False)
    base = policy.model.model.layers[0].mlp.down_proj.weight
    before = base.detach().clone()
    assert base.requires_grad
    _one_step(policy)
    assert not torch.equal(before, base.detach())


def _one_step(policy, lr=1e-2):
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=lr)
    lp = token_logprobs(policy.model, [[1, 2, 3, 4]], [[5, 6, 7]], policy.pad_id)[0]
    (-lp.sum()).backward()
    opt.step()
    opt.zero_grad()


def test_save_and_load_trainable_round_trip(tmp_path, tiny_policy):
    cfg = Config(model="tiny", quantize="none", seed=0)
    a = load_policy(cfg, verbose=False)
    _one_step(a)
    save_trainable(a, tmp_path)
    b = load_policy(cfg, verbose=False)
    before = {n: p.detach().clone() for n, p in b.model.named_parameters() if p.requires_grad}
    load_trainable(b, tmp_path)
    after = dict(b.model.named_parameters())
    wanted = dict(a.model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert all(torch.equal(after[n], wanted[n]) for n in before)


# --- the embedded model (integration) -----------------------------------------------------------

def test_embedded_loads_in_4bit_with_lora(embedded_policy):
    import bitsandbytes as bnb
    model = embedded_policy.model
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_embedded_batched_generation_is_sensible(embedded_policy):
    outs = embedded_policy.generate(CHATS, max_new_tokens=24, temperature=0)
    assert outs[0].text.strip()
    assert not outs[1].finished and len(outs[1].completion_ids) == 24  # a long story needs more
    assert outs[2].finished and "4" in outs[2].text  # a short answer ends with EOS


def test_embedded_logprobs_same_alone_and_left_padded(embedded_policy):
    outs = embedded_policy.generate(CHATS, max_new_tokens=16, temperature=0)
    batched, alone = _logprobs_alone_and_batched(embedded_policy, outs)
    for b, a in zip(batched, alone):
        # bitsandbytes' CPU 4-bit matmul rounds differently for different batch shapes (seen: up
        # to 0.016 nats); a wrong position id or mask would be off by whole nats.
        assert torch.allclose(b, a, atol=0.05)
    fp32 = load_policy(Config(model="embedded", quantize="none"), verbose=False)
    batched, alone = _logprobs_alone_and_batched(fp32, outs)
    for b, a in zip(batched, alone):
        assert torch.allclose(b, a, atol=LOGPROB_TOL)


def test_embedded_step_moves_lora_not_base():
    policy = load_policy(Config(model="embedded", quantize="4bit", lora_r=4), verbose=False)
    named = dict(policy.model.named_parameters())
    lora = {n: p.detach().clone() for n, p in named.items() if "lora_B" in n}
    frozen = {n: p.detach().clone() for n, p in named.items()
              if not p.requires_grad and p.dtype.is_floating_point}
    _one_step(policy)
    assert any(not torch.equal(lora[n], named[n].detach()) for n in lora)
    assert all(torch.equal(frozen[n], named[n].detach()) for n in frozen)
