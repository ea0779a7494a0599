"""The active pool: environments at the agent's edge, kept and replayed between designs.

A valid design costs minutes of designing and validating on a CPU; played once on K seeds it
teaches K episodes and is thrown away. The pool keeps the ones worth learning from, as the
reference keeps each game for 4 steps and as peers keep a frontier of tasks (R-Zero admits a
question at solver rates 0.3-0.8; Absolute Zero pays 0 at both extremes). In the loop's order:

    due      the designer runs every `design_every` iterations, or sooner when the pool is short
    admit    a new valid design joins when its no-hint plays were informative: some won, some
             lost, at a solve rate inside `band` (played on paired seeds in both arms first, so
             its regret is measured as before)
    replay   every iteration the pool's environments are played no-hint on fresh seeds; the
             iteration's budget of no-hint episodes is split over them (`split`)
    retire   when the no-hint rate over the last `window` plays leaves the band (learned, or too
             hard), when it crashes, or after `max_age` iterations in the pool
    refill   when the pool is short, the run's own designs that the memory saw inside the band
             come back (never one that retired for leaving the band or crashing; one that aged
             out only after as many iterations away)

Everything here is plain data: a checkpoint keeps `to_dict()` (pool.json) and `--resume`
restores it with `from_dict`. The pool plays nothing itself: loop.py plays what `split` returns.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

BAND = (0.1, 0.9)  # no-hint solve rates worth learning from: with 8 seeds, at least one win and one loss
AGE_REASON = "age"  # a retirement that may come back from the memory (the others may not)


@dataclass
class PoolEnv:
    """One environment in the pool, with the no-hint returns it has had there."""
    id: str
    skill: str
    setting: str
    source: str
    admitted: int            # the iteration it joined
    origin: str = "design"   # "design" (admitted after its first plays) or "memory" (re-admitted)
    returns: list[float] = field(default_factory=list)  # no-hint returns, oldest first
    replays: int = 0         # iterations it was replayed in


def spread(total: int, count: int) -> list[int]:
    """`total` plays over `count` environments, sizes differing by at most one."""
    base, extra = divmod(total, count) if count else (0, 0)
    return [base + (i < extra) for i in range(count)]


def informative(returns: list[float], band: tuple[float, float] = BAND) -> bool:
    """Some won and some lost, at a solve rate (return > 0) inside the band."""
    if not returns:
        return False
    rate = sum(r > 0 for r in returns) / len(returns)
    return 0.0 < rate < 1.0 and band[0] <= rate <= band[1]


class Pool:
    def __init__(self, band: tuple[float, float] = BAND, max_age: int = 4, window: int = 16,
                 min_size: int = 2, max_size: int = 16):
        if not 0.0 <= band[0] <= band[1] <= 1.0:
            raise ValueError(f"a pool band is two solve rates low <= high in [0, 1], not {band}")
        self.band, self.max_age, self.window = tuple(band), max_age, window
        self.min_size, self.max_size = min_size, max_size
        self.envs: list[PoolEnv] = []
        self.retired: dict[str, tuple[str, int]] = {}  # id -> (why it left, the iteration it left)

    # --- what the loop asks --------------------------------------------------------------------
    def short(self) -> bool:
        return len(self.envs) < self.min_size

    def due(self, iteration: int, design_every: int) -> bool:
        """Does the designer run this iteration?"""
        return iteration % max(1, design_every) == 0 or self.short()

    def ids(self) -> set[str]:
        return {e.id for e in self.envs}

    def in_band(self) -> int:
        """How many pool environments have a recent no-hint rate inside the band."""
        return sum(informative(e.returns[-self.window:], self.band) for e in self.envs)

    def admit(self, env_id: str, skill: str, setting: str, source: str, returns: list[float],
              iteration: int, origin: str = "design") -> bool:
        """Add an environment whose no-hint `returns` were informative (False: not admitted)."""
        if (env_id in self.ids() or len(self.envs) >= self.max_size
                or not informative(returns, self.band)):
            return False
        self.envs.append(PoolEnv(env_id, skill, setting, source, iteration, origin, list(returns)))
        return True

    def refill(self, memory, iteration: int) -> list[PoolEnv]:
        """While the pool is short: re-admit the run's own valid designs whose plays the memory
        saw inside the band, the most recent first (their recorded rate counts as their plays)."""
        if memory is None:
            return []
        back = []
        low, high = self.band
        for r in reversed(memory.records):
            if not self.short():
                break
            why, left = self.retired.get(r.id, (None, 0))
            if (r.iteration < 0 or not r.valid or r.no_hint_solve_rate is None or r.id in self.ids()
                    or (why is not None and (why != AGE_REASON or iteration - left < self.max_age))
                    or not (0.0 < r.no_hint_solve_rate < 1.0 and low <= r.no_hint_solve_rate <= high)):
                continue
            self.retired.pop(r.id, None)
            self.envs.append(PoolEnv(r.id, r.skill, r.setting, r.source, iteration, "memory"))
            back.append(self.envs[-1])
        return back

    def split(self, episodes: int, group: int) -> list[tuple[PoolEnv, int]]:
        """Share `episodes` no-hint plays over the pool: groups of at least `group` plays (so each
        has a baseline), as many environments as that allows, the least replayed first; the
        plays are spread evenly over those (sizes differ by at most one)."""
        if episodes <= 0 or not self.envs:
            return []
        count = max(1, min(len(self.envs), episodes // max(1, group)))
        chosen = sorted(self.envs, key=lambda e: (e.replays, e.admitted))[:count]
        return list(zip(chosen, spread(episodes, count)))

    def drop(self, env_id: str, why: str, iteration: int) -> None:
        """Remove an environment at once (it crashed in play), never to come back."""
        self.envs = [e for e in self.envs if e.id != env_id]
        self.retired[env_id] = (why, iteration)

    def record(self, env_id: str, returns: list[float]) -> None:
        """The no-hint returns an environment had in this iteration's replay."""
        for e in self.envs:
            if e.id == env_id:
                e.returns = (e.returns + list(returns))[-4 * self.window:]
                e.replays += 1

    def retire(self, iteration: int) -> list[tuple[PoolEnv, str]]:
        """Remove the environments whose time is up; (environment, why) for each. The band is
        judged once a full window of plays has come in since admission's."""
        gone = []
        for e in self.envs:
            recent = e.returns[-self.window:]
            rate = sum(r > 0 for r in recent) / len(recent) if recent else None
            judged = e.replays > 0 and len(recent) >= self.window
            if judged and (rate > self.band[1] or rate == 1.0):
                gone.append((e, "learned"))
            elif judged and (rate < self.band[0] or rate == 0.0):
                gone.append((e, "too hard"))
            elif iteration - e.admitted + 1 >= self.max_age:  # played in max_age iterations
                gone.append((e, AGE_REASON))
        for e, why in gone:
            self.envs.remove(e)
            self.retired[e.id] = (why, iteration)
        return gone

    # --- checkpoints -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"band": list(self.band), "max_age": self.max_age, "window": self.window,
                "min_size": self.min_size, "max_size": self.max_size,
                "envs": [asdict(e) for e in self.envs], "retired": {k: list(v) for k, v in self.retired.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> "Pool":
        pool = cls(tuple(data["band"]), data["max_age"], data["window"], data["min_size"], data["max_size"])
        pool.envs = [PoolEnv(**e) for e in data["envs"]]
        pool.retired = {k: tuple(v) for k, v in data["retired"].items()}
        return pool

    @classmethod
    def from_config(cls, cfg) -> "Pool":
        return cls((cfg.pool_low, cfg.pool_high), cfg.pool_max_age, cfg.pool_window,
                   cfg.pool_min, cfg.pool_max)
