"""One SPADE iteration, top to bottom: design -> validate -> hint -> play -> score -> update -> remember.

    designs  = N environments written by the policy in ONE batched call, each validated in the sandbox
    hints    = a privileged hint per episode (the policy's, or the environment's hint()); leaky ones dropped
    episodes = K paired seeds per valid environment, in both arms (no-hint, hint), all in lockstep
    scores   = per environment: solve rates, regret = mean(hint) - mean(no-hint), designer reward
    update   = REINFORCE with a group-mean baseline on no-hint agent turns and designer completions
    memory   = every design with its stats, for later designer prompts

The hint arm and the hints themselves are never trained: they exist only to measure regret.
`--fixed-pool` replaces the designer by the hand-written example environments (the paper's
fixed-environment baseline). Everything the loop needs between iterations lives in `State`.
Under torchrun each process runs this same function on its share of the N slots; the
`distributed.*` calls gather what needs the whole batch (one process: they return their input).
"""
from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass, field

from spade_mini.agent import Job, play_episodes, play_settings
from spade_mini.designer import design_environments, design_record, episode_hints, generate_hints, skill_schedule
from spade_mini.reinforce import Sample, role_token_counts, update
from spade_mini.reward import (LearningPotential, apply_invalid_policy, group_advantages,
                               lowest_valid_reward, score_playables)
from spade_mini.run import distributed
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
    potential: LearningPotential = field(default_factory=LearningPotential)
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
    `progress(phase, **stats)` is called as each phase starts. Data parallel, the designs,
    playables, episodes and scores are this rank's share; the row is the whole batch's."""
    policy, it, times = state.policy, state.iteration, {}
    tokens_before, t_start = policy.tokens_generated, time.time()
    limits = SandboxLimits(call_timeout_s=cfg.step_timeout_s)
    say = progress or (lambda phase, **stats: None)

    # 1. design and validate (or take the fixed pool)
    t = time.time()
    say("design")
    slots = distributed.share(cfg.designs_per_iteration)  # this rank's slots (all, in one process)
    if cfg.fixed_pool:
        designs = []
        picked = [(i, state.pool[(it * cfg.designs_per_iteration + i) % len(state.pool)]) for i in slots]
        playables = [Playable(f"it{it:04d}-{i:02d}-{e.name}", e.skill, e.setting, e.source)
                     for i, e in picked]
    else:
        skills = skill_schedule(state.skills, it, cfg.designs_per_iteration, group=DESIGNS_PER_SKILL)
        designs = design_environments(policy, skills[slots.start:slots.stop], state.corpus,
                                      state.memory, state.rng,
                                      max_new_tokens=cfg.design_max_new_tokens,
                                      temperature=cfg.temperature, iteration=it, limits=limits,
                                      retries=cfg.design_retries, references=cfg.memory_references,
                                      first_slot=slots.start, require_solution=cfg.require_solution)
        playables = [Playable(d.id, d.skill.key, d.skill.setting, d.source, d)
                     for d in designs if d.valid]
    times["design"] = time.time() - t
    valid_fraction = len(playables) / len(designs) if designs else 1.0
    say("hint", valid=valid_fraction)

    # 2. hints: the policy writes one per environment, or each episode's own hint() is read; all
    #    are read and checked against their episode's solution() outside the children that play
    t = time.time()
    written = (generate_hints(policy, [p.source for p in playables], [p.setting for p in playables],
                              cfg.hint_max_new_tokens, temperature=cfg.hint_temperature)
               if cfg.hint_source == "policy" else [None] * len(playables))
    seeds = [[state.rng.randrange(2**31) for _ in range(cfg.plays_per_design)] for _ in playables]
    hints = episode_hints([p.source for p in playables], seeds, written, limits=limits)
    times["hint"] = time.time() - t

    # 3. play K paired seeds per environment in both arms, all episodes in one lockstep batch;
    #    a seed without a hint (none written, or a leaky one) plays only the no-hint arm
    t = time.time()
    say("play", valid=valid_fraction)
    jobs = []
    for p, env_seeds, env_hints in zip(playables, seeds, hints):
        for seed, hint in zip(env_seeds, env_hints.hints):
            jobs.append(Job(p.source, seed, "no_hint", None, p.id))
            if hint is not None:
                jobs.append(Job(p.source, seed, "hint", hint, p.id))
    episodes = play_episodes(policy, jobs, **play_settings(cfg))
    times["play"] = time.time() - t

    # 4. score: regret per environment over paired seeds, then the designer reward
    scores, trained = score_playables(playables, episodes, cfg, state.potential)
    for p, env_hints in zip(playables, hints):  # say why a design played no hint arm
        if env_hints.leak or env_hints.failure:
            scores[p.id] = dataclasses.replace(scores[p.id], note=env_hints.leak or env_hints.failure)
    #    then each skill's learning-potential averages move once, on every rank's returns
    skill_of = {p.id: p.skill for p in playables}
    state.potential.update_many(distributed.gather_concat([(skill_of[e.job.design_id], e.ret) for e in trained])[0])

    # 5. samples and advantages: agent turns of usable no-hint episodes, designer completions
    agent_adv = group_advantages([e.ret for e in trained], [e.job.design_id for e in trained],
                                 normalize_std=cfg.normalize_std)
    samples = [Sample(turn.prompt_ids, turn.completion_ids, adv, "agent", turn.sampling)
               for e, adv in zip(trained, agent_adv) for turn in e.turns]
    for d in designs:  # a design that crashed in play is invalid after all, at the last stage
        if d.valid and scores[d.id].failure:
            d.valid, d.stage, d.reasons = False, "play", [scores[d.id].failure]
    design_rewards = apply_invalid_policy(
        [(d.stage, scores[d.id].reward if d.valid else 0.0, d.completion.finished) for d in designs],
        "drop" if cfg.drop_invalid else cfg.invalid_reward_mode, cfg.invalid_reward,
        lowest_valid_reward(cfg.designer_reward, cfg.regret_estimator))
    for d, r in zip(designs, design_rewards):
        d.reward = r
    kept = [(d, r) for d, r in zip(designs, design_rewards) if r is not None]
    if not cfg.no_designer_training:  # a skill's designs may lie on several ranks: gather them
        batch, mine = distributed.gather_concat([(d.skill.key, r) for d, r in kept])
        design_adv = group_advantages([r for _, r in batch], [k for k, _ in batch],
                                      normalize_std=cfg.normalize_std)[mine]
        samples += [Sample(d.completion.prompt_ids, d.completion.completion_ids, adv, "designer",
                           d.completion.sampling)
                    for (d, _), adv in zip(kept, design_adv)]

    # 6. one update for both roles (one LoRA adapter, or every weight)
    t = time.time()
    say("update")
    stats = update(policy, samples, state.optimizer, designer_weight=cfg.designer_weight,
                   micro_batch=cfg.micro_batch, max_grad_norm=cfg.max_grad_norm,
                   token_counts=distributed.sum_over_ranks(role_token_counts(samples)),
                   sync_gradients=distributed.all_reduce_gradients)
    times["update"] = time.time() - t

    # 7. remember every design with its stats (every rank remembers every rank's designs)
    if state.memory is not None:
        records = [design_record(d, s and s.no_hint_solve_rate, s and s.hint_solve_rate, s and s.regret)
                   for d, s in ((d, scores.get(d.id)) for d in designs)]
        state.memory.add(distributed.gather_concat(records)[0])
    state.iteration += 1

    # 8. the metrics row of the whole batch: every rank's share, gathered in slot order
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    b = distributed.gather_by_key({
        "valid": [d.valid for d in designs], "environments": [p.id for p in playables],
        "crashed": [e.crashed is not None for e in episodes],
        "eos": [float(t.finished) for e in episodes for t in e.turns],
        "no_hint": [e.ret for e in trained],
        "hint": [e.ret for e in episodes if e.job.arm == "hint" and e.crashed is None],
        "regret": [s.regret for s in scores.values()],  # None: not measured
        "leaky": [h.leak is not None for h in hints],
        "designer_reward": [r for r in design_rewards if r is not None],
        "losses": [(stats.agent_loss, stats.designer_loss)],  # each rank's part of the whole loss
        "tokens": [policy.tokens_generated - tokens_before],
        "times": [{**times, "total": time.time() - t_start}], "peak_memory_mb": [peak_memory_mb()],
        "oom_retries": [getattr(getattr(policy, "plan", None), "oom_retries", 0)],  # so far, by halving
    })
    slowest = {k: max(t[k] for t in b["times"]) for k in b["times"][0]}  # the batch waits for it
    tokens = sum(b["tokens"])
    gen_s = max(t["design"] + t["hint"] + t["play"] for t in b["times"])
    row = {
        "iteration": it, "designs": len(b["valid"]), "environments": len(b["environments"]),
        "valid_fraction": mean(b["valid"]) if b["valid"] else 1.0,
        "episodes": len(b["crashed"]), "eos_fraction": mean(b["eos"]),
        "no_hint_return": mean(b["no_hint"]), "hint_return": mean(b["hint"]),
        "regret": mean([r for r in b["regret"] if r is not None]),
        "crashed_episodes": sum(b["crashed"]),
        "unhinted_environments": sum(r is None for r in b["regret"]),
        "leaky_hints": sum(b["leaky"]),
        "designer_reward": mean(b["designer_reward"]),
        "agent_loss": sum(a for a, _ in b["losses"]), "designer_loss": sum(d for _, d in b["losses"]),
        "grad_norm": stats.grad_norm, "trained_tokens": stats.tokens, "update_skipped": stats.skipped,
        "tokens_generated": tokens, "tokens_per_s": tokens / gen_s if gen_s > 0 else None,
        **{f"time_{k}_s": v for k, v in slowest.items()}, "peak_memory_mb": max(b["peak_memory_mb"]),
        "oom_retries": sum(b["oom_retries"]),
        **memory_counts(state.memory),
    }
    return row, designs, playables, episodes, scores


def memory_counts(memory) -> dict:
    """What the memory holds after an iteration: the designer's own valid environments, and how
    many of them were played inside the band its prompts draw references from."""
    if memory is None:
        return {}
    own = [r for r in memory.records if r.iteration >= 0 and r.valid]
    low, high = memory.band
    return {"memory_designs": len(own),
            "memory_in_band": sum(r.no_hint_solve_rate is not None and low <= r.no_hint_solve_rate <= high
                                  for r in own)}


def peak_memory_mb() -> float:
    import resource

    import torch
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
