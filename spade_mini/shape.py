"""The shape of one iteration, from the flags alone: one home for the counts that the loop, the
memory plan (run/planning.py) and the dtype probe (policy/dtypes.py) all need.

    slots                design slots a regeneration fills at once, the rows of its first design
                         call (--design-batch; 0: N, --designs-per-iteration)
    plays             K  paired seeds per new design; a replay group is at least this big
    no_hint_episodes     the agent's no-hint episodes an iteration, whoever wrote what it plays
                         (--episodes-per-iteration; 0: N x K), the same in every arm and
                         whatever the design batch
    design_cap           designs one regeneration writes at most (invalid slots are written again)
    valid_wanted         valid designs a regeneration stops at (0: one pass plus the retries)

Plain arithmetic on a Config's fields; this module imports nothing, so `policy/` reads it too.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    slots: int
    plays: int
    no_hint_episodes: int
    design_cap: int
    valid_wanted: int

    @classmethod
    def of(cls, cfg) -> "Shape":
        n, k = cfg.design_batch or cfg.designs_per_iteration, cfg.plays_per_design
        cap = design_cap(n, cfg.design_attempts, cfg.valid_designs, cfg.design_retries)
        return cls(n, k, cfg.episodes_per_iteration or cfg.designs_per_iteration * k, cap, cfg.valid_designs)

    def design_calls(self) -> list[int]:
        """The rows of each design call of a regeneration that writes all `design_cap` attempts
        (the most it costs): calls of N rows, the last one shorter."""
        full, last = divmod(self.design_cap, self.slots) if self.slots else (0, 0)
        return [self.slots] * full + ([last] if last else [])

    def valid_designs(self) -> int:
        """Valid designs a regeneration plays at most: what it stops at, or every slot."""
        return min(self.design_cap, self.valid_wanted or self.slots)

    def play_rows(self, valid: int) -> tuple[int, int]:
        """(rows of the paired play: K seeds x 2 arms per valid new design, rows of the rest of
        the no-hint budget, which replays the pool)."""
        return 2 * valid * self.plays, max(0, self.no_hint_episodes - valid * self.plays)


ATTEMPTS_PER_SLOT = 3  # a regeneration's cap on attempts when --design-attempts is 0


def design_cap(slots: int, attempts: int, valid_wanted: int, retries: int) -> int:
    """Designs one regeneration of `slots` writes at most: until `valid_wanted` are valid, at most
    `attempts` (0: ATTEMPTS_PER_SLOT a slot); without `valid_wanted`, `retries` more passes."""
    return (attempts or ATTEMPTS_PER_SLOT * slots) if valid_wanted > 0 else slots * (1 + retries)

