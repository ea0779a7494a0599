"""The learning curve of `--eval-every`: the agent's no-hint return on fixed environments and seeds.

The one piece of evaluation that training calls (train.py, between iterations). It plays the
bundled examples, the same environments the warm start and the fixed pool train on, on seeds
training never draws; what that can and cannot show is in the README's learning-curve section.
Omitted on purpose: the hint arm (the curve is of the agent alone).
"""
from __future__ import annotations

from spade_mini.agent import Job, play_episodes, play_settings

EVAL_SEED = 10**6  # fixed-set seeds start here: training draws its seeds at random, elsewhere


def fixed_set_metrics(policy, cfg) -> dict:
    """The agent's no-hint return on the bundled examples, on fixed seeds that training never
    draws. It samples as training does, from a fixed torch seed, and
    leaves the training random state as it found it."""
    import torch

    from spade_mini.envs import EXAMPLES
    envs = [e for e in EXAMPLES if cfg.setting in ("mix", e.setting)]
    jobs = [Job(e.source, EVAL_SEED + k, "no_hint", None, e.name) for e in envs for k in range(cfg.eval_seeds)]
    state = torch.get_rng_state()
    torch.manual_seed(cfg.seed)
    try:
        episodes = play_episodes(policy, jobs, **play_settings(cfg))
    finally:
        torch.set_rng_state(state)
    turns = [t for e in episodes for t in e.turns]
    return {"eval_return": sum(e.ret for e in episodes) / len(episodes),
            "eval_solve_rate": sum(e.ret > 0 for e in episodes) / len(episodes),
            "eval_eos_fraction": sum(t.finished for t in turns) / len(turns) if turns else None}
