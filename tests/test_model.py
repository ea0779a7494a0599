"""The policy: loading, batched chat generation, token log-probs, and what an update changes."""
import math

import pytest
import torch

from spade_mini.config import Config
from spade_mini.policy import load_policy, load_trainable, save_trainable, token_logprobs

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


def test_embedded_logprobs_same_alone_and_left_padded(embedded_policy, fp32_policy):
    outs = embedded_policy.generate(CHATS, max_new_tokens=16, temperature=0)
    batched, alone = _logprobs_alone_and_batched(embedded_policy, outs)
    for b, a in zip(batched, alone):
        # bitsandbytes' CPU 4-bit matmul rounds differently for different batch shapes (seen: up
        # to 0.016 nats); a wrong position id or mask would be off by whole nats.
        assert torch.allclose(b, a, atol=0.05)
    batched, alone = _logprobs_alone_and_batched(fp32_policy, outs)
    for b, a in zip(batched, alone):
        assert torch.allclose(b, a, atol=LOGPROB_TOL)


def test_the_seed_fixes_the_adapter_initialisation():
    """LoRA's A matrices are random: the same --seed must give the same adapter, whatever drew
    from torch's generator before (train.py once seeded only after building the model)."""
    cfg = Config(model="embedded", quantize="none", lora_r=4, seed=5)
    first = load_policy(cfg, verbose=False)
    torch.rand(100)  # something else draws in between
    second = load_policy(cfg, verbose=False)
    a = {n: p for n, p in first.model.named_parameters() if "lora_A" in n}
    b = dict(second.model.named_parameters())
    assert a and all(torch.equal(p, b[n]) for n, p in a.items())
    other = load_policy(Config(model="embedded", quantize="none", lora_r=4, seed=6), verbose=False)
    c = dict(other.model.named_parameters())
    assert not all(torch.equal(p, c[n]) for n, p in a.items())


def test_embedded_step_moves_lora_not_base():
    policy = load_policy(Config(model="embedded", quantize="4bit", lora_r=4), verbose=False)
    named = dict(policy.model.named_parameters())
    lora = {n: p.detach().clone() for n, p in named.items() if "lora_B" in n}
    frozen = {n: p.detach().clone() for n, p in named.items()
              if not p.requires_grad and p.dtype.is_floating_point}
    _one_step(policy)
    assert any(not torch.equal(lora[n], named[n].detach()) for n in lora)
    assert all(torch.equal(frozen[n], named[n].detach()) for n in frozen)


# --- on-policy scoring, master weights, train/eval modes, separate adapters ----------------------

def _sampler_logprobs(policy, chats, max_new_tokens, temperature):
    """What the sampler itself gave each drawn token: log_softmax of the scores `generate`
    reports, which are the logits after temperature, top-k and top-p."""
    prompts = [policy.prompt_ids(c) for c in chats]
    ids, mask = left_pad_for(policy, prompts)
    out = policy.model.generate(input_ids=ids, attention_mask=mask, output_scores=True,
                                return_dict_in_generate=True,
                                generation_config=policy.generation_config(max_new_tokens, temperature))
    new = out.sequences[:, ids.shape[1]:]  # (B, new)
    scores = torch.stack(out.scores, dim=1).float().log_softmax(-1)  # (B, new, V)
    drawn = scores.gather(-1, new.unsqueeze(-1)).squeeze(-1)  # (B, new)
    rows = []
    for b in range(len(chats)):
        row = new[b].tolist()
        end = next((i for i, t in enumerate(row) if t in policy.eos_ids), len(row) - 1)
        rows.append((prompts[b], row[: end + 1], drawn[b, : end + 1]))
    return rows


def left_pad_for(policy, prompts):
    from spade_mini.policy import left_pad
    return left_pad(prompts, policy.pad_id, policy.device)


def test_scoring_uses_the_sampling_it_was_drawn_with(tiny_policy):
    """On-policy means: the update scores each token with the distribution that drew it."""
    from spade_mini.policy import PLAIN, Sampling
    torch.manual_seed(0)
    sampling = Sampling(temperature=0.6, top_k=20, top_p=0.95)
    policy = tiny_policy
    old = policy.temperature, policy.top_k, policy.top_p
    policy.temperature, policy.top_k, policy.top_p = 0.6, 20, 0.95
    try:
        assert policy.sampling() == sampling
        rows = _sampler_logprobs(policy, CHATS, 12, 0.6)
    finally:
        policy.temperature, policy.top_k, policy.top_p = old
    prompts, completions, drawn = zip(*rows)
    scored = token_logprobs(policy.model, list(prompts), list(completions), policy.pad_id,
                            samplings=[sampling] * len(rows))
    plain = token_logprobs(policy.model, list(prompts), list(completions), policy.pad_id,
                           samplings=[PLAIN] * len(rows))
    for s, d, p in zip(scored, drawn, plain):
        torch.testing.assert_close(s, d, atol=1e-4, rtol=1e-4)
        assert (p - d).abs().max() > 1.0  # temperature 1 over the full vocabulary is another policy


def _golden(section):
    import json
    from pathlib import Path
    return json.loads((Path(__file__).parent / "golden" / "reinforce_cases.json").read_text())[section]


# log-probs of the target under the sampler, probs (0.5, 0.2, 0.15, 0.1, 0.05) at temperature 1:
#   plain: ln 0.5.  top-k 3, target 1: ln(0.2 / (0.5 + 0.2 + 0.15)) = ln(0.2 / 0.85)
#   temperature 0.5 squares the probs before renormalising; top-k 2, target 0:
#     ln(0.25 / (0.25 + 0.04)) = ln(0.25 / 0.29)
#   top-p 0.8: 0.5 + 0.2 = 0.7 < 0.8, so 0.15 joins; target 2: ln(0.15 / 0.85)
HAND_SAMPLED = {"plain": math.log(0.5), "top_k_3": math.log(0.2 / 0.85),
                "temperature_half_top_k_2": math.log(0.25 / 0.29), "top_p_0_8": math.log(0.15 / 0.85)}


@pytest.mark.golden
@pytest.mark.parametrize("case", _golden("sampled_logprob"), ids=lambda c: c["name"])
def test_sampled_logprob_golden(case):
    from spade_mini.policy import Sampling, sampled_logprobs
    assert case["logprob"] == pytest.approx(HAND_SAMPLED[case["name"]], abs=1e-12)
    logits = torch.log(torch.tensor([case["probs"]], dtype=torch.float64))  # (1, V)
    sampling = Sampling(case["temperature"], case["top_k"], case["top_p"])
    got = sampled_logprobs(logits, torch.tensor([case["target"]]), sampling)
    assert got.item() == pytest.approx(case["logprob"], abs=1e-6)


def test_support_keeps_top_k_then_top_p():
    from spade_mini.policy import Sampling, sampling_support
    z = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))  # (1, V)
    assert sampling_support(z, Sampling(1.0, 3, 1.0)).tolist() == [[True, True, True, False, False]]
    # top-p 0.8 among all: 0.5 + 0.2 = 0.7 < 0.8, so 0.15 joins (the set reaching 0.8)
    assert sampling_support(z, Sampling(1.0, 0, 0.8)).tolist() == [[True, True, True, False, False]]
    # top-k 2 first: renormalised 0.714, 0.286; top-p 0.5 keeps the first only
    assert sampling_support(z, Sampling(1.0, 2, 0.5)).tolist() == [[True, False, False, False, False]]


def test_full_finetune_in_bf16_keeps_float32_masters():
    """AdamW on bf16 weights rounds small steps away; float32 masters keep them."""
    policy = load_policy(Config(model="tiny", quantize="none", full_finetune=True, dtype="bfloat16"),
                         verbose=False)
    assert policy.autocast == torch.bfloat16
    weight = policy.model.model.layers[0].mlp.down_proj.weight
    assert weight.dtype == torch.float32
    before = weight.detach().clone()
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-5)
    with policy.compute():
        lp = token_logprobs(policy.model, [[1, 2, 3, 4]], [[5, 6, 7]], policy.pad_id)[0]
    (-lp.sum()).backward()
    opt.step()
    changed = (weight.detach() != before).float().mean().item()
    assert changed > 0.5, changed  # bf16 weights: about 1% of them move at this lr


@pytest.mark.parametrize("full", [False, True], ids=["lora", "full_finetune"])
def test_gradient_checkpointing_recomputes_in_the_update(full):
    from spade_mini.reinforce import Sample, UpdateSettings, make_optimizer, update
    policy = load_policy(Config(model="tiny", quantize="none", full_finetune=full,
                                gradient_checkpointing=True), verbose=False)
    policy.generate(CHATS[:1], max_new_tokens=2, temperature=0)  # sampling leaves eval mode on
    layer = (policy.model.model if full else policy.model.base_model.model.model).layers[0]
    calls, forward = [], layer.mlp.forward  # (module hooks do not fire in the recomputation)

    def counted(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)
    layer.mlp.forward = counted
    update(policy, [Sample([1, 2, 3], [4, 5], 1.0, "agent")], make_optimizer(policy.model, 1e-3), UpdateSettings(micro_batch=1))
    assert len(calls) == 2  # the forward, and its recomputation in backward
    assert not policy.model.training  # back in eval mode for the next sampling


def test_separate_adapters_train_each_role_on_its_own_tokens(tmp_path):
    from spade_mini.reinforce import Sample, make_optimizer, update
    cfg = Config(model="tiny", quantize="none", separate_adapters=True, lr=3e-3)
    policy = load_policy(cfg, verbose=False)
    named = dict(policy.model.named_parameters())
    lora_b = {n: p.detach().clone() for n, p in named.items() if "lora_B" in n}
    assert {n.split(".")[-2] for n in lora_b} == {"agent", "designer"}
    assert all(p.requires_grad for n, p in named.items() if "lora_" in n)
    opt = make_optimizer(policy.model, cfg.lr)
    prompt, reply = policy.prompt_ids(CHATS[0]), [4, 5, 6, 7]

    def reply_logprob(role):
        with policy.acting_as(role), torch.no_grad():
            return token_logprobs(policy.model, [prompt], [reply], policy.pad_id)[0].sum().item()
    start = reply_logprob("agent")
    assert reply_logprob("designer") == pytest.approx(start)  # both start as the base model
    update(policy, [Sample(prompt, reply, 1.0, "designer")], opt)
    moved = {n.split(".")[-2] for n in lora_b if not torch.equal(lora_b[n], named[n].detach())}
    assert moved == {"designer"}
    for _ in range(4):
        update(policy, [Sample(prompt, reply, 1.0, "designer")], opt)
    designer = reply_logprob("designer")
    assert designer > start + 1.0 and reply_logprob("agent") == pytest.approx(start)
    save_trainable(policy, tmp_path)
    again = load_policy(cfg, verbose=False)
    load_trainable(again, tmp_path)
    with again.acting_as("designer"), torch.no_grad():
        lp = token_logprobs(again.model, [prompt], [reply], again.pad_id)[0].sum().item()
    assert lp == pytest.approx(designer, abs=1e-4)


def test_the_policy_is_what_the_roles_protocol_asks_and_a_bare_module_is_wrapped(tiny_policy):
    from spade_mini.policy import BareModel, Roles
    from spade_mini.reinforce import trainee
    assert isinstance(tiny_policy, Roles) and not isinstance(tiny_policy.model, Roles)
    bare = trainee(tiny_policy.model)
    assert isinstance(bare, BareModel) and bare.model is tiny_policy.model and bare.plan is None
    assert trainee(tiny_policy) is tiny_policy
