"""The gate an environment passes before the agent plays it: validation under the run's rules.

A design, a level of a pool environment that is about to be played, and a user's own
environment (`--examples-dir`) all pass the same call, `check`: `sandbox.validate_env` with the
run's turn cap, the agent's token budget a turn (an action the agent cannot write in one turn
cannot be played), and K, the distinct instances it must have. Omitted here: the copy check
(designer/novelty.py), which needs the memory.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from spade_mini.envs import MAX_TURNS
from spade_mini.envs.actions import as_written
from spade_mini.sandbox import SandboxLimits, Validation, validate_env


@dataclass(frozen=True)
class GateSettings:
    limits: SandboxLimits | None = None
    play_turns: int = MAX_TURNS          # the run's turn cap: a solution must win within it
    turn_tokens: int | None = None       # the agent's tokens a turn (None: actions are not measured)
    require_solution: bool = True
    min_instances: int = 0               # distinct instances over 16 seeds (the `instances` stage)


def turn_budget(count_tokens, max_new_tokens: int):
    """validate_env's `action_fits` for a run: why one action cannot be written in one turn of
    `max_new_tokens` tokens (the action as the agent writes it, boxed unless it is already or is
    tool markup, and the end of the turn), or None."""
    def fits(action: str) -> str | None:
        needed = count_tokens(as_written(action)) + 1  # as the agent writes it, and EOS
        return None if needed <= max_new_tokens else (
            f"the action {action[:60]!r} takes {needed} tokens with the end of the turn, more than "
            f"the {max_new_tokens} the agent may write in one turn of this run")
    return fits


def check(source: str, gate: GateSettings, rng: random.Random, *, count_tokens=None, level: int = 0) -> Validation:
    """Validate `source` at `level` as this run plays it; `count_tokens` (the policy's) measures
    each solution action against the turn's token budget."""
    fits = turn_budget(count_tokens, gate.turn_tokens) if count_tokens and gate.turn_tokens else None
    return validate_env(source, limits=gate.limits, play_turns=gate.play_turns, require_solution=gate.require_solution,
                        rng=rng, action_fits=fits, level=level, min_instances=gate.min_instances)
