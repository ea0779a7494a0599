"""One SPADE iteration, top to bottom: design -> validate -> hint -> play -> score -> update -> remember.

    designs  = N environments written by the policy in ONE batched call, each validated in the sandbox
    hints    = one privileged hint per valid environment (the policy reads its source; or its hint())
    episodes = K paired seeds per valid environment, in both arms (no-hint, hint), all in lockstep
    scores   = per environment: solve rates, regret = mean(hint) - mean(no-hint), designer reward
    update   = REINFORCE with a group-mean baseline on no-hint agent turns and designer completions
    memory   = every design with its stats, for later designer prompts

The hint arm and the hints themselves are never trained: they exist only to measure regret.
`--fixed-pool` replaces the designer by the hand-written example environments (the paper's
fixed-environment baseline). Everything the loop needs between iterations lives in `State`.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from spade_mini.agent import Job, play_episodes
from spade_mini.designer import design_environments, design_record, generate_hints, skill_schedule
from spade_mini.regret import LearningPotential, apply_invalid_policy, group_advantages, score_design
from spade_mini.reinforce import Sample, update
from spade_mini.sandbox import SandboxLimits

DESIGNS_PER_SKILL = 2  # designs of one skill per iteration, so the per-skill baseline has a group


@dataclass
class State:
    policy: object
    optimizer: object
    skills: list                   # the active Skill records
    corpus: object | None          # a Corpus, or None (no grounding)
    memory: object | None          # a Memory, or None
    rng: random.Random
    lp: LearningPotential = field(default_factory=LearningPotential)
    pool: list = field(default_factory=list)  # HandEnv records for --fixed-pool
    iteration: int = 0


@dataclass
class Playable:
    """An environment the agent plays this iteration: a valid design or a pool environment."""
    id: str
    skill: str
    setting: str
    source: str
    design: object | None = None   # the Design, when the designer wrote it


def one_iteration(state: State, cfg, progress=None) -> tuple[dict, list, list, list, dict]:
    """Run one iteration; return (metrics row, designs, playables, episodes, scores by env id).
    `progress(phase, **stats)` is called as each phase starts."""
    policy, it, times = state.policy, state.iteration, {}
    tokens_before, t_start = policy.tokens_generated, time.time()
    limits = SandboxLimits(call_timeout_s=cfg.step_timeout_s)
    say = progress or (lambda phase, **stats: None)

    # 1. design and validate (or take the fixed pool)
    t = time.time()
    say("design")
    if cfg.fixed_pool:
        designs = []
        picked = [state.pool[(it * cfg.designs_per_iteration + i) % len(state.pool)]
                  for i in range(cfg.designs_per_iteration)]
        playables = [Playable(f"it{it:04d}-{i:02d}-{e.name}", e.skill, e.setting, e.source)
                     for i, e in enumerate(picked)]
    else:
        skills = skill_schedule(state.skills, it, cfg.designs_per_iteration, group=DESIGNS_PER_SKILL)
        designs = design_environments(policy, skills, state.corpus, state.memory, state.rng,
                                      max_new_tokens=cfg.design_max_new_tokens,
                                      temperature=cfg.temperature, iteration=it, limits=limits,
                                      retries=cfg.design_retries)
        playables = [Playable(d.id, d.skill.key, d.skill.setting, d.source, d) for d in designs if d.valid]
    times["design"] = time.time() - t
    valid_fraction = len(playables) / len(designs) if designs else 1.0
    say("hint", valid=valid_fraction)

    # 2. hints: None asks each environment's own hint() inside the sandbox during play
    t = time.time()
    if cfg.hint_source == "policy":
        hints = generate_hints(policy, [p.source for p in playables], [p.setting for p in playables],
                               cfg.hint_max_new_tokens, temperature=cfg.hint_temperature)
    else:
        hints = [None] * len(playables)
    times["hint"] = time.time() - t

    # 3. play K paired seeds per environment in both arms, all episodes in one lockstep batch
    t = time.time()
    say("play", valid=valid_fraction)
    jobs = []
    for p, hint in zip(playables, hints):
        for seed in [state.rng.randrange(2**31) for _ in range(cfg.plays_per_design)]:
            jobs.append(Job(p.source, seed, "no_hint", None, p.id))
            jobs.append(Job(p.source, seed, "hint", hint, p.id))
    episodes = play_episodes(policy, jobs, max_turns=cfg.max_turns, max_new_tokens=cfg.turn_max_new_tokens,
                             max_context_tokens=cfg.max_context_tokens, limits=limits,
                             return_mode=cfg.return_mode, crash_reward=cfg.crash_reward)
    times["play"] = time.time() - t

    # 4. score: regret per environment over paired seeds, then the designer reward
    returns = {(p.id, arm): [e.ret for e in episodes if e.job.design_id == p.id and e.job.arm == arm]
               for p in playables for arm in ("no_hint", "hint")}
    scores = {}
    for p in playables:
        no_hint, hint = returns[(p.id, "no_hint")], returns[(p.id, "hint")]
        # each design is scored against the averages from BEFORE this iteration; then each skill's
        # averages move once, by all of its plays (else a per-skill baseline would cancel it)
        lp = state.lp.preview(p.skill, no_hint) if cfg.designer_reward == "learning_potential" else None
        scores[p.id] = score_design(cfg.designer_reward, no_hint, hint, lp)
    for skill in {p.skill for p in playables}:
        state.lp.update(skill, [r for p in playables if p.skill == skill for r in returns[(p.id, "no_hint")]])

    # 5. samples and advantages: agent turns of no-hint episodes, designer completions
    no_hint_eps = [e for e in episodes if e.job.arm == "no_hint"]
    agent_adv = group_advantages([e.ret for e in no_hint_eps], [e.job.design_id for e in no_hint_eps],
                                 normalize_std=cfg.normalize_std)
    samples = [Sample(turn.prompt_ids, turn.completion_ids, adv, "agent", turn.sampling)
               for e, adv in zip(no_hint_eps, agent_adv) for turn in e.turns]
    policy_name = "drop" if cfg.drop_invalid else "penalty"
    design_rewards = apply_invalid_policy(
        [(d.valid, scores[d.id].reward if d.valid else 0.0) for d in designs], policy_name,
        cfg.invalid_reward)
    kept = [(d, r) for d, r in zip(designs, design_rewards) if r is not None]
    if kept and not cfg.no_designer_training:
        design_adv = group_advantages([r for _, r in kept], [d.skill.key for d, _ in kept],
                                      normalize_std=cfg.normalize_std)
        samples += [Sample(d.completion.prompt_ids, d.completion.completion_ids, adv, "designer",
                           d.completion.sampling)
                    for (d, _), adv in zip(kept, design_adv)]

    # 6. one update for both roles (one LoRA adapter, or every weight)
    t = time.time()
    say("update")
    stats = update(policy, samples, state.optimizer, designer_weight=cfg.designer_weight,
                   micro_batch=cfg.micro_batch, max_grad_norm=cfg.max_grad_norm)
    times["update"] = time.time() - t

    # 7. remember every design with its stats
    if state.memory is not None:
        for d in designs:
            s = scores.get(d.id)
            state.memory.add(design_record(d, s and s.no_hint_solve_rate, s and s.hint_solve_rate,
                                           s and s.regret))
    state.iteration += 1

    total = time.time() - t_start
    tokens = policy.tokens_generated - tokens_before
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    gen_s = times["design"] + times["hint"] + times["play"]
    row = {
        "iteration": it, "designs": len(designs), "environments": len(playables),
        "valid_fraction": valid_fraction, "episodes": len(episodes),
        "no_hint_return": mean([e.ret for e in no_hint_eps]),
        "hint_return": mean([e.ret for e in episodes if e.job.arm == "hint"]),
        "regret": mean([s.regret for s in scores.values()]),
        "designer_reward": mean([r for r in design_rewards if r is not None]),
        "agent_loss": stats.agent_loss, "designer_loss": stats.designer_loss,
        "grad_norm": stats.grad_norm, "trained_tokens": stats.tokens, "update_skipped": stats.skipped,
        "tokens_generated": tokens, "tokens_per_s": tokens / gen_s if gen_s > 0 else None,
        **{f"time_{k}_s": v for k, v in times.items()}, "time_total_s": total,
        "peak_memory_mb": peak_memory_mb(),
    }
    return row, designs, playables, episodes, scores


def peak_memory_mb() -> float:
    import resource

    import torch
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
