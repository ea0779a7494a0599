"""One SPADE iteration, top to bottom: design -> validate -> hint -> play -> score -> pool -> update -> remember.

    (each step is a call; spade_mini/steps.py holds them, replay.py step 5, run/row.py the row)

    designs  = environments written in batched calls until V are valid (or a cap), validated in
               the sandbox under the run's turn cap; every R iterations, or when the pool is short
    hints    = a privileged hint per episode (the policy's, or the environment's hint()); leaky ones dropped
    episodes = K paired seeds per NEW valid environment, in both arms (no-hint, hint), in lockstep
    scores   = per environment: solve rates, regret = mean(hint) - mean(no-hint), designer reward
    pool     = informative new designs join the active pool (pool.py), which is replayed no-hint
               on fresh seeds with the iteration's other no-hint episodes, and retires what is done
    update   = REINFORCE with a group-mean baseline on no-hint agent turns and designer completions
    memory   = every design attempt with its stats, for later designer prompts

The hint arm and the hints themselves are never trained: they exist only to measure regret.
`--fixed-pool` replaces the designer by the hand-written example environments (the paper's
fixed-environment baseline): with the active pool, the same pool filled with the examples
instead of designs (same levels, same moves, same budget); with `--plain-fixed-pool` (or no
pool) the earlier rounds' rotation. The same number of no-hint episodes, and no hint arm. Everything
the loop needs between iterations lives in `State`. Under torchrun each process runs this same
function on its share of the N slots; the `distributed.*` calls gather what needs the whole
batch (one process: they return their input). The active pool runs in one process.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from spade_mini.pool import Pool
from spade_mini.probe import probe_chats
from spade_mini.reinforce import role_token_counts, update
from spade_mini.replay import Playable, play_the_rest  # noqa: F401  (Playable: the loop's unit of play, for callers)
from spade_mini.reward import LearningPotential
from spade_mini.run import distributed
from spade_mini.run.row import iteration_row
from spade_mini.sandbox import SandboxLimits
from spade_mini.steps import (environments, play_new, remember, rescore_with_replays, score_new, update_samples,
                              write_hints)


@dataclass
class State:
    policy: object
    optimizer: object
    skills: list                   # the active Skill records
    corpus: object | None          # a Corpus, or None (no grounding)
    memory: object | None          # a Memory, or None
    rng: random.Random
    potential: LearningPotential = field(default_factory=LearningPotential)
    examples: list = field(default_factory=list)  # the tier's HandEnv examples: the fixed pool's environments
    iteration: int = 0
    active_pool: Pool | None = None  # the active pool (pool.py); None: each environment plays once
    probe: list | None = None        # the drift probe (policy/drift.py), made at the first iteration
    probe_sources: list = field(default_factory=list)  # held-out environments the probe starts from
    levels_valid: dict = field(default_factory=dict)  # (source sha256, level) -> passes validation (replay.py)


def one_iteration(state: State, cfg, progress=None) -> tuple[dict, list, list, list, dict]:
    """Run one iteration; return (metrics row, designs, playables, episodes, scores by env id).
    `progress(phase, **stats)` is called as each phase starts. Data parallel, the designs,
    playables, episodes and scores are this rank's share; the row is the whole batch's."""
    policy, it, times, pool = state.policy, state.iteration, {}, state.active_pool
    limits = SandboxLimits(call_timeout_s=cfg.step_timeout_s)
    if state.probe is None:  # the drift probe: the starting policy's replies, made once (not counted)
        from spade_mini.policy.drift import make_probe
        state.probe = make_probe(policy, probe_chats(state.probe_sources, cfg.drift_probe, cfg.agent_template, limits),
                                 cfg.turn_max_new_tokens)
    tokens_before, t_start = policy.tokens_generated, time.time()
    say = progress or (lambda phase, **stats: None)
    budget = cfg.episodes_per_iteration or cfg.designs_per_iteration * cfg.plays_per_design  # no-hint episodes
    slots = distributed.share(cfg.designs_per_iteration)  # this rank's design slots (all, in one process)

    # 1. design and validate (or take the fixed rotation); the active pool says when the designer runs
    t = time.time()
    say("design")
    designs, fresh, fixed, readmitted = environments(state, cfg, slots, budget, limits)
    times["design"] = time.time() - t
    valid = sum(d.valid for d in designs) / len(designs) if designs else 0.0

    # 2. a privileged hint per paired seed of each new design, checked against its solution()
    t = time.time()
    say("hint", valid=valid)
    seeds, hints = write_hints(state, cfg, fresh, limits)
    times["hint"] = time.time() - t

    # 3. play K paired seeds per new design in both arms (and the fixed rotation's no-hint plays)
    t = time.time()
    say("play", valid=valid)
    episodes = play_new(state, cfg, fresh, fixed, seeds, hints)

    # 4. score: regret per new environment over its paired seeds, then the designer reward
    playables = fresh + fixed
    scores, trained = score_new(state, cfg, playables, fresh, hints, episodes)

    # 5. the active pool: admit the informative new designs, replay the pool no-hint on fresh
    #    seeds with the iteration's other no-hint episodes, move levels, retire (replay.py)
    rest = 0 if cfg.fixed_pool and pool is None else max(0, len(distributed.share(budget)) - sum(p.plays for p in fresh))
    more, again, replay_trained, pool_stats = play_the_rest(state, cfg, fresh, scores, trained, rest, it)
    rescore_with_replays(fresh, episodes, again, scores, cfg, state.potential, set(pool_stats.pop("admitted_ids")))
    episodes, trained, playables = episodes + again, trained + replay_trained, playables + more
    times["play"] = time.time() - t
    skill_of = {p.id: p.skill for p in playables}  # each skill's learning-potential averages move once
    state.potential.update_many(distributed.gather_concat([(skill_of[e.job.design_id], e.ret) for e in trained])[0])

    # 6. samples and advantages: agent turns of no-hint episodes, designer completions
    samples, left_out, design_rewards = update_samples(state, cfg, trained, designs, scores)

    # 7. one update for both roles (one LoRA adapter, or every weight)
    t = time.time()
    say("update")
    stats = update(policy, samples, state.optimizer, designer_weight=cfg.designer_weight,
                   micro_batch=cfg.micro_batch, max_grad_norm=cfg.max_grad_norm,
                   token_counts=distributed.sum_over_ranks(role_token_counts(samples + left_out)),
                   sync_gradients=distributed.all_reduce_gradients, designer_only_step=cfg.designer_only_steps)
    times["update"] = time.time() - t

    # 8. remember every design attempt with its stats
    remember(state, designs, scores)
    state.iteration += 1

    # 9. the metrics row of the whole batch (run/row.py)
    row = iteration_row(state, cfg, it, designs=designs, fresh=fresh, playables=playables, episodes=episodes,
                        trained=trained, hints=hints, scores=scores, design_rewards=design_rewards,
                        samples=samples, left_out=left_out, stats=stats, pool_stats=pool_stats,
                        readmitted=readmitted, times=times, t_start=t_start, tokens_before=tokens_before)
    return row, designs, playables, episodes, scores
