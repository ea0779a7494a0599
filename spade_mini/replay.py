"""Step 5 of an iteration: the active pool's plays. New designs are admitted at their first
informative level, the pool is replayed no-hint on fresh seeds with the rest of the
iteration's no-hint budget, and its levels move (pool.py holds the rules as plain data; this
module plays, validates levels and scores).

A level is an environment of its own: before a new design is tried at a higher level, or a
pool environment is raised, that level passes validation under the run's turn cap, turn
budget and K (`level_validates`). The fixed-pool baseline fills the same pool with the tier's
examples (`examples_to_fill`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import random
from dataclasses import dataclass

from spade_mini.agent import Job, play_episodes, play_settings, turn_budget
from spade_mini.pool import Pool, spread
from spade_mini.reward import score_playables
from spade_mini.sandbox import SandboxedEnv, SandboxLimits, validate_env

ADMIT_CLIMB = 2  # levels above 0 a new design too easy at level 0 is tried at (K no-hint plays each) before admission


@dataclass
class Playable:
    """An environment the agent plays this iteration: a new design, a pool or fixed-pool one."""
    id: str
    skill: str
    setting: str
    source: str
    design: object | None = None   # the Design, when the designer wrote it this iteration
    plays: int = 0                 # its no-hint episodes this iteration
    level: int = 0                 # the difficulty level it is played at
    levels: int = 1                # how many it has


def play_the_rest(state, cfg, fresh: list, scores: dict, trained: list, rest: int, it: int):
    """Step 5: the active pool admits each new design at its first informative level (those too
    easy at level 0 are tried up to ADMIT_CLIMB levels higher, K no-hint plays a level), then the
    rest of the `rest` no-hint episodes are played on fresh seeds: over the pool, and what it
    leaves over the new designs (so both arms play the same no-hint episodes); then the pool
    moves levels and retires what is done. Returns (what was played, its episodes, its usable
    ones, the metrics of the step)."""
    pool, admitted, plan, played, usable, from_examples = state.active_pool, [], [], [], [], []
    k = cfg.plays_per_design
    if pool is not None:
        climbing = []
        for p in (p for p in fresh if not scores[p.id].failure):
            returns = [e.ret for e in trained if e.job.design_id == p.id]
            if pool.admit(p.id, p.skill, p.setting, p.source, returns, it, levels=p.levels):
                admitted.append(p.id)
            elif too_easy(returns, pool.band) and p.levels > 1:
                climbing.append(p)
        for _ in range(ADMIT_CLIMB):  # the next level of each design still too easy
            climbing = [dataclasses.replace(p, level=p.level + 1, plays=k) for p in climbing
                        if p.level + 1 < p.levels and level_validates(state, cfg, p.source, p.level + 1)]
            climbing = climbing[:max(0, rest - len(played)) // k]
            if not climbing:
                break
            eps, ok, climb_scores = play_plan(state, cfg, climbing)
            played, usable, plan = played + eps, usable + ok, plan + climbing
            returns = {p.id: [e.ret for e in ok if e.job.design_id == p.id] for p in climbing}
            admitted += [p.id for p in climbing if not climb_scores[p.id].failure and pool.admit(
                p.id, p.skill, p.setting, p.source, returns[p.id], it, level=p.level, levels=p.levels)]
            climbing = [p for p in climbing if not climb_scores[p.id].failure and too_easy(returns[p.id], pool.band)]
        if not pool.envs and cfg.pool_examples_when_empty and not cfg.fixed_pool:  # nothing to play yet
            from_examples = pool.fill(examples_to_fill(pool, state.examples, SandboxLimits(call_timeout_s=cfg.step_timeout_s)), it)
        replay = [Playable(e.id, e.skill, e.setting, e.source, plays=n, level=e.level, levels=e.levels)
                  for e, n in pool.split(rest - len(played), k, state.rng)]
    else:
        replay = []
    left = rest - len(played) - sum(p.plays for p in replay) if pool is not None else 0  # without a pool: as before
    playable = [p for p in fresh if not scores[p.id].failure]
    replay += [dataclasses.replace(p, plays=n) for p, n in zip(playable, spread(left, len(playable))) if n]
    eps, ok, replay_scores = play_plan(state, cfg, replay)
    played, usable, plan = played + eps, usable + ok, plan + replay
    stats = {"unspent": rest - len(played), "admitted_ids": list(admitted)}  # both popped before the row
    if pool is not None:
        changes, gone_before = [], len(pool.life)
        for p in replay:
            if p.id not in pool.ids():
                continue
            if replay_scores[p.id].failure:  # it crashed in play: out at once, and broken in the memory
                pool.drop(p.id, replay_scores[p.id].failure, it)
                if state.memory is not None:
                    state.memory.invalidate(p.id, replay_scores[p.id].failure)
                changes.append("crashed")
            else:
                pool.record(p.id, [e.ret for e in ok if e.job.design_id == p.id])
        changes += [what for _, what in pool.review(
            it, lambda e, level: level_validates(state, cfg, e.source, level))]
        if state.memory is not None:  # what the designer's prompts show: the pool now, and who left
            for row in pool.life[gone_before:] + [pool.life_row(e) for e in pool.envs]:
                state.memory.note_pool(row)
        levels = [e.level for e in pool.envs]
        stats.update({"pool_size": len(pool.envs), "pool_in_band": pool.in_band(), "pool_admitted": len(admitted),
                      "pool_from_examples": len(from_examples),
                      "pool_retired": sum(c not in ("raised", "lowered") for c in changes),
                      "pool_retired_why": sorted(c for c in changes if c not in ("raised", "lowered")),
                      "pool_raised": changes.count("raised"), "pool_lowered": changes.count("lowered"),
                      "pool_level_mean": sum(levels) / len(levels) if levels else None,
                      "pool_level_max": max(levels, default=None),
                      "pool_skills": len({e.skill for e in pool.envs}),
                      "pool_replayed": sum(p.id in pool.ids() or p.id in pool.retired for p in replay),
                      "replay_episodes": len(played)})
    return plan, played, usable, stats


def play_plan(state, cfg, plan: list):
    """Play each Playable's `plays` no-hint episodes on fresh seeds at its level, in one batch:
    (episodes, the usable ones, scores by id)."""
    jobs = [Job(p.source, state.rng.randrange(2**31), "no_hint", None, p.id, p.level) for p in plan for _ in range(p.plays)]
    episodes = play_episodes(state.policy, jobs, **play_settings(cfg))
    scores, usable = score_playables(plan, episodes, cfg, state.potential)
    return episodes, usable, scores


def too_easy(returns: list[float], band: tuple[float, float]) -> bool:
    """No-hint returns at or above the band's top: a level up may be at the agent's edge."""
    return bool(returns) and sum(r > 0 for r in returns) / len(returns) >= band[1]


def level_validates(state, cfg, source: str, level: int) -> bool:
    """Does `level` of this environment pass validation under the run's turn cap, turn budget
    and K (a level is an environment of its own)? Its seeds come from the source and the level,
    so a resumed run validates as the uninterrupted one did; each answer is kept in the State."""
    key = (hashlib.sha256(source.encode()).hexdigest(), level)
    if key not in state.levels_valid:
        state.levels_valid[key] = validate_env(
            source, limits=SandboxLimits(call_timeout_s=cfg.step_timeout_s), play_turns=cfg.max_turns,
            require_solution=cfg.require_solution, rng=random.Random(f"{level}:{source}"), level=level,
            action_fits=turn_budget(state.policy, cfg.turn_max_new_tokens), min_instances=cfg.plays_per_design).ok
    return state.levels_valid[key]


def examples_to_fill(pool: Pool, examples: list, limits: SandboxLimits) -> list[tuple]:
    """The tier's examples not yet in the pool nor retired, as Pool.fill takes them (the
    number of levels each says it has, read from a sandboxed child)."""
    rows = []
    for e in examples:
        env_id = f"example-{e.name}"
        if env_id not in pool.ids() and env_id not in pool.retired:
            with SandboxedEnv(e.source, limits=limits) as env:
                rows.append((env_id, e.skill, e.setting, e.source, env.levels))
    return rows
