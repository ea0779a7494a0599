"""What the plays of one iteration say: a score per environment, and what the agent trains on.

`score_playables` matches the two arms of every seed and applies the rules that keep regret
honest before `regret.score_design` does the arithmetic. It reads played episodes (agent.py's
`Episode`) by their fields only, so this module imports neither the agent nor the sandbox.
Omitted on purpose: scoring a design from fewer than all of its seeds' arms.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from spade_mini.reward.learning_potential import LearningPotential
from spade_mini.reward.regret import DesignScore, score_design


@dataclass(frozen=True)
class ScoreSettings:
    designer_reward: str = "blend"     # regret.DESIGNER_REWARD_KINDS
    regret_estimator: str = "debiased"  # regret.REGRET_ESTIMATORS


def score_playables(playables: list, episodes: list, settings: ScoreSettings, potential: LearningPotential
                    ) -> tuple[dict, list]:
    """Per environment its DesignScore, and the no-hint episodes the agent trains on.

    Seeds are matched across the arms. A seed whose reset failed in either arm is left out of
    both (and of the agent's baseline): nothing was played. An episode whose environment crashed
    in step() trains nobody, and the crash makes its design count as invalid: a crash must never
    open a gap between the arms. Learning potential scores each design against the skill's
    averages from BEFORE this iteration; the caller then moves each skill's averages once, on
    the whole batch's returns (`LearningPotential.update_many`; in a data-parallel run the
    returns of every rank).
    """
    scores, trained = {}, []
    for p in playables:
        eps = [e for e in episodes if e.job.design_id == p.id]
        hint_arm = {e.job.seed: e for e in eps if e.job.arm == "hint"}
        failed_seeds = {e.job.seed for e in eps if e.crashed == "reset"}
        alone = [e for e in eps if e.job.arm == "no_hint" and e.job.seed not in failed_seeds]
        usable = [e for e in alone if e.crashed is None]
        crash = next((e.end_reason for e in eps if e.crashed == "step"), None)
        pairs = [(e.ret, hint_arm[e.job.seed].ret) for e in usable
                 if e.job.seed in hint_arm and hint_arm[e.job.seed].hint_shown
                 and hint_arm[e.job.seed].crashed is None]
        no_hint = [e.ret for e in usable]
        potential_value = (potential.score(p.skill, no_hint)
                           if no_hint and settings.designer_reward == "learning_potential" else None)
        score = (score_design(settings.designer_reward, no_hint, pairs, potential=potential_value,
                              estimator=settings.regret_estimator)
                 if no_hint else DesignScore(0.0, None, None, 0.0))
        failure = (f"crashed in play: {crash}" if crash else
                   None if no_hint else "no episode could be played (every reset failed)")
        scores[p.id] = dataclasses.replace(score, failure=failure)
        trained += usable
    return scores, trained


def _returns_by_group(episodes: list) -> list[list[float]]:
    """The returns of each baseline group (one environment at one level)."""
    groups: dict[str, list[float]] = {}
    for e in episodes:
        groups.setdefault(e.job.group, []).append(e.ret)
    return list(groups.values())


def informative_episodes(episodes: list) -> int:
    """No-hint episodes in groups (one environment's plays) whose returns differ: the ones
    REINFORCE with a group baseline learns from."""
    return sum(len(rets) for rets in _returns_by_group(episodes) if len(set(rets)) > 1)


def sum_squared_deviations(episodes: list) -> float:
    """Over groups, the sum of (return - group mean)^2: what a group-baseline gradient scales
    with (a count of informative episodes favours big groups)."""
    return sum(sum((r - sum(rs) / len(rs)) ** 2 for r in rs) for rs in _returns_by_group(episodes))


def thin_out(advantages: list[float], sure: list[bool], fraction: float, rng) -> list[float | None]:
    """A cheaper update with the same expected gradient: per sample, the advantage it enters the
    update with, or None (left out). Every sample with `sure[i]` keeps its advantage; each other
    one is kept with probability `fraction`, its advantage divided by `fraction`. The left-out
    samples must still count in their role's token denominator (the loop passes
    `role_token_counts` of kept and left out to the update): then the loss is, in expectation
    over the draw, exactly the loss of all the samples. The loop thins the invalid designs: the
    update reads each at about 1,200 tokens, for a graded reward that varies little."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"the kept fraction must be in (0, 1], got {fraction}")
    if fraction == 1.0:  # no draw: a run without thinning draws what it drew before
        return list(advantages)
    return [a if certain else (a / fraction if rng.random() < fraction else None)
            for a, certain in zip(advantages, sure)]
