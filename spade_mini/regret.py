"""Reward arithmetic of SPADE: episode returns, hint-based regret, designer rewards, baselines.

This module is the "score" step of one SPADE iteration. Everything here is a pure function of
plain Python numbers (no torch, no numpy), so it can be read, tested and reused in isolation:

- `episode_return`: one episode's rewards -> one number in [-1, 1] (the agent's return).
- `solve_rate`: the fraction of episodes with return > 0 (the reference's "win rate").
- `hint_regret`: mean return with the hint minus mean return without it, over PAIRED seeds.
- `plateau`, `designer_reward`: turn regret and the no-hint solve rate into the designer's reward
  (plain regret, the paper's blend, and the two ablations: solve rate only, learning potential).
- `LearningPotential`: per-skill fast and slow moving averages of returns.
- `apply_invalid_policy`: designs that failed validation get a penalty, or are dropped.
- `group_advantages`: reward minus the mean reward of its group (the REINFORCE baseline).

Deliberately omitted: the reference's reward scale factor (min(n_actor/n_env * regen, 50)): a
constant multiplier on advantages that only rescales the learning rate; its delayed reward window
(designer rewards averaged over several steps); its "micro learning potential" (unused in the
paper recipe); the -0.5 step-timeout penalty (overwritten by the blend in the reference).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

DESIGNER_REWARD_KINDS = ("regret", "blend", "solve_rate", "learning_potential")
INVALID_POLICIES = ("penalty", "drop")
# The paper's blend: regret saturates at 0.15 (a 15-point gain from the hint is "enough").
REGRET_SATURATION = 0.15
BLEND_PLATEAU_WEIGHT = 0.6
BLEND_REGRET_WEIGHT = 0.4


def _clip(x: float, low: float, high: float) -> float:
    return max(low, min(high, x))


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def episode_return(rewards: Sequence[float], terminated: bool, mode: str = "last") -> float:
    """The agent's return for one episode, clipped to [-1, 1].

    "last" (the reference): the last step's reward if the episode terminated, else 0, so an
    episode cut by the turn cap earns nothing however it went. "sum": the sum of all step rewards,
    for environments that pay partial credit along the way. A crash inside `step` is the caller's
    business: it passes the rewards ending in the crash penalty (-1) with terminated=True.
    """
    if mode == "last":
        raw = rewards[-1] if (terminated and rewards) else 0.0
    elif mode == "sum":
        raw = sum(rewards)
    else:
        raise ValueError(f"unknown return mode {mode!r}; use 'last' or 'sum'")
    return _clip(float(raw), -1.0, 1.0)


def solve_rate(returns: Sequence[float]) -> float:
    """Fraction of episodes that were solved, where solved means return > 0.

    Matches the reference's win rate for 0/1 rewards, and still counts partial credit (a "sum"
    return of 0.5) as a solve. An empty list has solve rate 0.
    """
    if not returns:
        return 0.0
    return sum(1 for r in returns if r > 0) / len(returns)


def hint_regret(no_hint: Sequence[float], hint: Sequence[float]) -> float:
    """mean(hint returns) - mean(no-hint returns), the two arms played on the SAME K seeds.

    Pairing (no_hint[i] and hint[i] share seed i) makes this a paired difference, which has lower
    variance than comparing two independently seeded arms. Positive regret means the environment is
    solvable (the hint helps) but not yet solved alone: the frontier the designer should aim at.
    """
    if len(no_hint) != len(hint):
        raise ValueError(f"paired arms differ in length: {len(no_hint)} no-hint vs {len(hint)} hint")
    if not no_hint:
        raise ValueError("hint_regret needs at least one paired seed")
    return _mean(hint) - _mean(no_hint)


def plateau(rate: float, low: float = 0.15, inner_low: float = 0.4,
            inner_high: float = 0.6, high: float = 0.85) -> float:
    """1 for rates in [inner_low, inner_high], linear down to 0 at low and at high, 0 outside.

    Rewards environments of middling difficulty: neither always solved nor never solved.
    """
    if not low < inner_low <= inner_high < high:
        raise ValueError("plateau needs low < inner_low <= inner_high < high")
    if inner_low <= rate <= inner_high:
        return 1.0
    if low < rate < inner_low:
        return (rate - low) / (inner_low - low)
    if inner_high < rate < high:
        return (high - rate) / (high - inner_high)
    return 0.0


def designer_reward(kind: str, *, regret: float, no_hint_solve_rate: float,
                    lp: float | None = None) -> float:
    """The designer's raw reward for one valid environment.

    regret:             max(0, regret), the public reference's "regret_based" reward.
    blend:              0.6 * plateau(solve rate) + 0.4 * clip(regret / 0.15, 0, 1), the paper.
    solve_rate:         plateau(solve rate), the ablation without the hint signal.
    learning_potential: the given `lp` (see LearningPotential), the other ablation.
    """
    if kind == "regret":
        return max(0.0, regret)
    if kind == "blend":
        reg = _clip(regret / REGRET_SATURATION, 0.0, 1.0)
        return BLEND_PLATEAU_WEIGHT * plateau(no_hint_solve_rate) + BLEND_REGRET_WEIGHT * reg
    if kind == "solve_rate":
        return plateau(no_hint_solve_rate)
    if kind == "learning_potential":
        if lp is None:
            raise ValueError("designer reward 'learning_potential' needs lp=")
        return float(lp)
    raise ValueError(f"unknown designer reward {kind!r}; use one of {DESIGNER_REWARD_KINDS}")


@dataclass(frozen=True)
class DesignScore:
    """How one valid environment scored: both arms' solve rates, regret, designer reward."""
    no_hint_solve_rate: float
    hint_solve_rate: float
    regret: float
    reward: float


def score_design(kind: str, no_hint: Sequence[float], hint: Sequence[float],
                 lp: float | None = None) -> DesignScore:
    """Score one environment from its paired per-seed returns (no-hint arm, hint arm)."""
    regret = hint_regret(no_hint, hint)
    rate = solve_rate(no_hint)
    reward = designer_reward(kind, regret=regret, no_hint_solve_rate=rate, lp=lp)
    return DesignScore(rate, solve_rate(hint), regret, reward)


@dataclass
class LearningPotential:
    """Per-skill fast and slow exponential moving averages of the mean no-hint return.

    Each update with a batch of returns r (their mean) moves both averages toward r:
        mu <- (1 - g) * mu + g * r,    g = gamma_fast (0.98) or gamma_slow (0.85),
    so the "fast" average is almost the latest value and the "slow" one lags behind. The first
    update of a skill sets both to r. The value is |mu_fast - mu_slow|: large while the agent's
    return on that skill is moving (it is learning there), near 0 once it has settled. The
    reference multiplies this by 1 / (2 * (gamma_fast - gamma_slow)) for logging; we do not.
    """
    gamma_fast: float = 0.98
    gamma_slow: float = 0.85
    fast: dict[Hashable, float] = field(default_factory=dict)
    slow: dict[Hashable, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.gamma_slow < self.gamma_fast <= 1.0:
            raise ValueError("need 0 < gamma_slow < gamma_fast <= 1")

    def update(self, skill: Hashable, returns: Sequence[float]) -> float:
        """Fold this batch's returns for `skill` into both averages; return the new potential."""
        if not returns:
            raise ValueError("LearningPotential.update needs at least one return")
        r = _mean(returns)
        if skill not in self.fast:
            self.fast[skill] = self.slow[skill] = r
        else:
            self.fast[skill] = (1 - self.gamma_fast) * self.fast[skill] + self.gamma_fast * r
            self.slow[skill] = (1 - self.gamma_slow) * self.slow[skill] + self.gamma_slow * r
        return self.value(skill)

    def preview(self, skill: Hashable, returns: Sequence[float]) -> float:
        """The potential `update` would return for these returns, without changing anything,
        so that designs of one skill can be told apart before the skill's averages move."""
        fast, slow = dict(self.fast), dict(self.slow)
        value = self.update(skill, returns)
        self.fast, self.slow = fast, slow
        return value

    def value(self, skill: Hashable) -> float:
        """|fast - slow| for this skill; 0 for a skill never seen."""
        if skill not in self.fast:
            return 0.0
        return abs(self.fast[skill] - self.slow[skill])


def apply_invalid_policy(designs: Sequence[tuple[bool, float]], policy: str = "penalty",
                         invalid_reward: float = -1.0) -> list[float | None]:
    """Final designer rewards for (valid, reward) pairs, in order; None marks a dropped design.

    "penalty": an invalid design earns `invalid_reward`, so a small model is pushed toward code
    that loads and runs. "drop" (the reference): an invalid design yields no designer sample.
    The reward of an invalid design is ignored either way.
    """
    if policy not in INVALID_POLICIES:
        raise ValueError(f"unknown invalid-design policy {policy!r}; use one of {INVALID_POLICIES}")
    out: list[float | None] = []
    for valid, reward in designs:
        if valid:
            out.append(float(reward))
        else:
            out.append(None if policy == "drop" else float(invalid_reward))
    return out


def group_advantages(values: Sequence[float], groups: Sequence[Hashable],
                     normalize_std: bool = False, eps: float = 1e-6) -> list[float]:
    """Each value minus the mean value of its group: REINFORCE with a group-mean baseline.

    Groups: the plays of one environment for the agent, the designs of one skill for the
    designer. Subtracting the group mean leaves the gradient unbiased and removes what the whole
    group shares (an easy environment pays everyone). A group of one therefore gets advantage 0.
    With normalize_std the centred values are divided by (population std of the group + eps), as
    in GRPO; a group whose values are all equal still gets 0.
    """
    if len(values) != len(groups):
        raise ValueError(f"{len(values)} values but {len(groups)} group labels")
    members: dict[Hashable, list[float]] = defaultdict(list)
    for v, g in zip(values, groups):
        members[g].append(float(v))
    mean = {g: _mean(vs) for g, vs in members.items()}
    std = {g: (sum((v - mean[g]) ** 2 for v in vs) / len(vs)) ** 0.5 for g, vs in members.items()}
    advantages = []
    for v, g in zip(values, groups):
        a = float(v) - mean[g]
        if normalize_std:
            a = a / (std[g] + eps)
        advantages.append(a)
    return advantages
