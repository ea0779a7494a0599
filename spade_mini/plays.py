"""What the plays of one iteration say: a score per environment, and what the agent trains on.

`score_playables` matches the two arms of every seed and applies the rules that keep regret
honest before `regret.score_design` does the arithmetic; `fixed_set_metrics` is the learning
curve of `--eval-every`: the agent's no-hint return on the bundled examples on fixed seeds.
"""
from __future__ import annotations

import dataclasses

from spade_mini.agent import Job, play_episodes
from spade_mini.learning_potential import LearningPotential
from spade_mini.regret import DesignScore, score_design
from spade_mini.sandbox import SandboxLimits


def score_playables(playables: list, episodes: list, cfg, lp: LearningPotential
                    ) -> tuple[dict, list]:
    """Per environment its DesignScore, and the no-hint episodes the agent trains on.

    Seeds are matched across the arms. A seed whose reset failed in either arm is left out of
    both (and of the agent's baseline): nothing was played. An episode whose environment crashed
    in step() trains nobody, and the crash makes its design count as invalid: a crash must never
    open a gap between the arms. Learning potential scores each design against the skill's
    averages from BEFORE this iteration; the caller then moves each skill's averages once, on
    the whole batch's returns (`LearningPotential.update_many`; in a data-parallel run the
    returns of every rank).
    """
    scores, trained = {}, []
    for p in playables:
        eps = [e for e in episodes if e.job.design_id == p.id]
        hinted = {e.job.seed: e for e in eps if e.job.arm == "hint"}
        failed_seeds = {e.job.seed for e in eps if e.crashed == "reset"}
        alone = [e for e in eps if e.job.arm == "no_hint" and e.job.seed not in failed_seeds]
        usable = [e for e in alone if e.crashed is None]
        crash = next((e.end_reason for e in eps if e.crashed == "step"), None)
        pairs = [(e.ret, hinted[e.job.seed].ret) for e in usable
                 if e.job.seed in hinted and hinted[e.job.seed].hinted
                 and hinted[e.job.seed].crashed is None]
        no_hint = [e.ret for e in usable]
        lp_value = lp.score(p.skill, no_hint) if no_hint and cfg.designer_reward == "learning_potential" else None
        score = (score_design(cfg.designer_reward, no_hint, pairs, lp=lp_value, estimator=cfg.regret_estimator)
                 if no_hint else DesignScore(0.0, None, None, 0.0))
        failure = (f"crashed in play: {crash}" if crash else
                   None if no_hint else "no episode could be played (every reset failed)")
        scores[p.id] = dataclasses.replace(score, failure=failure)
        trained += usable
    return scores, trained


EVAL_SEED = 10**6  # fixed-set seeds start here: training draws its seeds at random, elsewhere


def fixed_set_metrics(policy, cfg) -> dict:
    """The agent's no-hint return on the bundled examples, on fixed seeds never trained on: the
    learning curve of `--eval-every`. It samples as training does, from a fixed torch seed, and
    leaves the training random state as it found it."""
    import torch

    from spade_mini.envs import EXAMPLES
    envs = [e for e in EXAMPLES if cfg.setting in ("mix", e.setting)]
    jobs = [Job(e.source, EVAL_SEED + k, "no_hint", None, e.name) for e in envs for k in range(cfg.eval_seeds)]
    state = torch.get_rng_state()
    torch.manual_seed(cfg.seed)
    try:
        episodes = play_episodes(policy, jobs, max_turns=cfg.max_turns, max_new_tokens=cfg.turn_max_new_tokens,
                                 max_context_tokens=cfg.max_context_tokens,
                                 limits=SandboxLimits(call_timeout_s=cfg.step_timeout_s),
                                 return_mode=cfg.return_mode, template=cfg.agent_template)
    finally:
        torch.set_rng_state(state)
    turns = [t for e in episodes for t in e.turns]
    return {"eval_return": sum(e.ret for e in episodes) / len(episodes),
            "eval_solve_rate": sum(e.ret > 0 for e in episodes) / len(episodes),
            "eval_eos_fraction": sum(t.finished for t in turns) / len(turns) if turns else None}
