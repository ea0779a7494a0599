"""The learning curve of `--eval-every`: the agent alone on held-out environments and fixed seeds.

The one piece of evaluation that training calls (train.py, before the first iteration and every
`--eval-every` iterations). It plays the HELD-OUT set of the run's tier (`--examples`:
envs.TIERS), which neither the warm start, the fixed pool, the memory nor the designer's prompt
ever shows, on the same seeds every time, greedily and without a hint. So every point of the
curve scores the same items with a deterministic policy, and two points (or two runs of one
tier) can be compared item by item (evaluation/intervals.py's paired tests).

An item is a DISTINCT (environment, first observation): seeds that reset an environment to the
same first observation get the same greedy reply, so playing them again adds copies, not
evidence (on the curve's 40 seeds the nine original held-out starters show 175 distinct first
observations of 360). `distinct_items` resets every seed in the sandbox (no model), keeps the
first seed of each observation and counts the seeds it stands for; each is played once, and
the count is kept for a weighted rate. In a multi-turn environment two seeds with one first
observation may go on differently; merging them loses items, it never invents any.
Omitted on purpose: the hint arm (the curve is of the agent alone) and sampling (a greedy reply
makes an item's outcome a function of the weights).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from spade_mini.agent import Job, play_episodes
from spade_mini.settings import play_settings
from spade_mini.envs import tier
from spade_mini.sandbox import SandboxedEnv

EVAL_SEED = 10**6  # curve seeds start here: training draws its seeds at random, elsewhere


@dataclass(frozen=True)
class CurvePoint:
    metrics: dict       # eval_solve_rate, eval_weighted_solve_rate, eval_items, eval_return, ...
    items: list[dict]   # one row per distinct item: env, seed, count, return, solved (eval.jsonl)


@lru_cache(maxsize=256)
def first_observations(source: str, seeds: tuple[int, ...]) -> tuple[str, ...]:
    """The first observation of every seed, read from one sandboxed child."""
    with SandboxedEnv(source) as env:
        return tuple(env.reset(seed=s)[0] for s in seeds)


def distinct_items(envs, seeds: list[int]) -> list[tuple[str, str, int, int]]:
    """(name, source, first seed, count) of every distinct (environment, first observation)."""
    out = []
    for env in envs:
        first: dict[str, list] = {}
        for seed, obs in zip(seeds, first_observations(env.source, tuple(seeds))):
            first.setdefault(obs, [seed, 0])[1] += 1
        out += [(env.name, env.source, seed, count) for seed, count in first.values()]
    return out


def curve_items(cfg) -> list[tuple[str, str, int, int]]:
    """(environment name, source, seed, count) of every distinct item the curve plays, in a fixed order."""
    envs = tier(cfg.examples, cfg.setting, held_out=True)
    return distinct_items(envs, [EVAL_SEED + k for k in range(cfg.eval_seeds)])


def fixed_set_metrics(policy, cfg) -> CurvePoint:
    """Play every distinct curve item once, greedily, without a hint."""
    items = curve_items(cfg)
    if not items:
        raise ValueError(f"the {cfg.examples!r} tier holds no held-out {cfg.setting} environment to evaluate")
    jobs = [Job(source, seed, "no_hint", None, name) for name, source, seed, _ in items]
    episodes = play_episodes(policy, jobs, play_settings(cfg, 0.0))
    turns = [t for e in episodes for t in e.turns]
    rows = [{"env": name, "seed": seed, "count": count, "return": e.ret, "solved": e.ret > 0}
            for (name, _, seed, count), e in zip(items, episodes)]
    seeds = sum(r["count"] for r in rows)
    return CurvePoint({"eval_solve_rate": sum(r["solved"] for r in rows) / len(rows),
                       "eval_weighted_solve_rate": sum(r["solved"] * r["count"] for r in rows) / seeds,
                       "eval_items": len(rows),
                       "eval_return": sum(e.ret for e in episodes) / len(episodes),
                       "eval_eos_fraction": sum(t.finished for t in turns) / len(turns) if turns else None,
                       "eval_episodes": len(rows)}, rows)
