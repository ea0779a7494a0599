"""Step 1 of an iteration: what the pool gets, from its fillers (`--pool-fill`).

    examples   the hand-written examples (the tier's, or a user's own from --examples-dir) join
               the pool at level 0 without a test, every iteration, up to the pool's size and
               skill cap, never one that left: the fixed pool, the paper's baseline
    designs    the designer writes new designs every --design-every iterations, or sooner when
               the pool is short. Its valid designs play K paired seeds in both arms (steps 2-4)
               and join the pool by those plays (step 5), as many as the budget and the shape
               allow (budget // K, and the valid designs a regeneration plays); the others wait
               in the store, the memory's valid designs. The store's designs are played on fresh
               seeds (K no-hint plays each, in the room the new designs leave) after a re-skin
               check against the archive as it is then: those that waited whenever there is
               room, those last seen inside the band when the pool is short: the paper's setting
    both       the examples from the first iteration, and the designer adding to them

This is the one place that asks which filler the run has: the pool's rules, replay, the level
moves and the update are the same for every environment, whoever wrote it. A user's folder is
read and gated here too, once, at the start of a run (`own_examples`).
"""
from __future__ import annotations

import dataclasses
import random
import time

from spade_mini.agent import Playable
from spade_mini.designer import design_environments, skill_schedule
from spade_mini.envs import SKILL_LINE, HandEnv, read_folder
from spade_mini.gate import GateSettings, admit
from spade_mini.run import distributed
from spade_mini.sandbox import SandboxedEnv

FILLERS = {"examples": ("examples",), "designs": ("designs",), "both": ("examples", "designs")}
DESIGNS_PER_SKILL = 2  # designs of one skill per iteration, so the per-skill baseline has a group


def fill(state, settings, record) -> None:
    """Step 1: the examples join, the designer writes, the store's designs come back (each as
    `--pool-fill` says); the new valid designs the budget can play become `record.fresh`, K
    paired seeds each, the others `record.waiting`; the store's, `record.stored`."""
    pool, it = state.pool, record.number
    fillers = FILLERS[settings.fill.fill]
    if not settings.fill.keep:  # each iteration's pool holds only what this iteration filled
        pool.clear()
    if "examples" in fillers:
        record.filled += pool.fill(example_rows(pool, state.examples, settings.design.gate), it)
    shape = settings.shape  # new designs played this iteration: what the budget and the shape allow
    room = min(len(distributed.share(shape.no_hint_episodes)) // max(1, shape.plays),
               len(distributed.share(shape.valid_designs())))
    design = budgeted(settings.design, settings.fill, pool.spent)
    if "designs" in fillers and pool.due(it, settings.fill.design_every) and design is not None:
        slots = distributed.share(settings.shape.slots)  # this rank's design slots (all, in one process)
        skills = skill_schedule(state.skills, it, settings.shape.slots, group=DESIGNS_PER_SKILL)
        started = time.monotonic()
        record.designs = design_environments(
            state.policy, skills[slots.start:slots.stop], state.corpus, state.memory, state.rng,
            design, iteration=it, first_slot=slots.start, archive=state.archive)
        pool.spent["attempts"] += len(record.designs)
        pool.spent["seconds"] += time.monotonic() - started
    valid = [d for d in record.designs if d.valid]
    record.fresh = [Playable(d.id, d.skill.key, d.skill.setting, d.source, d, settings.shape.plays,
                             levels=d.validation.levels) for d in valid[:room]]
    record.waiting = [d.id for d in valid[room:]]  # valid, but the budget plays no more: into the store
    if "designs" in fillers:
        record.stored = from_store(state, settings, room - len(record.fresh), it, played=pool.short())


def budgeted(design, fill, spent: dict):
    """The regeneration's design settings within what the run's budget leaves (--design-budget:
    attempts, --design-budget-s: seconds), or None once it is spent."""
    attempts = fill.budget - spent["attempts"] if fill.budget else None
    seconds = fill.budget_s - spent["seconds"] if fill.budget_s else None
    if (attempts is not None and attempts <= 0) or (seconds is not None and seconds <= 0):
        return None
    cap = design.cap if attempts is None else min(design.cap or attempts, attempts)
    clock = design.max_seconds if seconds is None else min(design.max_seconds or seconds, seconds)
    return dataclasses.replace(design, cap=cap, max_seconds=clock)


def from_store(state, settings, room: int, iteration: int, played: bool = True) -> list[Playable]:
    """Up to `room` of the store's designs (pool.stored; with `played` False, only those never
    played), K no-hint plays each at the level they reached; one that re-skins what the archive
    admitted since is marked broken in the memory."""
    taken = []
    for r in state.pool.stored(state.memory, iteration):
        if len(taken) >= room:
            break
        if not played and (r.no_hint_solve_rate is not None or r.pool_rate is not None):
            continue
        why = (state.archive.reskin_of(r.source, limits=settings.design.gate.limits, skip=r.id)
               if settings.design.novelty and state.archive is not None else None)
        if why:
            state.memory.invalidate(r.id, f"duplicate: {why}")
            continue
        taken.append(Playable(r.id, r.skill, r.setting, r.source, None, settings.shape.plays, level=r.level,
                              levels=r.levels))
    return taken


def example_rows(pool, examples: list[HandEnv], gate: GateSettings) -> list[tuple]:
    """The examples not yet in the pool nor retired, as Pool.fill takes them (the number of
    levels each says it has, read from a sandboxed child)."""
    rows = []
    for e in examples:
        env_id = f"example-{e.name}"
        if env_id not in pool.ids() and env_id not in pool.retired:
            with SandboxedEnv(e.source, limits=gate.limits) as env:
                rows.append((env_id, e.skill, e.setting, e.source, env.levels))
    return rows


def own_examples(folder: str, skills: list[str], gate: GateSettings, count_tokens=None, say=print) -> list[HandEnv]:
    """A user's environments (--examples-dir), each through the run's gate at level 0 as a design
    is (but for novelty); a refused one is named with its stage and dropped.
    Raises ValueError, one sentence, when the folder holds none that passes."""
    kept = []
    for env in read_folder(folder):
        if env.skill not in skills:
            say(f"examples: refused {env.name}.py at stage `skill`: its line '{SKILL_LINE} {env.skill}' names no "
                f"skill of this run; use one of {', '.join(skills)}")
            continue
        result = admit(env.source, gate, random.Random(env.source), count_tokens=count_tokens)
        if result.ok:
            kept.append(env)
        else:
            say(f"examples: refused {env.name}.py at stage `{result.stage}`: {result.reasons[0]}")
    if not kept:
        raise ValueError(f"no environment in --examples-dir {folder!r} passed the gate (each refusal is printed "
                         "above); mend them, or leave the flag out to use the tier's examples.")
    say(f"examples: {len(kept)} of {folder} passed the gate: {', '.join(e.name for e in kept)}")
    return kept
