"""The active pool: environments at the agent's edge, kept and replayed, their levels moved.

A valid design costs minutes of designing and validating on a CPU; played once on K seeds it
teaches K episodes and is thrown away. The pool keeps the ones worth learning from and moves
their difficulty, as RLVE moves a hand-built environment's level once accuracy passes a
threshold: an environment lasts as long as it has a level at the agent's edge. In the loop's order:

    due      the designer runs every `design_every` iterations, or sooner when the pool is short
    fill     the hand-written examples (or a user's own, --examples-dir) join at level 0
             without a test, up to the pool's size, never one that left (fill.py says when:
             with --pool-fill examples or both)
    admit    a new valid design joins at the first level whose no-hint plays were informative:
             some won, some lost, a solve rate strictly inside `band` (replay.py tries its
             levels from 0 up)
    skills   whoever wrote it, no environment joins if its skill would hold more than half of
             the pool (one alone is always allowed)
    replay   every iteration the pool is played no-hint on fresh seeds: the iteration's budget
             in groups of K, environments drawn with weight p(1 - p) of their recent no-hint
             rate (the gradient's signal peaks at 0.5), each with a small floor; with
             --alignment-pool, times 1 plus its recent alignment (alignment.py)
    review   once a full `window` of plays at its level has come in: a rate at or above the
             band's top raises the level (validated first; no next level, or one that fails
             validation: retired "learned"); at or below the bottom lowers it (at level 0:
             retired "too hard"); an environment not yet judged `max_age` iterations after
             its last move ages out; one judged inside the band stays; with --alignment-pool,
             one whose last two alignment readings are below minus the floor leaves "misaligned"
    store    when the pool is short, the run's own valid designs the memory holds are played
             again on fresh seeds and join by those plays: those that waited (more were valid
             than the budget could play) and those last seen inside the band (never one that
             left the band or crashed; one that aged out only after as many iterations away)

Everything here is plain data: a checkpoint keeps `to_dict()` (pool.json) and `--resume`
restores it with `from_dict`. The pool plays and validates nothing itself: replay.py plays what
`split` returns and tells `review` whether a level validates. The rules are the same for every
environment, whoever wrote it; `origin` (example, design, memory) only says where it came from.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from spade_mini.reward.bands import POOL_BAND, inside, rate_of

BAND = POOL_BAND  # no-hint solve rates worth learning from (reward/bands.py)
AGE_REASON = "age"  # a retirement that may come back from the memory (the others may not)
MIN_WEIGHT = 0.02   # the least replay weight: an environment at rate 0 or 1 is still played now and then
ALIGNED_READINGS = 2  # the alignment readings the weight averages; this many below -1 in a row: "misaligned"


@dataclass
class PoolEnv:
    """One environment in the pool, with the no-hint returns it has had at its level."""
    id: str
    skill: str
    setting: str
    source: str
    admitted: int            # the iteration it joined
    origin: str = "design"   # "design" (admitted after its first plays), "memory" (from the store) or "example"
    returns: list[float] = field(default_factory=list)  # no-hint returns at `level`, oldest first
    replays: int = 0         # iterations it was replayed in
    level: int = 0           # the difficulty level it is played at
    levels: int = 1          # how many it has
    since: int = 0           # the iteration of its admission or last level move
    moves: list = field(default_factory=list)  # [iteration, from level, to level] per move
    plays: int = 0           # no-hint plays in the pool, at any level
    alignment: list = field(default_factory=list)  # its alignment readings over the floor, oldest first (alignment.py)

    def rate(self, window: int) -> float | None:
        return rate_of(self.returns[-window:])


def spread(total: int, count: int) -> list[int]:
    """`total` plays over `count` environments, sizes differing by at most one."""
    base, extra = divmod(total, count) if count else (0, 0)
    return [base + (i < extra) for i in range(count)]


def informative(returns: list[float], band: tuple[float, float] = BAND) -> bool:
    """Some won and some lost, at a solve rate (return > 0) strictly inside the band."""
    return inside(rate_of(returns), band)


def weight(rate: float | None, alignment: list[float] = ()) -> float:
    """How much a replay draw favours an environment: p(1 - p) of its recent rate (unknown: 0.25),
    times 1 plus the mean of its last ALIGNED_READINGS alignment readings clipped to [-1, 1] (none: 1)."""
    recent = list(alignment)[-ALIGNED_READINGS:]
    aligned = 1.0 + max(-1.0, min(1.0, sum(recent) / len(recent))) if recent else 1.0
    return max(MIN_WEIGHT, (0.25 if rate is None else rate * (1.0 - rate)) * aligned)


class Pool:
    def __init__(self, band: tuple[float, float] = BAND, max_age: int = 4, window: int = 16,
                 min_size: int = 2, max_size: int = 16):
        if not 0.0 <= band[0] <= band[1] <= 1.0:
            raise ValueError(f"a pool band is two solve rates low <= high in [0, 1], not {band}")
        self.band, self.max_age, self.window = tuple(band), max_age, window
        self.min_size, self.max_size = min_size, max_size
        self.envs: list[PoolEnv] = []
        self.retired: dict[str, tuple[str, int]] = {}  # id -> (why it left, the iteration it left)
        self.life: list[dict] = []  # one row per environment that left: its life in the pool
        self.spent = {"attempts": 0, "seconds": 0.0}  # the designer's over the run (--design-budget, -s)

    # --- what the loop asks --------------------------------------------------------------------
    def short(self) -> bool:
        return len(self.envs) < self.min_size

    def due(self, iteration: int, design_every: int) -> bool:
        """Does the designer run this iteration?"""
        return iteration % max(1, design_every) == 0 or self.short()

    def ids(self) -> set[str]:
        return {e.id for e in self.envs}

    def get(self, env_id: str) -> PoolEnv | None:
        return next((e for e in self.envs if e.id == env_id), None)

    def in_band(self) -> int:
        """How many pool environments have a recent no-hint rate inside the band."""
        return sum(informative(e.returns[-self.window:], self.band) for e in self.envs)

    def skill_room(self, skill: str) -> bool:
        """Can one more environment of `skill` join without that skill holding more than half
        of the pool (one alone is always allowed)?"""
        same = sum(e.skill == skill for e in self.envs)
        return same + 1 <= max(1, (len(self.envs) + 1) // 2)

    def admit(self, env_id: str, skill: str, setting: str, source: str, returns: list[float],
              iteration: int, origin: str = "design", level: int = 0, levels: int = 1) -> bool:
        """Add an environment whose no-hint `returns` at `level` were informative (False: not
        admitted: full, its skill's half taken, or not informative)."""
        if (env_id in self.ids() or len(self.envs) >= self.max_size or not self.skill_room(skill)
                or not informative(returns, self.band)):
            return False
        self.envs.append(PoolEnv(env_id, skill, setting, source, iteration, origin, list(returns),
                                 level=level, levels=levels, since=iteration))
        return True

    def fill(self, examples: list[tuple[str, str, str, str, int]], iteration: int) -> list[PoolEnv]:
        """The examples' filler: every (id, skill, setting, source, levels) not yet in the pool
        and never retired joins at level 0 without a test, up to the pool's size and its skill cap."""
        added = []
        for env_id, skill, setting, source, levels in examples:
            if (env_id in self.ids() or env_id in self.retired or len(self.envs) >= self.max_size
                    or not self.skill_room(skill)):
                continue
            self.envs.append(PoolEnv(env_id, skill, setting, source, iteration, "example",
                                     levels=levels, since=iteration))
            added.append(self.envs[-1])
        return added

    def stored(self, memory, iteration: int) -> list:
        """The store: the run's own valid designs the memory holds that may be played again, the
        most recent first: never played (they waited for room), or last seen inside the band;
        not in the pool, never one that left the band or crashed, one that aged out only after
        as many iterations away. They join only by fresh plays (replay.py), as a new design does."""
        if memory is None:
            return []
        out = []
        for r in reversed(memory.records):
            why, left = self.retired.get(r.id, (None, 0))
            rate = r.no_hint_solve_rate if r.pool_rate is None else r.pool_rate
            if (r.iteration < 0 or not r.valid or r.id in self.ids()
                    or (why is not None and (why != AGE_REASON or iteration - left < self.max_age))
                    or (rate is not None and not inside(rate, self.band))
                    or not self.skill_room(r.skill)):
                continue
            out.append(r)
        return out

    def split(self, episodes: int, group: int, rng: random.Random) -> list[tuple[PoolEnv, int]]:
        """Share `episodes` no-hint plays over the pool: groups of at least `group` plays (so each
        has a baseline), as many environments as that allows, drawn without replacement with
        weight p(1 - p) of their recent rate; the plays are spread evenly over those."""
        if episodes <= 0 or not self.envs:
            return []
        count = max(1, min(len(self.envs), episodes // max(1, group)))
        # weighted sampling without replacement: the largest u ** (1 / w) (Efraimidis-Spirakis)
        keys = [(rng.random() ** (1.0 / weight(e.rate(self.window), e.alignment)), i) for i, e in enumerate(self.envs)]
        chosen = [self.envs[i] for _, i in sorted(keys, reverse=True)[:count]]
        return list(zip(chosen, spread(episodes, count)))

    def clear(self) -> None:
        """Empty the pool and forget who left (--pool-keep false: each iteration starts anew)."""
        self.envs, self.retired, self.life = [], {}, []

    def drop(self, env_id: str, why: str, iteration: int) -> None:
        """Remove an environment at once (it crashed in play), never to come back."""
        for e in [e for e in self.envs if e.id == env_id]:
            self._leave(e, why, iteration)

    def record(self, env_id: str, returns: list[float]) -> None:
        """The no-hint returns an environment had in this iteration's replay, at its level."""
        e = self.get(env_id)
        if e is not None:
            e.returns = (e.returns + list(returns))[-4 * self.window:]
            e.replays += 1
            e.plays += len(returns)

    def note_alignment(self, readings: dict[str, float]) -> None:
        """Each environment's alignment reading over the noise floor (--alignment-pool): its
        replay weight follows them, and `review` retires one that stays below -1."""
        for env_id, reading in readings.items():
            if (e := self.get(env_id)) is not None:
                e.alignment = (e.alignment + [reading])[-4 * ALIGNED_READINGS:]

    def review(self, iteration: int, validates=lambda env, level: True) -> list[tuple[PoolEnv, str]]:
        """Move levels and retire, judged on a full window of plays at the current level;
        `validates(env, level)` says whether a higher level passes validation. Returns
        (environment, what happened) for each change: "raised", "lowered", or why it left."""
        done = []
        for e in list(self.envs):
            rate = e.rate(self.window)
            judged = len(e.returns) >= self.window
            if len(e.alignment) >= ALIGNED_READINGS and max(e.alignment[-ALIGNED_READINGS:]) < -1.0:
                done.append((e, self._leave(e, "misaligned", iteration)))
            elif judged and rate >= self.band[1]:
                if e.level + 1 < e.levels and validates(e, e.level + 1):
                    done.append((e, self._move(e, e.level + 1, iteration)))
                else:
                    done.append((e, self._leave(e, "learned", iteration)))
            elif judged and rate <= self.band[0]:
                done.append((e, self._move(e, e.level - 1, iteration) if e.level > 0
                             else self._leave(e, "too hard", iteration)))
            elif not judged and self.max_age and iteration - e.since + 1 >= self.max_age:
                done.append((e, self._leave(e, AGE_REASON, iteration)))
        return done

    def _move(self, e: PoolEnv, level: int, iteration: int) -> str:
        e.moves.append([iteration, e.level, level])
        what = "raised" if level > e.level else "lowered"
        e.level, e.returns, e.since = level, [], iteration
        return what

    def _leave(self, e: PoolEnv, why: str, iteration: int) -> str:
        self.envs.remove(e)
        self.retired[e.id] = (why, iteration)
        self.life.append(self.life_row(e, iteration, why))
        return why

    def life_row(self, e: PoolEnv, left: int | None = None, why: str | None = None) -> dict:
        """One row of the life table: environment, admitted, levels, plays, why it left."""
        return {"id": e.id, "skill": e.skill, "origin": e.origin, "admitted": e.admitted,
                "left": left, "why": why, "level": e.level, "levels": e.levels, "moves": list(e.moves),
                "plays": e.plays, "rate": e.rate(self.window)}

    def life_table(self) -> list[dict]:
        """Every environment the pool has held: those that left, then those still in it."""
        return self.life + [self.life_row(e) for e in self.envs]

    # --- checkpoints -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"band": list(self.band), "max_age": self.max_age, "window": self.window,
                "min_size": self.min_size, "max_size": self.max_size,
                "envs": [asdict(e) for e in self.envs], "retired": {k: list(v) for k, v in self.retired.items()},
                "life": self.life, "spent": dict(self.spent)}

    @classmethod
    def from_dict(cls, data: dict) -> "Pool":
        pool = cls(tuple(data["band"]), data["max_age"], data["window"], data["min_size"], data["max_size"])
        pool.envs = [PoolEnv(**e) for e in data["envs"]]
        pool.retired = {k: tuple(v) for k, v in data["retired"].items()}
        pool.life = list(data.get("life", []))
        pool.spent = {**pool.spent, **data.get("spent", {})}  # a pool saved before the budget spent nothing
        return pool

    @classmethod
    def from_config(cls, cfg) -> "Pool":
        return cls((cfg.pool_low, cfg.pool_high), cfg.pool_max_age, cfg.pool_window,
                   cfg.pool_min, cfg.pool_max)
