"""Step 5 of an iteration: the pool's plays. New designs are admitted at their first informative
level, the pool is replayed no-hint on fresh seeds with the rest of the iteration's no-hint
budget, and its levels move (pool.py holds the rules as plain data; this module plays,
validates levels and scores). The rules are the same for every environment in the pool,
whoever wrote it.

A level is an environment of its own: before a new design is tried at a higher level, or a
pool environment is raised, that level passes the run's gate (`level_validates` below, through `gate.admit`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import random
from dataclasses import dataclass, field

from spade_mini.agent import Playable, play_episodes
from spade_mini.gate import admit
from spade_mini.pool import spread
from spade_mini.reward import score_playables
from spade_mini.reward.bands import rate_of
from spade_mini.run import distributed

ADMIT_CLIMB = 2  # levels above 0 a new design too easy at level 0 is tried at (K no-hint plays each) before admission


@dataclass
class PoolReport:
    """What step 5 did to the pool (the metrics row counts it)."""
    admitted: list[str] = field(default_factory=list)  # new designs that joined, by id
    from_store: list[str] = field(default_factory=list)  # the store's designs played again, by id
    back: list[str] = field(default_factory=list)      # of those, the ones that joined
    changes: list[str] = field(default_factory=list)   # per change: "raised", "lowered", or why one left
    replayed: list[str] = field(default_factory=list)  # pool environments replayed, by id
    episodes: int = 0                                  # no-hint episodes this step played
    unspent: int = 0                                   # of the budget, what had nothing to play


def play_the_rest(state, settings, record) -> None:
    """Step 5: admit each new design at its first informative level, then play the rest of this
    rank's no-hint budget on fresh seeds: over the pool, and what it leaves over the new designs
    (so every arm plays the same no-hint episodes); then move levels and retire. A design
    admitted now is rescored on all its level-0 plays of this iteration."""
    pool, k, report = state.pool, settings.shape.plays, PoolReport()
    rest = max(0, len(distributed.share(settings.shape.no_hint_episodes)) - sum(p.plays for p in record.fresh))
    played = admit_new(state, settings, record, rest, report)
    played += admit_stored(state, settings, record, rest - played, report)
    replay = [Playable(e.id, e.skill, e.setting, e.source, plays=n, level=e.level, levels=e.levels)
              for e, n in pool.split(rest - played, k, state.rng)]
    left = rest - played - sum(p.plays for p in replay)
    playable = [p for p in record.fresh if not record.scores[p.id].failure]
    replay += [dataclasses.replace(p, plays=n) for p, n in zip(playable, spread(left, len(playable))) if n]
    replay_scores, usable = play_plan(state, settings, record, replay)
    played += sum(p.plays for p in replay)
    report.replayed = [p.id for p in replay if p.id in pool.ids()]
    report.episodes, report.unspent = played, rest - played
    crashed = []
    for p in replay:
        if p.id not in pool.ids():
            continue
        if replay_scores[p.id].failure:  # it crashed in play: out at once, and broken in the memory
            pool.drop(p.id, replay_scores[p.id].failure, record.number)
            crashed.append((p.id, replay_scores[p.id].failure))
            report.changes.append("crashed")
        else:
            pool.record(p.id, [e.ret for e in usable if e.job.design_id == p.id])
    gone_before = len(pool.life)
    report.changes += [what for _, what in pool.review(
        record.number, lambda e, level: level_validates(state, settings, e.source, level))]
    life = pool.life[gone_before:] + [pool.life_row(e) for e in pool.envs]
    if state.memory is not None:  # what the designer's prompts show: the pool now, who left, what broke
        for row in distributed.gather_concat(life)[0]:  # every rank's pool (torchrun), in rank order
            state.memory.note_pool(row)
        for env_id, why in distributed.gather_concat(crashed)[0]:
            state.memory.invalidate(env_id, why)
    rescore_admitted(state, settings, record, set(report.admitted) & {p.id for p in replay if p.level == 0})
    record.pool = report


def admit_new(state, settings, record, rest: int, report: PoolReport) -> int:
    """Each new design joins at level 0 if its K no-hint plays were informative; one too easy
    there is tried up to ADMIT_CLIMB levels higher (each validated first, K plays a level from
    `rest`) and joins at the first informative one. Returns the episodes the climbs played."""
    pool, k, it, played = state.pool, settings.shape.plays, record.number, 0
    climbing = []
    for p in (p for p in record.fresh if not record.scores[p.id].failure):
        returns = [e.ret for e in record.trained if e.job.design_id == p.id]
        if pool.admit(p.id, p.skill, p.setting, p.source, returns, it, levels=p.levels):
            report.admitted.append(p.id)
        elif too_easy(returns, pool.band) and p.levels > 1:
            climbing.append(p)
    for _ in range(ADMIT_CLIMB):  # the next level of each design still too easy
        climbing = [dataclasses.replace(p, level=p.level + 1, plays=k) for p in climbing
                    if p.level + 1 < p.levels and level_validates(state, settings, p.source, p.level + 1)]
        climbing = climbing[:max(0, rest - played) // k]
        if not climbing:
            break
        scores, usable = play_plan(state, settings, record, climbing)
        played += sum(p.plays for p in climbing)
        returns = {p.id: [e.ret for e in usable if e.job.design_id == p.id] for p in climbing}
        report.admitted += [p.id for p in climbing if not scores[p.id].failure and pool.admit(
            p.id, p.skill, p.setting, p.source, returns[p.id], it, level=p.level, levels=p.levels)]
        climbing = [p for p in climbing if not scores[p.id].failure and too_easy(returns[p.id], pool.band)]
    return played


def admit_stored(state, settings, record, rest: int, report: PoolReport) -> int:
    """The store's designs (fill.from_store) join as a new design does, by K fresh no-hint plays
    at the level they reached, from `rest`; one that does not join keeps that rate in the memory
    (out of the band it is not taken again), one that crashes is broken there. Returns the
    episodes played."""
    stored = record.stored[:max(0, rest) // max(1, settings.shape.plays)]
    if not stored:
        return 0
    scores, usable = play_plan(state, settings, record, stored)
    report.from_store = [p.id for p in stored]
    for p in stored:
        returns = [e.ret for e in usable if e.job.design_id == p.id]
        if scores[p.id].failure:
            if state.memory is not None:
                state.memory.invalidate(p.id, scores[p.id].failure)
        elif state.pool.admit(p.id, p.skill, p.setting, p.source, returns, record.number, origin="memory",
                              level=p.level, levels=p.levels):
            report.back.append(p.id)
        elif state.memory is not None:
            state.memory.note_pool({"id": p.id, "level": p.level, "levels": p.levels, "rate": rate_of(returns),
                                    "why": None})
    return sum(p.plays for p in stored)


def play_plan(state, settings, record, plan: list[Playable]) -> tuple[dict, list]:
    """Play each Playable's `plays` no-hint episodes on fresh seeds at its level, in one batch,
    into the record; (their scores by id, the usable episodes)."""
    episodes = play_episodes(state.policy, [job for p in plan for job in p.jobs(state.rng)], settings.play)
    scores, usable = score_playables(plan, episodes, settings.score, state.potential)
    record.episodes += episodes
    record.trained += usable
    record.playables += plan
    return scores, usable


def rescore_admitted(state, settings, record, ids: set) -> None:
    """A design admitted this iteration and replayed at its level 0 in the same iteration (the
    same policy, before the update; `ids`) is scored on all those no-hint plays, not only its
    first K: its solve rate (and any crash) on more seeds; its regret stays on the paired seeds.
    A design the pool refused keeps the score of its first K plays."""
    mine = [p for p in record.fresh if p.id in ids]
    if not mine:
        return
    ids = {p.id for p in mine}
    rescored, _ = score_playables(mine, [e for e in record.episodes if e.job.design_id in ids and e.job.level == 0],
                                  settings.score, state.potential)
    for p in mine:
        record.scores[p.id] = dataclasses.replace(rescored[p.id], note=record.scores[p.id].note)


def too_easy(returns: list[float], band: tuple[float, float]) -> bool:
    """No-hint returns at or above the band's top: a level up may be at the agent's edge."""
    rate = rate_of(returns)
    return rate is not None and rate >= band[1]


def level_validates(state, settings, source: str, level: int) -> bool:
    """Does `level` of this environment pass the run's gate (all but novelty)? Its seeds come
    from the source and the level, so a resumed run validates as the uninterrupted one did; each
    answer is kept in the State."""
    key = (hashlib.sha256(source.encode()).hexdigest(), level)
    if key not in state.levels_valid:
        state.levels_valid[key] = admit(source, settings.design.gate, random.Random(f"{level}:{source}"),
                                        count_tokens=state.policy.count_tokens, level=level).ok
    return state.levels_valid[key]
