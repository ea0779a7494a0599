"""One SPADE iteration, top to bottom: design -> validate -> hint -> play -> score -> pool -> update -> remember.

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

import dataclasses
import random
import time
from dataclasses import dataclass, field

from spade_mini.agent import Job, play_episodes, play_settings, turn_budget
from spade_mini.designer import design_environments, design_record, episode_hints, generate_hints, skill_schedule
from spade_mini.pool import Pool, spread
from spade_mini.probe import probe_chats
from spade_mini.reinforce import Sample, role_token_counts, update
from spade_mini.reward import (LearningPotential, apply_invalid_policy, group_advantages, informative_episodes,
                               lowest_valid_reward, score_playables, sum_squared_deviations, thin_out)
from spade_mini.run import distributed
from spade_mini.replay import Playable, examples_to_fill, play_the_rest
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
        chats = probe_chats(state.probe_sources, cfg.drift_probe, cfg.agent_template, limits)
        state.probe = make_probe(policy, chats, cfg.turn_max_new_tokens)
    tokens_before, t_start = policy.tokens_generated, time.time()
    say = progress or (lambda phase, **stats: None)
    budget = cfg.episodes_per_iteration or cfg.designs_per_iteration * cfg.plays_per_design

    # 1. design and validate (or take the fixed pool); the active pool says when the designer runs
    t = time.time()
    say("design")
    slots = distributed.share(cfg.designs_per_iteration)  # this rank's slots (all, in one process)
    designs, fresh, readmitted = [], [], []
    if cfg.fixed_pool and pool is None:  # the earlier rounds' rotation: same no-hint episodes, no hint arm
        plays = spread(budget, cfg.designs_per_iteration)
        picked = [(i, state.pool[(it * cfg.designs_per_iteration + i) % len(state.pool)]) for i in slots]
        fixed = [Playable(f"it{it:04d}-{i:02d}-{e.name}", e.skill, e.setting, e.source, plays=plays[i])
                 for i, e in picked]
    else:
        fixed = []
        if pool is not None and cfg.fixed_pool:  # one pool, the other filler: the examples, no designer
            readmitted = pool.fill(examples_to_fill(pool, state.pool, limits), it)
        elif pool is not None and pool.short():  # the run's own in-band designs come back first
            readmitted = pool.refill(state.memory, it)
        if not cfg.fixed_pool and (pool is None or pool.due(it, cfg.design_every)):
            share = lambda n: -(-n // distributed.world_size())  # noqa: E731  (this rank's part, rounded up)
            skills = skill_schedule(state.skills, it, cfg.designs_per_iteration, group=DESIGNS_PER_SKILL)
            designs = design_environments(
                policy, skills[slots.start:slots.stop], state.corpus, state.memory, state.rng,
                max_new_tokens=cfg.design_max_new_tokens, temperature=cfg.temperature, iteration=it,
                limits=limits, retries=cfg.design_retries, references=cfg.memory_references,
                first_slot=slots.start, require_solution=cfg.require_solution,
                until_valid=share(cfg.valid_designs), max_attempts=share(cfg.design_attempts),
                max_seconds=cfg.design_seconds, max_turns=cfg.max_turns,
                turn_tokens=cfg.turn_max_new_tokens, action_fits=turn_budget(policy, cfg.turn_max_new_tokens),
                min_instances=cfg.plays_per_design, levels=cfg.design_levels, repair=cfg.design_repair,
                edits=round(cfg.design_edits * len(slots)),
                edit_from=[(e.id, e.source, e.level, e.rate(pool.window)) for e in pool.envs] if pool else [])
        fresh = [Playable(d.id, d.skill.key, d.skill.setting, d.source, d, cfg.plays_per_design,
                          levels=d.validation.levels) for d in designs if d.valid]
    times["design"] = time.time() - t
    valid_fraction = sum(d.valid for d in designs) / len(designs) if designs else None
    say("hint", valid=valid_fraction or 0.0)

    # 2. hints of the new designs: the policy writes one per environment, or each episode's own
    #    hint() is read; all are checked against their episode's solution() outside the players
    t = time.time()
    written = (generate_hints(policy, [p.source for p in fresh], [p.setting for p in fresh],
                              cfg.hint_max_new_tokens, temperature=cfg.hint_temperature)
               if cfg.hint_source == "policy" else [None] * len(fresh))
    seeds = [[state.rng.randrange(2**31) for _ in range(p.plays)] for p in fresh]
    hints = episode_hints([p.source for p in fresh], seeds, written, limits=limits, max_turns=cfg.max_turns)
    times["hint"] = time.time() - t

    # 3. play K paired seeds per new design in both arms (and the fixed pool's no-hint plays), all
    #    in one lockstep batch; a seed without a hint (none written, or a leaky one) plays no hint arm
    t = time.time()
    say("play", valid=valid_fraction or 0.0)
    jobs = [Job(p.source, state.rng.randrange(2**31), "no_hint", None, p.id) for p in fixed for _ in range(p.plays)]
    for p, env_seeds, env_hints in zip(fresh, seeds, hints):
        for seed, hint in zip(env_seeds, env_hints.hints):
            jobs.append(Job(p.source, seed, "no_hint", None, p.id))
            if hint is not None:
                jobs.append(Job(p.source, seed, "hint", hint, p.id))
    episodes = play_episodes(policy, jobs, **play_settings(cfg))

    # 4. score: regret per new environment over paired seeds, then the designer reward
    playables = fresh + fixed
    scores, trained = score_playables(playables, episodes, cfg, state.potential)
    for p, env_hints in zip(fresh, hints):  # say why a design played no hint arm
        if env_hints.leak or env_hints.failure:
            scores[p.id] = dataclasses.replace(scores[p.id], note=env_hints.leak or env_hints.failure)

    # 5. the active pool: admit the new designs whose no-hint plays were informative, replay the
    #    pool no-hint on fresh seeds with the rest of the iteration's no-hint episodes, retire
    rest = 0 if cfg.fixed_pool and pool is None else max(0, len(distributed.share(budget)) - sum(p.plays for p in fresh))
    more, again, replay_trained, pool_stats = play_the_rest(state, cfg, fresh, scores, trained, rest, it)
    rescore_with_replays(fresh, episodes, again, scores, cfg, state.potential)
    episodes, trained, playables = episodes + again, trained + replay_trained, playables + more
    times["play"] = time.time() - t
    #    then each skill's learning-potential averages move once, on every rank's returns
    skill_of = {p.id: p.skill for p in playables}
    state.potential.update_many(distributed.gather_concat([(skill_of[e.job.design_id], e.ret) for e in trained])[0])

    # 6. samples and advantages: agent turns of usable no-hint episodes (one group per
    #    environment), designer completions (one group per skill, or the whole cohort)
    agent_adv = group_advantages([e.ret for e in trained], [e.job.group for e in trained],
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
    left_out = []  # designer samples the update leaves out (their tokens still count)
    if not cfg.no_designer_training:  # a skill's designs may lie on several ranks: gather them
        group = (lambda d: "cohort") if cfg.designer_baseline == "cohort" else (lambda d: d.skill.key)
        batch, mine = distributed.gather_concat([(group(d), r) for d, r in kept])
        design_adv = group_advantages([r for _, r in batch], [k for k, _ in batch],
                                      normalize_std=cfg.normalize_std)[mine]
        # the update scores every valid design and a fraction of the invalid ones (same expected gradient)
        thinned = thin_out(list(design_adv), [d.valid for d, _ in kept], cfg.invalid_update_fraction, state.rng)
        for (d, _), adv, w in zip(kept, design_adv, thinned):
            c = d.completion
            (left_out if w is None else samples).append(
                Sample(c.prompt_ids, c.completion_ids, adv if w is None else w, "designer", c.sampling))

    # 7. one update for both roles (one LoRA adapter, or every weight)
    t = time.time()
    say("update")
    stats = update(policy, samples, state.optimizer, designer_weight=cfg.designer_weight,
                   micro_batch=cfg.micro_batch, max_grad_norm=cfg.max_grad_norm,
                   token_counts=distributed.sum_over_ranks(role_token_counts(samples + left_out)),
                   sync_gradients=distributed.all_reduce_gradients,
                   designer_only_step=cfg.designer_only_steps)
    times["update"] = time.time() - t

    # 8. remember every design attempt with its stats (every rank remembers every rank's designs)
    if state.memory is not None:
        records = [design_record(d, s and s.no_hint_solve_rate, s and s.hint_solve_rate, s and s.regret)
                   for d, s in ((d, scores.get(d.id)) for d in designs)]
        state.memory.add(distributed.gather_concat(records)[0])
    state.iteration += 1

    # 9. the metrics row of the whole batch: every rank's share, gathered in slot order
    from spade_mini.policy.drift import drift_kl
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    b = distributed.gather_by_key({
        "valid": [d.valid for d in designs], "written_as": [d.written_as for d in designs],
        "environments": sorted({p.id for p in playables}),
        "crashed": [e.crashed is not None for e in episodes],
        "eos": [float(t.finished) for e in episodes for t in e.turns],
        "no_hint": [e.ret for e in trained], "groups": sorted({e.job.group for e in trained}),
        "hint": [e.ret for e in episodes if e.job.arm == "hint" and e.crashed is None],
        "regret": [scores[p.id].regret for p in fresh],  # None: not measured
        "leaky": [h.leak is not None for h in hints],
        "designer_reward": [r for r in design_rewards if r is not None],
        "designer_samples": [sum(s.role == "designer" for s in samples)], "left_out": [len(left_out)],
        "informative": [informative_episodes(trained)], "unspent": [pool_stats.pop("unspent")],
        "firsts": sorted({e.messages[0]["content"] for e in trained if e.messages}),
        "spread": [sum_squared_deviations(trained)],
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
        "valid_fraction": mean(b["valid"]) if b["valid"] else (1.0 if cfg.fixed_pool else None),
        "valid_designs": sum(b["valid"]),
        "repair_designs": b["written_as"].count("repair"),
        "repair_valid": sum(v for v, w in zip(b["valid"], b["written_as"]) if w == "repair"),
        "episodes": len(b["crashed"]), "eos_fraction": mean(b["eos"]),
        "no_hint_episodes": len(b["no_hint"]), "informative_episodes": sum(b["informative"]),
        "trained_environments": len(set(b["groups"])), "trained_first_observations": len(set(b["firsts"])),
        "no_hint_squared_deviation": sum(b["spread"]),
        "unspent_episodes": sum(b["unspent"]),
        "no_hint_return": mean(b["no_hint"]), "hint_return": mean(b["hint"]),
        "regret": mean([r for r in b["regret"] if r is not None]),
        "crashed_episodes": sum(b["crashed"]),
        "unhinted_environments": sum(r is None for r in b["regret"]),
        "leaky_hints": sum(b["leaky"]),
        "designer_reward": mean(b["designer_reward"]),
        "designer_samples": sum(b["designer_samples"]), "designer_samples_left_out": sum(b["left_out"]),
        "agent_loss": sum(a for a, _ in b["losses"]), "designer_loss": sum(d for _, d in b["losses"]),
        "grad_norm": stats.grad_norm, "agent_grad_norm": stats.agent_grad_norm,
        "designer_grad_norm": stats.designer_grad_norm,
        "trained_tokens": stats.tokens, "update_skipped": stats.skipped,
        "drift_kl": drift_kl(policy, state.probe),
        **({**pool_stats, "pool_readmitted": len(readmitted)} if pool is not None else {}),
        "tokens_generated": tokens, "tokens_per_s": tokens / gen_s if gen_s > 0 else None,
        **{f"time_{k}_s": v for k, v in slowest.items()}, "peak_memory_mb": max(b["peak_memory_mb"]),
        "oom_retries": sum(b["oom_retries"]),
        **memory_counts(state.memory),
    }
    return row, designs, playables, episodes, scores


def rescore_with_replays(fresh: list, first: list, again: list, scores: dict, cfg, potential) -> None:
    """A design admitted this iteration and replayed at its level 0 in the same iteration (the same
    policy, before the update) is scored on all those no-hint plays, not only its first K: its
    solve rate (and any crash) is measured on more seeds; its regret stays on the paired seeds."""
    replayed = {e.job.design_id for e in again if e.job.level == 0}
    mine = [p for p in fresh if p.id in replayed]
    if not mine:
        return
    ids = {p.id for p in mine}
    rescored, _ = score_playables(mine, [e for e in first + again if e.job.design_id in ids and e.job.level == 0],
                                  cfg, potential)
    for p in mine:
        scores[p.id] = dataclasses.replace(rescored[p.id], note=scores[p.id].note)


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
