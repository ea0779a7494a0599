"""Tests for spade_mini/reinforce.py: the REINFORCE loss, the micro-batched update, and learning.

Golden file tests/golden/reinforce_cases.json, key "loss" (schema in its "_doc" key): a list of
{name, designer_weight, samples: [{prompt_ids, completion_ids, advantage, role, logprobs}],
total, agent_loss, designer_loss, grads}, where grads[i][t] = d total / d logprobs[i][t].

The update tests use a tiny randomly initialised Llama built here (no download). Log-probs come
from spade_mini.policy.token_logprobs when that module exists, else from `reference_logprobs`
below (one unpadded forward per sample), which is also the oracle token_logprobs is checked against.
"""

import copy
import json
import pathlib
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from spade_mini.policy import PLAIN, BareModel
from spade_mini.reinforce import Sample, UpdateSettings, UpdateStats, make_optimizer, reinforce_loss, role_token_counts, update
from spade_mini.reward import group_advantages

GOLDEN = json.loads((pathlib.Path(__file__).parent / "golden" / "reinforce_cases.json").read_text())

try:
    from spade_mini.policy import token_logprobs
except ImportError:  # model.py not written yet, or its heavy imports are unavailable
    token_logprobs = None


def tiny_model(vocab_size=64, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()  # eval: no dropout, so runs are comparable


def reference_logprobs(model, prompts, completions, pad_id, samplings=None):
    """Completion-token log-probs, one unpadded forward per sample: the plain definition
    (the untruncated softmax at temperature 1, which is what these tests' samples use)."""
    assert all(s == PLAIN for s in samplings or []), "the reference scores PLAIN samples only"
    out = []
    for prompt, completion in zip(prompts, completions):
        ids = torch.tensor([prompt + completion])  # (1, P+T)
        logits = model(input_ids=ids).logits[0, :-1].float()  # (P+T-1, V): position i predicts i+1
        logp = torch.log_softmax(logits, dim=-1)  # (P+T-1, V)
        targets = ids[0, 1:]  # (P+T-1,)
        picked = logp.gather(1, targets[:, None])[:, 0]  # (P+T-1,)
        out.append(picked[len(prompt) - 1:])  # (T,) completion positions only
    return out


# The log-prob function the update tests run through: the library's when it exists.
LOGPROB_FN = None if token_logprobs is not None else reference_logprobs


def mixed_samples():
    """Both roles, uneven prompt and completion lengths, one zero advantage, one empty completion."""
    return [
        Sample([1, 2, 3], [4, 5], 0.5, "agent"),
        Sample([1, 2], [6, 7, 8, 9], -1.0, "agent"),
        Sample([3, 4, 5, 6, 7], [10], 0.0, "agent"),  # uninformative: not in N_agent, no gradient
        Sample([9], [11, 12, 13], 2.0, "designer"),
        Sample([2, 2, 2], [14, 15], -0.7, "designer"),
        Sample([5, 6], [], 1.0, "agent"),  # a turn that produced no tokens
        Sample([8, 8], [16, 17, 18], 0.3, "agent"),
    ]


class CaptureOptimizer:
    """Stands in for an optimizer: records the gradients it is asked to step with."""

    def __init__(self, params):
        self.params = list(params)
        self.grads = None

    def step(self):
        self.grads = [p.grad.detach().clone() for p in self.params]

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None


# --- the loss ------------------------------------------------------------------------------------

@pytest.mark.golden
def test_golden_loss_matches_hand_arithmetic():
    both, agent_only, zero = GOLDEN["loss"]
    # both_roles: agent tokens: sample 0 (adv 0.5, lp -1, -2), sample 1 (adv -1, lp -0.5); N_agent = 3
    #   agent_loss = -(0.5*(-1 - 2) + (-1)*(-0.5)) / 3 = -(-1.5 + 0.5) / 3 = 1/3
    #   designer: sample 2 (adv 2, lp -3, -1, -2); N_designer = 3
    #   designer_loss = -(2 * (-6)) / 3 = 4;  total = 1/3 + 0.5 * 4 = 7/3
    #   grads: -adv / N (designer also * 0.5): -0.5/3, +1/3, -0.5 * 2/3
    assert both["agent_loss"] == pytest.approx(1 / 3)
    assert both["designer_loss"] == pytest.approx(4.0)
    assert both["total"] == pytest.approx(7 / 3)
    assert both["grads"] == [pytest.approx([-0.5 / 3] * 2), pytest.approx([1 / 3]),
                             pytest.approx([-1 / 3] * 3)]
    # agent_only: adv -0.25, lp sum -8, N = 4: loss = -(-0.25 * -8) / 4 = -0.5; grad = 0.25/4
    assert agent_only["total"] == agent_only["agent_loss"] == pytest.approx(-0.5)
    assert agent_only["designer_loss"] == 0.0
    assert agent_only["grads"] == [pytest.approx([0.0625] * 4)]
    # zero_advantage_tokens_do_not_count: N_agent = 2 (sample 1's 3 tokens have advantage 0),
    #   N_designer = 0: agent_loss = -(0.5 * (-1 - 2)) / 2 = 0.75, designer_loss 0, total 0.75;
    #   grads -0.5/2 = -0.25 on sample 0, 0 elsewhere (with N_agent = 5 it would be -0.1 and 0.3)
    assert (zero["agent_loss"], zero["designer_loss"], zero["total"]) == pytest.approx((0.75, 0.0, 0.75))
    assert zero["grads"] == [[-0.25, -0.25], [0.0] * 3, [0.0] * 2]


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["loss"], ids=lambda c: c["name"])
def test_loss_matches_golden(case):
    samples = [Sample(s["prompt_ids"], s["completion_ids"], s["advantage"], s["role"])
               for s in case["samples"]]
    logprobs = [torch.tensor(s["logprobs"], requires_grad=True) for s in case["samples"]]  # (T,)
    total, agent, designer = reinforce_loss(logprobs, samples,
                                            designer_weight=case["designer_weight"])
    assert total.item() == pytest.approx(case["total"], abs=1e-6)
    assert agent.item() == pytest.approx(case["agent_loss"], abs=1e-6)
    assert designer.item() == pytest.approx(case["designer_loss"], abs=1e-6)
    total.backward()
    for lp, expected in zip(logprobs, case["grads"]):
        assert lp.grad.tolist() == pytest.approx(expected, abs=1e-6)


def test_gradient_is_minus_advantage_over_role_token_count():
    samples = mixed_samples()
    n_agent, n_designer = role_token_counts(samples)
    assert (n_agent, n_designer) == (2 + 4 + 0 + 0 + 3, 3 + 2)  # informative tokens only
    torch.manual_seed(0)
    logprobs = [(-torch.rand(len(s.completion_ids))).requires_grad_() for s in samples]  # (T,)
    weight = 0.25
    total, _, _ = reinforce_loss(logprobs, samples, designer_weight=weight)
    total.backward()
    for lp, s in zip(logprobs, samples):
        n, w = (n_agent, 1.0) if s.role == "agent" else (n_designer, weight)
        expected = torch.full_like(lp, -w * s.advantage / n)  # (T,)
        torch.testing.assert_close(lp.grad, expected)


def test_loss_takes_completion_tokens_only():
    # Log-probs that include the prompt positions are a shape error, not silently averaged in.
    s = Sample([1, 2, 3], [4, 5], 1.0, "agent")
    with pytest.raises(ValueError, match="completion tokens only"):
        reinforce_loss([torch.zeros(5)], [s])
    with pytest.raises(ValueError, match="role"):
        reinforce_loss([torch.zeros(2)], [Sample([1], [4, 5], 1.0, "hint")])


def test_role_without_samples_contributes_zero():
    s = Sample([1], [2, 3], 1.0, "designer")
    total, agent, designer = reinforce_loss([torch.tensor([-1.0, -3.0])], [s], designer_weight=2.0)
    assert agent.item() == 0.0
    assert designer.item() == pytest.approx(2.0)  # -(1 * -4) / 2
    assert total.item() == pytest.approx(4.0)     # 0 + 2 * 2


# --- the update on a tiny model ------------------------------------------------------------------

@pytest.mark.skipif(token_logprobs is None, reason="spade_mini.policy.token_logprobs not available")
def test_library_token_logprobs_match_reference():
    model = tiny_model()
    samples = mixed_samples()
    prompts = [s.prompt_ids for s in samples]
    completions = [s.completion_ids for s in samples]
    got = token_logprobs(model, prompts, completions, pad_id=0, micro_batch=3)
    want = reference_logprobs(model, prompts, completions, 0)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w, atol=1e-5, rtol=1e-5)


def full_batch_gradient(model, samples, designer_weight):
    """Gradient of reinforce_loss on all samples at once, from the plain definition."""
    model.zero_grad(set_to_none=True)
    logprobs = reference_logprobs(model, [s.prompt_ids for s in samples],
                                  [s.completion_ids for s in samples], 0)
    total, _, _ = reinforce_loss(logprobs, samples, designer_weight=designer_weight)
    total.backward()
    return [p.grad.clone() for p in model.parameters()]


def test_micro_batched_update_equals_full_batch_gradient():
    base = tiny_model()
    samples = mixed_samples()
    want = full_batch_gradient(copy.deepcopy(base), samples, designer_weight=0.5)
    for micro_batch in (1, 2, len(samples)):
        model = copy.deepcopy(base)
        opt = CaptureOptimizer(model.parameters())
        stats = update(model, samples, opt, UpdateSettings(designer_weight=0.5, micro_batch=micro_batch, max_grad_norm=0.0), pad_id=0, logprob_fn=LOGPROB_FN)  # 0: no clipping
        assert stats.tokens == sum(len(s.completion_ids) for s in samples if s.advantage != 0)  # informative
        assert stats.skipped is None
        for got, expected in zip(opt.grads, want):
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_update_moves_trainable_weights_only():
    model = tiny_model()
    model.model.embed_tokens.weight.requires_grad_(False)  # frozen, like a base model under LoRA
    opt = make_optimizer(model, lr=1e-2, weight_decay=0.0)
    assert sum(len(g["params"]) for g in opt.param_groups) == len(
        [p for p in model.parameters() if p.requires_grad])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    # Prompt tokens never count: 8 prompt tokens, 2 + 1 completion tokens.
    samples = [Sample([1, 2, 3, 4, 5, 6], [7, 8], 1.0, "agent"),
               Sample([1, 2], [9], -1.0, "agent")]
    stats = update(model, samples, opt, pad_id=0, logprob_fn=LOGPROB_FN)
    assert isinstance(stats, UpdateStats) and stats.tokens == 3 and stats.grad_norm > 0
    after = dict(model.named_parameters())
    moved = [n for n in before if not torch.equal(before[n], after[n].detach())]
    assert "lm_head.weight" in moved and len(moved) > len(before) // 2
    assert "model.embed_tokens.weight" not in moved
    assert all(p.grad is None for p in model.parameters())  # left zeroed for the next step


def test_zero_advantages_take_no_step():
    model = tiny_model()
    opt = make_optimizer(model, lr=1e-2, weight_decay=0.1)  # decay alone would move weights
    before = [p.detach().clone() for p in model.parameters()]
    samples = [Sample([1, 2], [3, 4], 0.0, "agent"), Sample([1], [5], 0.0, "designer")]
    stats = update(model, samples, opt, pad_id=0, logprob_fn=LOGPROB_FN)
    assert stats.tokens == 0 and "zero" in stats.skipped
    assert update(model, [], opt, pad_id=0, logprob_fn=LOGPROB_FN).tokens == 0
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_update_accepts_a_policy_and_reads_its_pad_id():
    model = tiny_model()
    seen = []

    def spy(m, prompts, completions, pad_id, samplings):
        seen.append((m, pad_id))
        return reference_logprobs(m, prompts, completions, pad_id)

    policy = BareModel(model, tokenizer=SimpleNamespace(pad_token_id=13))
    update(policy, [Sample([1, 2], [3], 1.0, "agent")], CaptureOptimizer(model.parameters()),
           logprob_fn=spy)
    assert seen == [(model, 13)]


# --- learning actually happens --------------------------------------------------------------------

TARGET = 7  # the one answer token that pays 1


def prob_of_target(model, prompt):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]  # (V,)
        return torch.softmax(logits.float(), dim=-1)[TARGET].item()


def test_reinforce_learns_a_one_token_bandit():
    """Seed 0, vocab 16, G = 32 plays per update, AdamW lr 1e-2, 30 updates (a few seconds on CPU).

    The prompt is fixed and the answer is one sampled token; reward 1 iff it is TARGET. At random
    init p(TARGET) is about 1/16. REINFORCE with the group-mean baseline must push it above 0.5.
    """
    model = tiny_model(vocab_size=16, seed=0)
    opt = make_optimizer(model, lr=1e-2, weight_decay=0.0)
    prompt = [1, 2, 3]
    gen = torch.Generator().manual_seed(0)
    p_start = prob_of_target(model, prompt)
    rates = []
    for _ in range(30):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]  # (V,)
            probs = torch.softmax(logits.float(), dim=-1)  # (V,)
            answers = torch.multinomial(probs, 32, replacement=True, generator=gen)  # (G,)
        rewards = [float(a == TARGET) for a in answers.tolist()]
        advantages = group_advantages(rewards, [0] * len(rewards))
        samples = [Sample(prompt, [a], adv, "agent") for a, adv in zip(answers.tolist(), advantages)]
        update(model, samples, opt, UpdateSettings(micro_batch=32), pad_id=0, logprob_fn=LOGPROB_FN)
        rates.append(sum(rewards) / len(rewards))
    p_end = prob_of_target(model, prompt)
    assert p_start < 0.15
    assert p_end > 0.5, (p_start, p_end, rates)
    assert sum(rates[-5:]) / 5 > sum(rates[:5]) / 5 + 0.3, rates


def test_thinning_invalid_designs_keeps_the_expected_gradient_exactly():
    """Every draw of which invalid designs the update scores, weighted by its probability, sums to
    the gradient of scoring all of them: the kept ones count 1/fraction times and the left-out
    ones still count in the designer's token denominator."""
    import itertools

    from spade_mini.reward import thin_out

    def thinned(rng) -> tuple[list[Sample], list[Sample]]:  # as the loop builds its designer samples
        weights = thin_out([s.advantage for s in samples], sure, fraction, rng)
        kept = [Sample(s.prompt_ids, s.completion_ids, w, s.role) for s, w in zip(samples, weights) if w is not None]
        return kept, [s for s, w in zip(samples, weights) if w is None]
    fraction = 0.25
    samples = [Sample([1], [2, 3], 0.7, "agent"), Sample([1], [4, 5, 6], 0.9, "designer"),  # a valid design
               Sample([1], [7], -0.4, "designer"), Sample([1], [8, 9], -0.2, "designer"),
               Sample([1], [3, 3, 3, 3], -0.5, "designer")]  # three invalid designs
    sure = [True, True, False, False, False]
    logps = [torch.randn(len(s.completion_ids), generator=torch.Generator().manual_seed(i), dtype=torch.float64)
             .requires_grad_() for i, s in enumerate(samples)]

    index = {tuple(s.completion_ids): i for i, s in enumerate(samples)}  # each completion is unique here

    def grads(kept, counts) -> list[torch.Tensor]:
        chosen = [logps[index[tuple(s.completion_ids)]] for s in kept]
        total, _, _ = reinforce_loss(chosen, kept, token_counts=counts)
        got = torch.autograd.grad(total, logps, allow_unused=True)
        return [torch.zeros_like(lp) if g is None else g for lp, g in zip(logps, got)]

    full = grads(samples, role_token_counts(samples))
    expected = [torch.zeros_like(lp) for lp in logps]
    for keep in itertools.product([True, False], repeat=3):
        draws = iter([0.0 if k else 0.99 for k in keep])
        rng = SimpleNamespace(random=lambda: next(draws))
        kept, left = thinned(rng)
        assert len(kept) == 2 + sum(keep) and len(left) == 3 - sum(keep)
        p = fraction ** sum(keep) * (1 - fraction) ** (3 - sum(keep))
        for e, g in zip(expected, grads(kept, role_token_counts(kept + left))):
            e += p * g
    for e, f in zip(expected, full):
        assert torch.allclose(e, f, atol=1e-12)
    # the denominator matters: counting only the kept samples' tokens would not be the full gradient
    draws = iter([0.0, 0.99, 0.99])
    kept, left = thinned(SimpleNamespace(random=lambda: next(draws)))
    assert role_token_counts(kept + left) == role_token_counts(samples) != role_token_counts(kept)
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        thin_out([1.0], [False], 0.0, None)
