"""The policy update of SPADE: plain REINFORCE with a group-mean baseline, for both roles.

One model plays two roles, set only by the prompt: the designer (its completions are environment
source code) and the agent (its completions are the turns of no-hint episodes). Every sample is a
(prompt, completion, advantage) triple; the advantage is already baseline-subtracted by
`group_advantages` in reward/regret.py (group = the same environment's plays for the agent, the
same skill's designs for the designer). Each turn of an episode carries its episode's advantage. Hint-arm turns
are never samples: the hint arm only measures regret.

The objective, for each role separately, is the advantage-weighted log-likelihood averaged over
that role's completion tokens:

    loss_role = -(sum over the role's completion tokens of advantage * logprob) / N_role
    loss      = loss_agent + designer_weight * loss_designer

N_role counts the role's INFORMATIVE tokens: those of samples whose advantage is not 0. Averaging
per role keeps one long designer completion (hundreds of tokens of code) from drowning many short
agent turns, or the reverse; counting only informative tokens keeps a batch of uninformative
plays (a group all won or all lost) from shrinking the informative ones' step. Prompt tokens
never enter: the log-probs passed in are for completion tokens only.

The agent's step is the agent's: with one shared adapter, an update whose only informative
samples are the designer's is skipped (unless `designer_only_step`), since Adam would move the
agent's weights by a full step on a signal that says nothing about its play.

Deliberately omitted, as in nanochat's chat_rl.py: we are on-policy and take exactly one update per
batch of fresh samples, so the sampling policy IS the current policy: no importance ratio, no
clipping, no KL penalty to a reference model, no value network. "The sampling policy" means the
distribution the tokens were really drawn from: softmax(logits / temperature) cut to its top-k /
top-p support. Each sample carries its `Sampling`, and its log-probs are taken under exactly that
distribution (`sampled_logprobs`, policy/logprobs.py); log-probs at temperature 1 instead would put
the gradient on a different policy than the one that acted ("On-policy log-probs" in
docs/the-learning-signal.md gives the size of the gap on the embedded model).
Supervised samples (warm start) use PLAIN, the untruncated softmax: their NLL.

Shapes (legend: spade_mini/__init__.py): B sequences of a micro-batch, L tokens of one completion.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from spade_mini.config import DEFAULTS
from spade_mini.policy import PLAIN, BareModel, Roles, Sampling, make_optimizer, out_of_memory, pack_by_tokens  # noqa: F401 (make_optimizer: here for its callers)

ROLES = ("agent", "designer")


@dataclass
class Sample:
    """One completion to reinforce: its prompt, its generated tokens, its advantage, its role,
    and how its tokens were drawn (its log-probs are taken under the same)."""
    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    role: str  # "agent" | "designer"
    sampling: Sampling = PLAIN
    env: str = ""  # the environment an agent turn was played in (alignment.py groups by it)


@dataclass
class UpdateStats:
    """What one update did. tokens == 0 means no step was taken; `skipped` says why. The
    per-role gradient norms are measured before clipping (None: the role had no live sample)."""
    agent_loss: float
    designer_loss: float
    grad_norm: float
    tokens: int
    skipped: str | None = None
    agent_grad_norm: float | None = None
    designer_grad_norm: float | None = None


def role_token_counts(samples: Sequence[Sample]) -> tuple[int, int]:
    """(agent tokens, designer tokens) of the samples whose advantage is not 0: the per-role
    denominators of the loss."""
    counts = {role: 0 for role in ROLES}
    for s in samples:
        if s.role not in counts:
            raise ValueError(f"sample role {s.role!r} is not one of {ROLES}")
        if s.advantage != 0.0:
            counts[s.role] += len(s.completion_ids)
    return counts["agent"], counts["designer"]


ROLE_NORM_LIMIT = 100_000_000  # trainable weights up to which each role's gradient norm is measured
DESIGNER_ONLY = ("no agent sample is informative: the designer's samples alone do not step the "
                 "shared adapter (--designer-only-steps)")


def reinforce_loss(logprobs: Sequence[torch.Tensor], samples: Sequence[Sample], *,
                   designer_weight: float = DEFAULTS.designer_weight,
                   token_counts: tuple[int, int] | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(total, agent_loss, designer_loss) for completion log-probs `logprobs[i]` of `samples[i]`.

    token_counts overrides the per-role denominators; `update` passes the whole batch's counts so
    that the losses of its micro-batches sum to the loss of the whole batch. A role with no tokens
    contributes 0. d loss / d logprob of one token = -advantage / N_role (times designer_weight
    for designer tokens in the total).
    """
    if len(logprobs) != len(samples):
        raise ValueError(f"{len(logprobs)} log-prob tensors for {len(samples)} samples")
    n_agent, n_designer = token_counts if token_counts is not None else role_token_counts(samples)
    device = logprobs[0].device if logprobs else torch.device("cpu")
    sums = {role: torch.zeros((), device=device) for role in ROLES}  # () each
    for logp, s in zip(logprobs, samples):
        if logp.shape != (len(s.completion_ids),):  # (L,)
            raise ValueError(f"log-probs of shape {tuple(logp.shape)} for a completion of "
                             f"{len(s.completion_ids)} tokens: pass completion tokens only")
        if s.role not in sums:
            raise ValueError(f"sample role {s.role!r} is not one of {ROLES}")
        sums[s.role] = sums[s.role] + s.advantage * logp.float().sum()  # ()
    # max(n, 1): a role without tokens has a zero sum, so its loss is 0 rather than 0/0.
    agent_loss = -sums["agent"] / max(n_agent, 1)  # ()
    designer_loss = -sums["designer"] / max(n_designer, 1)  # ()
    total = agent_loss + designer_weight * designer_loss  # ()
    return total, agent_loss, designer_loss


LogprobFn = Callable[[torch.nn.Module, list[list[int]], list[list[int]], int, list[Sampling]],
                     list[torch.Tensor]]


def micro_batch_logprobs(model, prompts, completions, pad_id, samplings) -> list[torch.Tensor]:
    """The default LogprobFn: one forward per micro-batch (token_logprobs must not split it further)."""
    from spade_mini.policy import token_logprobs
    return token_logprobs(model, prompts, completions, pad_id, micro_batch=len(prompts), samplings=samplings)


def trainee(policy) -> Roles:
    """A Policy as it is; a bare torch module wrapped (a HF model has a `.model` attribute, its
    backbone, so the type is tested, not the attribute)."""
    return BareModel(policy) if isinstance(policy, torch.nn.Module) else policy


def pad_of(policy: Roles, pad_id: int | None) -> int:
    """`pad_id`, else the tokenizer's pad token, else its EOS, else 0."""
    tokenizer = policy.tokenizer
    for candidate in (pad_id, getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if candidate is not None:
            return int(candidate)
    return 0


@dataclass(frozen=True)
class UpdateSettings:
    """What the update needs of the flags (settings.update_settings builds it from a Config)."""
    designer_weight: float = DEFAULTS.designer_weight
    micro_batch: int = DEFAULTS.micro_batch  # sequences per forward/backward, at most
    max_grad_norm: float = DEFAULTS.max_grad_norm
    designer_only_step: bool = DEFAULTS.designer_only_steps


def update(policy, samples: Sequence[Sample], optimizer: torch.optim.Optimizer,
           settings: UpdateSettings = UpdateSettings(), *, pad_id: int | None = None,
           logprob_fn: LogprobFn | None = None, token_counts: tuple[int, int] | None = None,
           sync_gradients: Callable[[list[torch.nn.Parameter]], None] | None = None, watch=None) -> UpdateStats:
    """One REINFORCE step on `samples`: accumulate gradients over micro-batches, clip, step.

    Each micro-batch's loss uses the WHOLE batch's per-role token counts as denominators, so the
    accumulated gradient is exactly the gradient of the whole-batch loss, while memory is bounded
    by one micro-batch. `logprob_fn(model, prompts, completions, pad_id, samplings)` returns one
    1-D tensor of completion log-probs per sample; by default `token_logprobs` (policy/logprobs.py).
    Micro-batches hold one role each, so that with separate adapters each role's tokens pass
    through its own adapter; under the policy's memory plan they are also packed by padded
    tokens, and an out-of-memory error restarts the accumulation with half the tokens (the plan
    stays tightened). The model is in train mode during the update (gradient checkpointing and
    dropout apply only then) and in eval mode after it.

    Data parallel (spade_mini/run/distributed.py): `token_counts` are the whole batch's per-role
    counts over every rank, and `sync_gradients(params)` sums the accumulated gradients over
    ranks before clipping, so every rank steps on the gradient of the whole batch. Every rank
    must then reach it, even with no live sample of its own; the update is skipped only when no
    rank had one (no gradient anywhere). With one shared set of weights and no informative agent
    token on any rank (`token_counts`), designer samples alone take no step unless
    `designer_only_step`; with separate adapters they step the designer's adapter only.
    `watch(env, params)` (alignment.EnvGradients) is called before each agent micro-batch's
    backward, the agent's micro-batches grouped by environment, and with env None after the last.
    """
    if settings.micro_batch < 1:
        raise ValueError("micro_batch must be >= 1")
    logprob_fn = logprob_fn or micro_batch_logprobs
    policy = trainee(policy)
    model, pad_id = policy.model, pad_of(policy, pad_id)
    counts = role_token_counts(samples) if token_counts is None else tuple(token_counts)
    tokens = sum(counts)
    if tokens == 0:
        return UpdateStats(0.0, 0.0, 0.0, 0, skipped="all advantages are zero (or no completion tokens): nothing to learn")
    if counts[0] == 0 and not settings.designer_only_step and policy.adapters is None:
        return UpdateStats(0.0, 0.0, 0.0, 0, skipped=DESIGNER_ONLY)
    # A zero advantage contributes zero gradient, so those samples need no forward pass; their
    # tokens still count in the denominators above, as the loss definition says.
    live = [s for s in samples if s.advantage != 0.0 and s.completion_ids]
    nothing = UpdateStats(0.0, 0.0, 0.0, 0, skipped="all advantages are zero: nothing to learn")
    if not live and sync_gradients is None:
        return nothing
    # The step changes the weights, so keys and values kept for continuing chats go stale: free
    # them now rather than hold them (gigabytes on a GPU) through the update.
    policy.forget_chats()
    agent_loss, designer_loss, role_norms = accumulate_within_plan(
        policy, live, optimizer, logprob_fn, pad_id, counts, settings, watch)
    # After acting_as: with separate adapters both adapters are trainable again here.
    params = [p for p in model.parameters() if p.requires_grad]
    if sync_gradients is not None:
        sync_gradients(params)  # the sum over ranks: the gradient of the whole batch
        if all(p.grad is None for p in params):  # no rank had a live sample
            return nothing
    # inf = measure the norm without clipping.
    limit = settings.max_grad_norm if settings.max_grad_norm and settings.max_grad_norm > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(params, limit)  # ()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return UpdateStats(agent_loss, designer_loss, float(grad_norm), tokens,
                       agent_grad_norm=role_norms.get("agent"), designer_grad_norm=role_norms.get("designer"))


def accumulate_within_plan(policy, live: list[Sample], optimizer, logprob_fn: LogprobFn, pad_id: int,
                           counts: tuple[int, int], settings: UpdateSettings, watch=None) -> tuple[float, float, dict[str, float]]:
    """`accumulate` in train mode, in micro-batches the memory plan allows; an out-of-memory
    error starts the accumulation over with half the tokens a micro-batch (the same gradient)."""
    model, plan = policy.model, policy.plan
    model.train()
    try:
        while True:
            batches = micro_batches(live, settings.micro_batch, plan, by_env=watch is not None)
            optimizer.zero_grad(set_to_none=True)
            if watch is not None:
                watch.reset()  # an attempt cut by out-of-memory left readings of gradients now zeroed
            try:
                return accumulate(policy, model, batches, logprob_fn, pad_id, counts, settings.designer_weight, watch)
            except RuntimeError as e:
                if plan is None or not out_of_memory(e):
                    raise
            # part of a micro-batch's gradient may be in .grad already: start over, smaller
            largest = max(len(b) * max(len(s.prompt_ids) + len(s.completion_ids) for s in b) for _, b in batches)
            plan.update_tokens = min(plan.update_tokens, largest) // 2
            plan.update_limit = min(plan.update_limit, plan.update_tokens)
            plan.survived(f"an update micro-batch of {largest:,} tokens",
                          f"micro-batches hold at most {plan.update_tokens:,} tokens")
    finally:
        model.eval()


def micro_batches(samples: Sequence[Sample], micro_batch: int, plan=None,
                  by_env: bool = False) -> list[tuple[str, list[Sample]]]:
    """(role, samples) micro-batches, one role each (`by_env`: agent ones one environment each):
    `micro_batch` samples in order, or, under a memory plan, at most that many and at most its
    padded tokens, longest first (pack_by_tokens)."""
    out = []
    for role in ROLES:
        of_role = [s for s in samples if s.role == role]
        envs = dict.fromkeys(s.env for s in of_role) if by_env and role == "agent" else [None]
        for part in ([s for s in of_role if env is None or s.env == env] for env in envs):
            lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in part]
            groups = ([list(range(a, min(a + micro_batch, len(part)))) for a in range(0, len(part), micro_batch)]
                      if plan is None else pack_by_tokens(lengths, plan.update_tokens, micro_batch, plan.update_limit))
            out += [(role, [part[i] for i in g]) for g in groups]
    return out


def accumulate(policy, model, batches, logprob_fn: LogprobFn, pad_id: int, counts: tuple[int, int],
               designer_weight: float, watch=None) -> tuple[float, float, dict[str, float]]:
    """Backward each micro-batch's share of the whole batch's loss (gradients add up in .grad);
    return (agent loss, designer loss, each role's gradient norm). Micro-batches come grouped by
    role, so a role's gradient is measured as the difference its micro-batches made; that needs a
    copy of the gradient, so past ROLE_NORM_LIMIT trainable weights (full fine-tuning) no role's
    norm is measured. Under torchrun the norms are this rank's, before the gradients are summed."""
    compute = policy.compute  # autocast over fp32 masters
    params = list(model.parameters())  # frozen ones keep .grad None
    measure = sum(p.numel() for p in params if p.requires_grad) <= ROLE_NORM_LIMIT
    losses, norms = {role: 0.0 for role in ROLES}, {}
    for role in ROLES:
        chunks = [chunk for r, chunk in batches if r == role]
        if not chunks:
            continue
        before = [None if p.grad is None or not measure else p.grad.clone() for p in params]
        for chunk in chunks:
            if watch is not None and role == "agent":
                watch(chunk[0].env, params)
            with policy.acting_as(role):
                with compute():
                    logprobs = logprob_fn(model, [s.prompt_ids for s in chunk], [s.completion_ids for s in chunk],
                                          pad_id, [s.sampling for s in chunk])  # B x (L,)
                total, agent, designer = reinforce_loss(logprobs, chunk, designer_weight=designer_weight,
                                                        token_counts=counts)  # () each
                total.backward()
            losses["agent"] += agent.item()
            losses["designer"] += designer.item()
        if watch is not None and role == "agent":
            watch(None, params)
        if measure:
            squares = [((p.grad.float() - (0 if b is None else b.float())) ** 2).sum()
                       for p, b in zip(params, before) if p.grad is not None]
            norms[role] = float(torch.stack(squares).sum().sqrt()) if squares else 0.0
    return losses["agent"], losses["designer"], norms
