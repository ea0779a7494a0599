"""Reward arithmetic of SPADE: episode returns, hint-based regret, designer rewards, baselines.

This module is the "score" step of one SPADE iteration. Everything here is a pure function of
plain Python numbers (no torch, no numpy), so it can be read, tested and reused in isolation:

- `episode_return`: one episode's rewards -> one number in [-1, 1] (the agent's return).
- `solve_rate`: the fraction of episodes with return > 0 (the reference's "win rate").
- `designer_return`: a return as every designer reward reads it, inside the contract's [0, 1].
- `hint_regret`: mean return with the hint minus mean return without it, over PAIRED seeds.
- `regret_noise_floor`: what max(0, regret) pays on average for a USELESS hint, by K and solve rate.
- `plateau`, `designer_reward`: turn regret and the no-hint solve rate into the designer's reward
  (plain regret, the paper's blend, and the two ablations: solve rate only, learning potential,
  whose per-skill averages live in learning_potential.py).
- `score_design`: one environment's paired returns -> solve rates, regret, designer reward.
- `lowest_valid_reward`: the least a valid design can earn (invalidity.py grades the invalid
  ones strictly below it).
- `group_advantages`: reward minus the mean reward of its group (the REINFORCE baseline).

Deliberately omitted: the reference's reward scale factor (min(n_actor/n_env * regen, 50)): a
constant multiplier on advantages that only rescales the learning rate; its delayed reward window
(designer rewards averaged over several steps); its "micro learning potential" (unused in the
paper recipe); the -0.5 step-timeout penalty (overwritten by the blend in the reference).

Crashes and failed resets are filtered out by the caller before regret is measured (see
plays.score_playables); a design with no hint has no regret (`regret=None`), not a noisy zero.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from spade_mini.reward.bands import GATE, PLATEAU, inside

DESIGNER_REWARD_KINDS = ("regret", "blend", "gated_blend", "solve_rate", "learning_potential")
REGRET_ESTIMATORS = ("debiased", "clipped")
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


def designer_return(r: float) -> float:
    """A return as every designer reward reads it: clipped to the contract's [0, 1] (1.0 for a
    win, 0 for anything else), so that no designer reward, ablations included, pays an
    environment for ending episodes below 0 (an environment that ends every episode at -1 would
    otherwise earn a learning potential of 1.3, and a hinted win after an unhinted -1 a regret
    of 2). The agent still trains on the raw return."""
    return min(1.0, max(0.0, float(r)))


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


def plateau(rate: float, low: float = PLATEAU[0], inner_low: float = PLATEAU[1],
            inner_high: float = PLATEAU[2], high: float = PLATEAU[3]) -> float:
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


def regret_noise_floor(k: int, p: float) -> float:
    """E[max(0, regret)] over K paired seeds when the hint is USELESS and both arms solve with
    probability p, independently per seed (the null hypothesis).

    Each seed's difference d = hint - no_hint is +1 or -1 with probability q = p(1 - p) each, else
    0; regret is the mean of K such d. Exact sum over the counts (a of +1, b of -1):
        sum  K! / (a! b! (K-a-b)!) * q^a * q^b * (1 - 2q)^(K-a-b) * max(0, (a - b) / K).
    At p = 0.5 it is 0.1875 (K=2), 0.1367 (K=4), 0.0982 (K=8): as large as the true regret of a
    genuinely useful hint, which is why max(0, regret) alone makes a designer chase noise. (This
    documents the bias; the debiased reward uses `sign_flip_floor`, which needs no model of p.)
    """
    if k < 1:
        raise ValueError("regret_noise_floor needs k >= 1")
    q = p * (1.0 - p)
    total = 0.0
    for a in range(k + 1):
        for b in range(k + 1 - a):
            if a > b:
                ways = math.comb(k, a) * math.comb(k - a, b)
                total += ways * q ** (a + b) * (1.0 - 2.0 * q) ** (k - a - b) * (a - b) / k
    return total


def sign_flip_floor(diffs: Sequence[float]) -> float:
    """E[max(0, mean(s_i * d_i))] over independent random signs s_i = +-1: what max(0, regret)
    would pay for these paired differences d_i if the hint were useless.

    Under that null hypothesis the two arms of one seed are exchangeable, so each difference is
    as likely to have come out with the other sign. Exact, by the distribution of partial sums.
    """
    sums = {0.0: 1.0}
    for d in diffs:
        nxt: dict[float, float] = defaultdict(float)
        for total, prob in sums.items():
            for step in (d, -d):
                nxt[round(total + step, 9)] += prob / 2
        sums = nxt
    return sum(prob * max(0.0, total) for total, prob in sums.items()) / len(diffs)


def regret_reward(pairs: Sequence[tuple[float, float]], estimator: str = "debiased") -> float:
    """The designer's regret reward from (no-hint, hint) returns on K paired seeds.

    clipped:  max(0, regret), the paper's. Its expectation is biased UP by the clip for every
              noisy environment: a useless hint at solve rate 0.5 earns 0.14 at K = 4 (see
              regret_noise_floor), while a deterministic environment earns 0, so the designer is
              pushed toward coin flips rather than toward environments the hint helps.
    debiased: max(0, regret) - sign_flip_floor(differences). It is exactly 0 in expectation when
              the hint is useless, whatever the solve rate and however difficulty varies between
              seeds (tests/test_regret.py simulates it), so only a real hint effect ranks a design
              up; a useful hint keeps most of its reward (true regret 0.3 at K = 4: about 0.2).
              The clip stays, so a misleading hint costs at most the floor. We make it the default
              because the designer's gradient is the difference between designs of one skill, and
              a bias that grows with an environment's noise is exactly a difference between designs.
    """
    diffs = [h - a for a, h in pairs]
    regret = _mean(diffs)
    if estimator == "clipped":
        return max(0.0, regret)
    if estimator == "debiased":
        return max(DEBIASED_FLOOR, max(0.0, regret) - sign_flip_floor(diffs))
    raise ValueError(f"unknown regret estimator {estimator!r}; use one of {REGRET_ESTIMATORS}")


def designer_reward(kind: str, *, regret: float | None, no_hint_solve_rate: float,
                    potential: float | None = None, regret_term: float | None = None) -> float:
    """The designer's raw reward for one valid environment.

    regret:             `regret_term` when given (see regret_reward), else max(0, regret) (the
                        public reference's "regret_based" reward).
    blend:              0.6 * plateau(solve rate) + 0.4 * clip(regret / 0.15, 0, 1), the paper's
                        recipe (4B and 30B), with `regret_term` for regret when given: it peaks
                        where the agent's own signal peaks (solve rates near 0.5).
    gated_blend:        the blend, with its regret term paid only where the agent's no-hint
                        plays were informative (0 < solve rate < 1). Under `blend` a design the
                        agent never solves alone earns up to 0.4 from regret, more than an
                        in-band design whose hint does not help (0.6 * plateau(0.25) = 0.24),
                        so the designer is paid to leave the band; gated, such a design earns 0.
    solve_rate:         plateau(solve rate), the ablation without the hint signal.
    learning_potential: the given `potential` (see LearningPotential), the other ablation.
    regret None (no hint, so nothing measured) contributes 0 to `regret` and both blends.
    """
    if kind == "regret":
        if regret is None:
            return 0.0
        return max(0.0, regret) if regret_term is None else regret_term
    if kind in ("blend", "gated_blend"):
        term = regret if regret_term is None else regret_term
        if kind == "gated_blend" and not inside(no_hint_solve_rate, GATE):
            term = None  # never or always solved alone: nothing for the agent to learn, no regret paid
        reg = 0.0 if term is None else _clip(term / REGRET_SATURATION, 0.0, 1.0)
        return BLEND_PLATEAU_WEIGHT * plateau(no_hint_solve_rate) + BLEND_REGRET_WEIGHT * reg
    if kind == "solve_rate":
        return plateau(no_hint_solve_rate)
    if kind == "learning_potential":
        if potential is None:
            raise ValueError("designer reward 'learning_potential' needs potential=")
        return float(potential)
    raise ValueError(f"unknown designer reward {kind!r}; use one of {DESIGNER_REWARD_KINDS}")


NO_HINT = "no hint: regret not measured"


@dataclass(frozen=True)
class DesignScore:
    """How one valid environment scored: both arms' solve rates, regret, designer reward.
    regret and hint_solve_rate are None when no hinted pair was played; `note` says why, and
    `failure` (a crash in play) makes the design count as invalid."""
    no_hint_solve_rate: float
    hint_solve_rate: float | None
    regret: float | None
    reward: float
    note: str | None = None
    failure: str | None = None


def score_design(kind: str, no_hint: Sequence[float], pairs: Sequence[tuple[float, float]], *,
                 potential: float | None = None, estimator: str = "debiased") -> DesignScore:
    """Score one environment: `no_hint` holds every usable no-hint return (solve rate, learning
    potential), `pairs` the (no-hint, hint) returns of the seeds played with a hint in both arms
    (regret). No pairs means no hint was shown: no regret, and a stated note. Every return is
    read through `designer_return`."""
    no_hint = [designer_return(r) for r in no_hint]
    pairs = [(designer_return(a), designer_return(h)) for a, h in pairs]
    rate = solve_rate(no_hint)
    if not pairs:
        reward = designer_reward(kind, regret=None, no_hint_solve_rate=rate, potential=potential)
        return DesignScore(rate, None, None, reward, NO_HINT)
    alone, helped = [a for a, _ in pairs], [h for _, h in pairs]
    regret = hint_regret(alone, helped)
    term = regret_reward(pairs, estimator)
    reward = designer_reward(kind, regret=regret, no_hint_solve_rate=rate, potential=potential, regret_term=term)
    return DesignScore(rate, solve_rate(helped), regret, reward)


DEBIASED_FLOOR = -0.5  # the lowest debiased regret reward we allow (see lowest_valid_reward)


def lowest_valid_reward(kind: str, estimator: str = "debiased") -> float:
    """The least a VALID design can earn: 0 for every reward but the debiased regret, which can
    dip below 0 by its noise floor; it is clipped at -0.5 (reached only by a single paired seed
    that came out against the hint, for returns in [0, 1]) so every graded invalid reward stays
    below every valid one."""
    return DEBIASED_FLOOR if (kind == "regret" and estimator == "debiased") else 0.0


def group_advantages(values: Sequence[float], groups: Sequence[Hashable],
                     normalize_std: bool = False, eps: float = 1e-6) -> list[float]:
    """Each value minus the mean value of its group: REINFORCE with a group-mean baseline.

    Groups: the plays of one environment for the agent, the designs of one skill for the
    designer. Subtracting the group mean leaves the gradient unbiased and removes what the whole
    group shares (an easy environment pays everyone). A group of one therefore gets advantage 0.
    With normalize_std the centred values are divided by (population std of the group + eps), as
    in GRPO. A group whose values are all equal gets exactly 0 (eight returns of 0.1 have a float
    mean that differs from 0.1 by 1e-17, which would make an uninformative sample look informative).
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
        a = 0.0 if len(set(members[g])) == 1 else float(v) - mean[g]
        if normalize_std:
            a = a / (std[g] + eps)
        advantages.append(a)
    return advantages
