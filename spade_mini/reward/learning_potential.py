"""Learning potential: the reference's ablation of the designer reward, without the hint.

A design is rewarded for how far it moved the agent's no-hint return away from where that skill
used to be: |mean no-hint return of the design - mu_slow(skill)|, with mu_slow a moving average
of the skill's returns from BEFORE this iteration. Returns are read in the contract's [0, 1]
(`regret.designer_return`): an environment that ends every episode at -1 must not score 1.3
where one that keeps the contract scores at most max(mu, 1 - mu). Pure Python, like regret.py.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from statistics import fmean

from spade_mini.reward.regret import designer_return


@dataclass
class LearningPotential:
    """Per-skill fast and slow exponential moving averages of the mean no-hint return, as in
    the public reference (its learning-potential ablation).

    Score: a design's reward is |mean of its no-hint returns - mu_slow(skill)|, where mu_slow
    comes from BEFORE this iteration (0 for a skill never seen). Designs that moved the agent's
    return away from where the skill used to be score high; the per-skill baseline then centres
    them. Update, once per iteration and skill, with the mean r of all that skill's returns:
        mu <- (1 - g) * mu + g * r,    g = gamma_fast (0.98) or gamma_slow (0.85),
    the first update setting both to r. `gap` is the reference's logged "rho",
    |mu_fast - mu_slow| / (2 * (gamma_fast - gamma_slow)); it is not a reward.
    """
    gamma_fast: float = 0.98
    gamma_slow: float = 0.85
    fast: dict[Hashable, float] = field(default_factory=dict)
    slow: dict[Hashable, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.gamma_slow < self.gamma_fast <= 1.0:
            raise ValueError("need 0 < gamma_slow < gamma_fast <= 1")

    def score(self, skill: Hashable, returns: Sequence[float]) -> float:
        """|fmean(returns) - mu_slow(skill)|, against the average from before this iteration."""
        if not returns:
            raise ValueError("LearningPotential.score needs at least one return")
        return abs(fmean(map(designer_return, returns)) - self.slow.get(skill, 0.0))

    def update(self, skill: Hashable, returns: Sequence[float]) -> None:
        """Fold this iteration's returns for `skill` into both averages."""
        if not returns:
            raise ValueError("LearningPotential.update needs at least one return")
        r = fmean(map(designer_return, returns))
        if skill not in self.fast:
            self.fast[skill] = self.slow[skill] = r
        else:
            self.fast[skill] = (1 - self.gamma_fast) * self.fast[skill] + self.gamma_fast * r
            self.slow[skill] = (1 - self.gamma_slow) * self.slow[skill] + self.gamma_slow * r

    def update_many(self, returns: Sequence[tuple[Hashable, float]]) -> None:
        """Fold one iteration's (skill, return) pairs in: each skill's averages move once, with
        the mean of all its returns (the order of the pairs does not matter)."""
        by_skill: dict[Hashable, list[float]] = {}
        for skill, r in returns:
            by_skill.setdefault(skill, []).append(r)
        for skill, rs in by_skill.items():
            self.update(skill, rs)

    def gap(self, skill: Hashable) -> float:
        """The reference's logged rho for this skill; 0 for a skill never seen."""
        if skill not in self.fast:
            return 0.0
        return abs(self.fast[skill] - self.slow[skill]) / (2 * (self.gamma_fast - self.gamma_slow))
