"""The gate an environment passes before the agent trains on it: one admission call.

A design, a level of a pool environment about to be played, and a user's own environment
(`--examples-dir`) pass the same call, `admit`, which returns a `Validation` whose `stage` says
where it was refused (envs.STAGES, then envs.ADMISSION_STAGES, then `duplicate`), with reasons:

    validation  sandbox.validate_env under the run's rules: its turn cap, the agent's tokens a
                turn (an action the agent cannot write in one turn cannot be played), and
                MIN_INSTANCES distinct instances (one K for every preset); the strict gate
                (`decided`, `instances`) is part of it
    texts       (answers.py, on ANSWER_SEEDS seeds, read in a solver child) the observation must
                not show the answer, the hint must not give it away, the question must ask for
                what step() pays
    novelty     (novelty.py) not a re-skin of the archive: the bundled examples, the held-out
                environments and every design admitted before it

    novelty.py   Archive, fingerprint: the re-skin check, and the exact copy check it refines
    answers.py   given_away, leaky_hint, wrong_question, wrong_value, unshown_form: the texts against
                 the answers
"""
from __future__ import annotations

import dataclasses
import random
import re
import time
from dataclasses import dataclass

from spade_mini.envs import MAX_TURNS, MIN_INSTANCES
from spade_mini.envs.actions import as_played, as_written
from spade_mini.gate.answers import given_away, leaky_hint, unshown_form, wrong_question, wrong_value
from spade_mini.gate.exact import fingerprint
from spade_mini.gate.novelty import Archive
from spade_mini.reward.leaks import answer_of, tokens
from spade_mini.sandbox import SandboxError, SandboxLimits, Validation, solve, validate_env
from spade_mini.sandbox.env import SEED_BOUND

ANSWER_SEEDS = 16  # seeds whose observation, solution and hint the text checks read
TEXT_BUDGET_S = 10.0  # to read them
TEXT_CHECKS = (("given_away", given_away), ("hint", leaky_hint), ("question", wrong_question), ("question", wrong_value),
               ("question", unshown_form))

__all__ = ["GateSettings", "admit", "check", "describe", "turn_budget", "Archive", "fingerprint", "ANSWER_SEEDS"]


@dataclass(frozen=True)
class GateSettings:
    limits: SandboxLimits | None = None
    play_turns: int = MAX_TURNS          # the run's turn cap: a solution must win within it
    turn_tokens: int | None = None       # the agent's tokens a turn (None: actions are not measured)
    require_solution: bool = True
    min_instances: int = MIN_INSTANCES   # distinct instances over 16 seeds (the `instances` stage)


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


def admit(source: str, gate: GateSettings, rng: random.Random, *, count_tokens=None, level: int = 0,
          archive: Archive | None = None) -> Validation:
    """Validation, then the text checks (with a solution() to read), then the novelty check
    against `archive` (none: not checked); the first refusal's stage and reasons, or valid."""
    result = check(source, gate, rng, count_tokens=count_tokens, level=level)
    if not result.ok or not gate.require_solution:
        return result
    deadline = time.monotonic() + TEXT_BUDGET_S
    seeds = [rng.randrange(SEED_BOUND) for _ in range(ANSWER_SEEDS)]
    try:
        solved = solve(source, seeds, max_actions=gate.play_turns, limits=gate.limits, deadline=deadline, level=level)
    except SandboxError as exc:
        return refused(result, "given_away", f"its observations and answers could not be read: {type(exc).__name__}: {exc}")
    seen = [(s.seed, s.observation, tuple(as_played(a, s.tool_use) for a in s.actions), s.hint) for s in solved]
    result = dataclasses.replace(result, shape=shape_of(seen))
    for stage, reasons_of in TEXT_CHECKS:
        reasons = reasons_of(seen)
        if reasons:
            return refused(result, stage, *reasons)
    why = archive.reskin_of(source, limits=gate.limits) if archive else None
    return refused(result, "duplicate", f"duplicate: {why}") if why else result


def shape_of(seen: list[tuple]) -> dict:
    """What an environment asks, for the designer's coverage line: the form of its first answer
    (a number, a word, a phrase, a tool call), its turns (the longest solution) and whether its
    observations carry a worked example."""
    first = [actions[0] for _, _, actions, _ in seen if actions]
    answers = [answer_of(a) for a in first]
    form = ("tool" if any(a is None for a in answers) else
            "number" if all(re.fullmatch(r"-?\d+(\.\d+)?", a.strip()) for a in answers) else
            "word" if all(len(tokens(a)) == 1 for a in answers) else "phrase")
    return {"form": form, "turns": max((len(a) for _, _, a, _ in seen), default=0),
            "example": any("Example" in obs for _, obs, _, _ in seen)}


def describe(source: str, gate: GateSettings, seeds: int = 4) -> dict:
    """`shape_of` an example (a bundled one's, at the start of a run); {} when it cannot be read."""
    try:
        solved = solve(source, list(range(seeds)), max_actions=MAX_TURNS, limits=gate.limits)
    except SandboxError:
        return {}
    return shape_of([(s.seed, s.observation, tuple(as_played(a, s.tool_use) for a in s.actions or ()), s.hint)
                     for s in solved])


def refused(result: Validation, stage: str, *reasons: str) -> Validation:
    return dataclasses.replace(result, ok=False, stage=stage, reasons=list(reasons))
