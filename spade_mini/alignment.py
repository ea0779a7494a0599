"""Alignment: does training on an environment move the agent the way a trusted set does?

Hint-based regret asks whether a helped agent wins where the agent alone does not; it never asks
whether training on an environment helps the agent anywhere else, so it pays a game that teaches
the wrong thing as long as it sits at the edge. Alignment asks that, as GradAlign scores items by
the cosine of their policy gradient with a trusted set's, at the cost of one backward pass over a
small set every `--alignment-every` iterations:

- the alignment set: hand-written environments the run neither trains on, shows its designer
  nor evaluates (the other tier's training examples, `alignment_envs`), at level 0 on fixed
  seeds; `bench/alignment_set.py` keeps the items the starting policy is neither always right
  nor always wrong on (a start rate in RATE_BAND);
- g_set: the REINFORCE gradient of the set's sampled no-hint episodes (one baseline group per
  item) on the trainable weights, taken without a step (`set_gradient`);
- g_env: what one environment's samples add to the update's gradient. The update groups the
  agent's micro-batches by environment, so g_env is the accumulated gradient after its
  micro-batches minus before: no second backward pass (`EnvGradients`, reinforce.update's watch);
- alignment(env) = cos(g_env, g_set), read against a noise floor: the cosine of the gradients of
  the set's two halves (its items taken alternately), the set's agreement with itself. A reading
  is cos / floor, so 1 is "as aligned as half the set is with the other half". Two cautions: the
  whole set is less noisy than a half (by about sqrt(2)), so readings run high; and a small floor
  inflates every reading, so below FLOOR_MIN no environment is read (the set cannot tell a
  direction from noise then). An environment whose samples all have advantage 0 adds no
  gradient and gets no reading.

Shapes (legend: spade_mini/__init__.py): P trainable weights, flattened, float32.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from spade_mini.agent import Job, Playable, play_episodes
from spade_mini.envs import TIERS, HandEnv
from spade_mini.reinforce import Sample, accumulate_within_plan, micro_batch_logprobs, pad_of, role_token_counts
from spade_mini.reward import group_advantages
from spade_mini.reward.bands import ALIGNMENT_BAND, within

RATE_BAND = ALIGNMENT_BAND  # an item's start rate must lie here to be in the set (reward/bands.py)
ITEMS, PLAYS = 8, 4     # the set's items at most, and the episodes each plays a measurement
MEASURED = Path(__file__).with_name("alignment_set.json")  # bench/alignment_set.py's items per model
OTHER_TIER = {"starter": "standard", "standard": "starter"}
FLAT_LIMIT = 100_000_000  # trainable weights up to which gradients are copied (full fine-tuning: none)
FLOOR_MIN = 0.1  # the least agreement of the set's halves at which readings are taken


def alignment_envs(tier: str, setting: str) -> list[HandEnv]:
    """The alignment set's environments for a run on `tier`: the other tier's training examples of
    the run's setting (never its held-out ones, which the evaluation plays)."""
    return [e for e in TIERS[OTHER_TIER[tier]][0] if setting in ("mix", e.setting)]


def item_id(env: HandEnv, seed: int) -> str:
    return f"align-{env.name}#{seed}"


def chosen_items(tier: str, setting: str, model: str) -> tuple[list[tuple[HandEnv, int]], str]:
    """The set's (environment, seed) items and where they come from: those bench/alignment_set.py
    measured in RATE_BAND for this model, tier and setting; else each environment's seed 0, 1, ...
    in turn (not yet measured: their start rates are unknown), ITEMS at most."""
    envs = {e.name: e for e in alignment_envs(tier, setting)}
    measured = json.loads(MEASURED.read_text()) if MEASURED.exists() else {}
    key = f"{model}/{tier}/{setting}"
    if key in measured:
        items = [(envs[name], seed) for name, seed in measured[key]["items"] if name in envs][:ITEMS]
        return items, f"{len(items)} items with a start rate in {RATE_BAND} ({MEASURED.name})"
    items = [(env, seed) for seed in range(ITEMS) for env in envs.values()][:ITEMS]
    return items, f"{len(items)} items, start rates not measured for {key} (bench/alignment_set.py)"


def alignment_jobs(items: list[tuple[HandEnv, int]], plays: int) -> list[Job]:
    """`plays` no-hint episodes of each (environment, seed) item at level 0; an item is one
    baseline group (its Job.group)."""
    return [job for env, seed in items
            for job in Playable(item_id(env, seed), env.skill, env.setting, env.source).paired_jobs(
                [seed] * plays, [None] * plays)]


def in_band(rates: dict[str, float], band: tuple[float, float] = RATE_BAND) -> list[str]:
    """The items whose start rate lies in the band (its edges included), in their order."""
    return [item for item, rate in rates.items() if within(rate, band)]


def turn_samples(episodes) -> list[Sample]:
    """Agent samples of played episodes: each turn with its episode's advantage (return minus
    the mean of its group) and its group as the environment."""
    advantages = group_advantages([e.ret for e in episodes], [e.job.group for e in episodes])
    return [Sample(t.prompt_ids, t.completion_ids, adv, "agent", t.sampling, env=e.job.group)
            for e, adv in zip(episodes, advantages) for t in e.turns]


def flat_grad(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The accumulated gradient of `params` as one vector (P,), zeros where a weight has none."""
    return torch.cat([(p.grad.detach().float() if p.grad is not None
                       else torch.zeros(p.shape, device=p.device)).flatten() for p in params])  # (P,)


def cosine(a: torch.Tensor | None, b: torch.Tensor | None) -> float | None:
    """cos(a, b); None when either is missing or zero (no direction to compare)."""
    if a is None or b is None:
        return None
    na, nb = float(a.norm()), float(b.norm())
    return None if na == 0.0 or nb == 0.0 else float(a @ b) / (na * nb)


def trainable(policy) -> list[torch.nn.Parameter]:
    return [p for p in policy.model.parameters() if p.requires_grad]


def measurable(policy) -> bool:
    """Whether the trainable weights are few enough to copy their gradient (a LoRA adapter)."""
    return sum(p.numel() for p in trainable(policy)) <= FLAT_LIMIT


def gradient(policy, optimizer, samples: list[Sample], settings, logprob_fn=micro_batch_logprobs
             ) -> tuple[torch.Tensor | None, int]:
    """(the REINFORCE gradient of `samples` alone (P,), their informative agent tokens), taken as
    the update takes it but without a step; the gradients are zeroed before and after. None when
    no sample is informative."""
    counts = role_token_counts(samples)
    live = [s for s in samples if s.advantage != 0.0 and s.completion_ids]
    if not live:
        return None, 0
    policy.forget_chats()  # as the update does: kept keys and values are not needed here
    accumulate_within_plan(policy, live, optimizer, logprob_fn, pad_of(policy, None), counts, settings)
    g = flat_grad(trainable(policy))  # (P,)
    optimizer.zero_grad(set_to_none=True)
    return g, counts[0]


@dataclass
class SetGradient:
    """The alignment set's gradient (P,) and its noise floor: the cosine of its halves' gradients."""
    vector: torch.Tensor | None
    floor: float | None
    rate: float          # the set's no-hint solve rate in these episodes
    items: int


def set_gradient(policy, optimizer, episodes, settings, logprob_fn=micro_batch_logprobs) -> SetGradient:
    """g_set from the set's episodes: the gradient of each half of its items (taken alternately),
    and their token-weighted sum, which is the gradient of the whole set's loss."""
    items = list(dict.fromkeys(e.job.group for e in episodes))
    half_of = {item: i % 2 for i, item in enumerate(items)}
    halves = [gradient(policy, optimizer, turn_samples([e for e in episodes if half_of[e.job.group] == h]), settings,
                       logprob_fn) for h in (0, 1)]
    tokens = sum(n for _, n in halves)
    parts = [g * n for g, n in halves if g is not None]
    whole = sum(parts) / tokens if parts else None  # (P,)
    rate = sum(e.ret > 0 for e in episodes) / max(len(episodes), 1)
    return SetGradient(whole, cosine(halves[0][0], halves[1][0]), rate, len(items))


@dataclass
class EnvGradients:
    """The update's watch (reinforce.update): called with an environment before each of its
    agent micro-batches' backward, and with None after the last; keeps, per environment, the
    cosine of the gradient its micro-batches added with `target`, and that gradient's norm."""
    target: torch.Tensor
    env: str | None = None
    before: torch.Tensor | None = None
    cos: dict = field(default_factory=dict)
    norm: dict = field(default_factory=dict)

    def reset(self) -> None:
        """Forget what an attempt of the update saw (it is started over with zeroed gradients)."""
        self.env, self.before, self.cos, self.norm = None, None, {}, {}

    def __call__(self, env: str | None, params) -> None:
        if env == self.env:
            return
        now = flat_grad([p for p in params if p.requires_grad])  # (P,)
        if self.env is not None:
            if self.env in self.cos:
                raise ValueError(f"the update came back to {self.env}: its micro-batches must be grouped")
            added = now - self.before  # (P,)
            self.cos[self.env], self.norm[self.env] = cosine(added, self.target), float(added.norm())
        self.env, self.before = env, now


def measure(state, settings, record) -> None:
    """Before the update, every `--alignment-every` iterations: play the set (PLAYS no-hint
    episodes an item), take its gradient and floor, and give the update its watch."""
    align = settings.align
    if not align.every or state.iteration % align.every or not measurable(state.policy):
        return
    if not state.alignment_items:
        state.alignment_items, record.alignment_note = chosen_items(align.tier, align.setting, align.model)
    episodes = play_episodes(state.policy, alignment_jobs(state.alignment_items, PLAYS), settings.play)
    record.alignment_set = set_gradient(state.policy, state.optimizer, episodes, settings.update)
    if record.alignment_set.vector is not None:
        record.watch = EnvGradients(record.alignment_set.vector)


def credit(state, settings, record) -> None:
    """Before the advantages (step 6), in a measured iteration with --designer-alignment W: each
    new design's reading, from the gradient of its own no-hint samples alone, on the weights
    that wrote it, before the update (the agent's adapter under --separate-adapters): a small
    backward pass, the direction the update's grouping finds (with --normalize-std the update
    scales advantages per group, so only nearly). W x (1 + the reading clipped to [-1, 1]) / 2 is
    added to its reward: never negative, so a valid design still earns at least what
    `lowest_valid_reward` says. A design with no informative sample has no reading and earns the
    neutral W / 2 (no evidence either way)."""
    weight, measured = settings.align.designer, record.alignment_set
    if not weight or record.watch is None or measured.floor is None or measured.floor < FLOOR_MIN:
        return
    for p in record.fresh:
        if p.id not in record.scores:
            continue
        own = [e for e in record.trained if e.job.design_id == p.id]
        cos = cosine(gradient(state.policy, state.optimizer, turn_samples(own), settings.update)[0], record.watch.target)
        reading = 0.0 if cos is None else cos / measured.floor
        if cos is not None:
            record.credited[p.id] = reading
        score = record.scores[p.id]
        record.scores[p.id] = dataclasses.replace(score, reward=score.reward + weight * (1.0 + max(-1.0, min(1.0, reading))) / 2)


def readings(record) -> dict[str, float]:
    """After the update: each environment's cosine over the noise floor (none when the set's
    halves agree less than FLOOR_MIN: the set cannot tell a direction from noise then)."""
    floor = record.alignment_set.floor if record.alignment_set else None
    if record.watch is None or floor is None or floor < FLOOR_MIN:
        return {}
    return {env: cos / floor for env, cos in record.watch.cos.items() if cos is not None}


def note(state, settings, record) -> None:
    """The readings into the pool (--alignment-pool) and the memory (--alignment-memory)."""
    record.alignment = readings(record)
    if settings.align.pool and state.pool is not None:
        state.pool.note_alignment(record.alignment)
    if settings.align.memory and state.memory is not None:
        state.memory.note_alignment(record.alignment)
