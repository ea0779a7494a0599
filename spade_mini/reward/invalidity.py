"""What a design that failed validation earns: a graded penalty by how far it got, a constant
one, or no sample at all.

A small model writes mostly broken code at first. If every broken design earned the same
penalty, a batch of them would have zero advantages and the designer would learn nothing; graded
rewards rank "does not parse" below "reset fails" below "the probe episode never ends", all
strictly below the least a valid design can earn (`regret.lowest_valid_reward`), so the designer
learns from its first iteration. Pure functions of plain numbers, like regret.py.
"""
from __future__ import annotations

from collections.abc import Sequence

from spade_mini.envs import ADMISSION_STAGES, STAGES

INVALID_POLICIES = ("graded", "constant", "drop")

# How far an invalid design got, lowest first: no code block, does not parse, no single Env
# class or a forbidden import, load or __init__ fails, reset fails or is not deterministic, step
# fails or returns bad types, the probe episode crashes or never ends, its solution() does not
# win (or blind play does), a hidden choice decides the answer, too few instances; then the
# gate's texts: the observation shows the answer, the hint gives it away, the question asks for
# what step() does not pay; a crash during real play after it validated; and at the top a copy
# or re-skin of a known environment: a valid environment that teaches nothing new, which must
# still earn more than any broken one (the warm start trains the designer on the examples
# themselves). Every one earns less than the least a valid design earns.
INVALID_STAGES = ("no_code", *STAGES[:-1], *ADMISSION_STAGES, "play", "duplicate")  # envs/__init__.py
STAGE_LEVEL = {stage: level for level, stage in enumerate(INVALID_STAGES)}


def graded_invalid_reward(stage: str, invalid_reward: float, valid_floor: float,
                          finished: bool = True) -> float:
    """An invalid design's reward by the stage it failed at: evenly spaced STRICTLY between
    `invalid_reward` and `valid_floor`, higher the further validation got. So a batch of invalid
    designs still ranks better and worse attempts, and the designer learns from the start.
    A reply cut off at its token budget earns half a step less than one that ended by itself
    at the same stage: stopping is the first thing a small model has to learn."""
    if stage not in STAGE_LEVEL:
        raise ValueError(f"unknown validation stage {stage!r}; use one of {INVALID_STAGES}")
    if not invalid_reward < valid_floor:
        raise ValueError(f"graded invalid rewards need invalid_reward < {valid_floor} (the lowest "
                         f"valid reward), got {invalid_reward}")
    step = (valid_floor - invalid_reward) / (len(INVALID_STAGES) + 1)
    return invalid_reward + (STAGE_LEVEL[stage] + 1 - (0 if finished else 0.5)) * step


def apply_invalid_policy(designs: Sequence[tuple[str, float, bool]], policy: str = "graded",
                         invalid_reward: float = -1.0, valid_floor: float = 0.0) -> list[float | None]:
    """Final designer rewards for (stage, reward, finished) triples, in order; stage "valid"
    marks a valid design (its reward is kept), None marks a dropped design; finished says the
    reply ended with EOS.

    "graded": an invalid design earns graded_invalid_reward(stage, ...). "constant": it earns
    `invalid_reward`. Either pushes a small model toward code that loads and runs. "drop" (the
    reference): an invalid design yields no designer sample. An invalid design's own reward is
    ignored.
    """
    if policy not in INVALID_POLICIES:
        raise ValueError(f"unknown invalid-design policy {policy!r}; use one of {INVALID_POLICIES}")
    out: list[float | None] = []
    for stage, reward, finished in designs:
        if stage == "valid":
            out.append(float(reward))
        elif policy == "drop":
            out.append(None)
        elif policy == "constant":
            out.append(float(invalid_reward))
        else:
            out.append(graded_invalid_reward(stage, invalid_reward, valid_floor, finished))
    return out
