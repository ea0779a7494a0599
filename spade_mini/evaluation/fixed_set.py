"""The learning curve of `--eval-every`: the agent alone on held-out environments and fixed seeds.

The one piece of evaluation that training calls (train.py, before the first iteration and every
`--eval-every` iterations). It plays the HELD-OUT set of the run's tier (`--examples`:
envs.TIERS), which neither the warm start, the fixed pool, the memory nor the designer's prompt
ever shows, on the same seeds every time, greedily and without a hint. So every point of the
curve scores the same items with a deterministic policy, and two points (or two runs of one
tier) can be compared item by item (evaluation/intervals.py's paired tests).
Omitted on purpose: the hint arm (the curve is of the agent alone) and sampling (a greedy reply
makes an item's outcome a function of the weights).
"""
from __future__ import annotations

from dataclasses import dataclass

from spade_mini.agent import Job, play_episodes, play_settings
from spade_mini.envs import tier

EVAL_SEED = 10**6  # curve seeds start here: training draws its seeds at random, elsewhere


@dataclass(frozen=True)
class CurvePoint:
    metrics: dict       # eval_solve_rate, eval_return, eval_eos_fraction, eval_episodes
    items: list[dict]   # one row per episode: env, seed, return, solved (for eval.jsonl)


def curve_items(cfg) -> list[tuple[str, str, int]]:
    """(environment name, source, seed) of every episode the curve plays, in a fixed order."""
    envs = tier(cfg.examples, cfg.setting, held_out=True)
    return [(e.name, e.source, EVAL_SEED + k) for e in envs for k in range(cfg.eval_seeds)]


def fixed_set_metrics(policy, cfg) -> CurvePoint:
    """Play every curve item once, greedily, without a hint."""
    items = curve_items(cfg)
    if not items:
        raise ValueError(f"the {cfg.examples!r} tier holds no held-out {cfg.setting} environment to evaluate")
    jobs = [Job(source, seed, "no_hint", None, name) for name, source, seed in items]
    episodes = play_episodes(policy, jobs, **play_settings(cfg), temperature=0.0)
    turns = [t for e in episodes for t in e.turns]
    rows = [{"env": name, "seed": seed, "return": e.ret, "solved": e.ret > 0}
            for (name, _, seed), e in zip(items, episodes)]
    return CurvePoint({"eval_solve_rate": sum(r["solved"] for r in rows) / len(rows),
                       "eval_return": sum(e.ret for e in episodes) / len(episodes),
                       "eval_eos_fraction": sum(t.finished for t in turns) / len(turns) if turns else None,
                       "eval_episodes": len(rows)}, rows)
