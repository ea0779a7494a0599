"""The steps of one SPADE iteration, each a function that `loop.one_iteration` calls in order.

    environments     step 1: the designer's new designs (validated), or the fixed pool's share
    write_hints      step 2: a privileged hint per paired seed of each new design
    play_new         step 3: K paired seeds per new design in both arms, and the fixed rotation's plays
    score_new        step 4: regret and the designer reward per new design
    (replay.py)      step 5: the active pool: admit, replay, move levels, retire
    update_samples   step 6: the agent's turns and the designer's completions, with advantages
    remember         step 8: every design attempt into the memory

Data parallel (run/distributed.py), each process runs the steps on its share of the slots; the
few lines that gather a whole batch say so. The update (step 7) and the metrics row
(run/row.py) are called by the loop itself.
"""
from __future__ import annotations

import dataclasses

from spade_mini.agent import Job, play_episodes, play_settings, turn_budget
from spade_mini.designer import design_environments, design_record, episode_hints, generate_hints, skill_schedule
from spade_mini.pool import spread
from spade_mini.reinforce import Sample
from spade_mini.replay import Playable, examples_to_fill
from spade_mini.reward import (apply_invalid_policy, group_advantages, lowest_valid_reward, score_playables,
                               thin_out)
from spade_mini.run import distributed

DESIGNS_PER_SKILL = 2  # designs of one skill per iteration, so the per-skill baseline has a group


def environments(state, cfg, slots: range, budget: int, limits) -> tuple[list, list, list, list]:
    """Step 1: (designs, fresh, fixed, readmitted). The designer runs when the active pool says
    it is due (or every iteration without a pool): its valid designs are `fresh` playables. The
    fixed rotation of earlier rounds gives `fixed` playables instead; the active pool first takes
    back the run's own in-band designs from the memory when short (`readmitted`), or, as the
    fixed-pool baseline, fills itself with the examples."""
    pool, it = state.active_pool, state.iteration
    if cfg.fixed_pool and pool is None:  # the earlier rounds' rotation: same no-hint episodes, no hint arm
        plays = spread(budget, cfg.designs_per_iteration)
        picked = [(i, state.examples[(it * cfg.designs_per_iteration + i) % len(state.examples)]) for i in slots]
        return [], [], [Playable(f"it{it:04d}-{i:02d}-{e.name}", e.skill, e.setting, e.source, plays=plays[i])
                        for i, e in picked], []
    designs, readmitted = [], []
    if pool is not None and cfg.fixed_pool:  # one pool, the other filler: the examples, no designer
        readmitted = pool.fill(examples_to_fill(pool, state.examples, limits), it)
    elif pool is not None and pool.short():  # the run's own in-band designs come back first
        readmitted = pool.refill(state.memory, it)
    if not cfg.fixed_pool and (pool is None or pool.due(it, cfg.design_every)):
        rank_part = lambda n: -(-n // distributed.world_size())  # noqa: E731  (this rank's part of a cap, rounded up)
        skills = skill_schedule(state.skills, it, cfg.designs_per_iteration, group=DESIGNS_PER_SKILL)
        designs = design_environments(
            state.policy, skills[slots.start:slots.stop], state.corpus, state.memory, state.rng,
            max_new_tokens=cfg.design_max_new_tokens, temperature=cfg.temperature, iteration=it,
            limits=limits, retries=cfg.design_retries, references=cfg.memory_references,
            first_slot=slots.start, require_solution=cfg.require_solution,
            until_valid=rank_part(cfg.valid_designs), max_attempts=rank_part(cfg.design_attempts),
            max_seconds=cfg.design_seconds, max_turns=cfg.max_turns, turn_tokens=cfg.turn_max_new_tokens,
            action_fits=turn_budget(state.policy, cfg.turn_max_new_tokens), min_instances=cfg.plays_per_design,
            levels=cfg.design_levels, repair=cfg.design_repair, edits=round(cfg.design_edits * len(slots)),
            edit_from=[(e.id, e.source, e.level, e.rate(pool.window), e.setting) for e in pool.envs] if pool else [])
    fresh = [Playable(d.id, d.skill.key, d.skill.setting, d.source, d, cfg.plays_per_design,
                      levels=d.validation.levels) for d in designs if d.valid]
    return designs, fresh, [], readmitted


def write_hints(state, cfg, fresh: list, limits) -> tuple[list, list]:
    """Step 2: (seeds, hints) per new design: K seeds, and for each a hint (the policy's, or the
    episode's own hint()), checked against that episode's solution() outside the players."""
    written = (generate_hints(state.policy, [p.source for p in fresh], [p.setting for p in fresh],
                              cfg.hint_max_new_tokens, temperature=cfg.hint_temperature)
               if cfg.hint_source == "policy" else [None] * len(fresh))
    seeds = [[state.rng.randrange(2**31) for _ in range(p.plays)] for p in fresh]
    return seeds, episode_hints([p.source for p in fresh], seeds, written, limits=limits, max_turns=cfg.max_turns)


def play_new(state, cfg, fresh: list, fixed: list, seeds: list, hints: list) -> list:
    """Step 3: the fixed rotation's no-hint plays and K paired seeds per new design in both arms,
    in one lockstep batch; a seed without a hint (none written, or a leaky one) plays no hint arm."""
    jobs = [Job(p.source, state.rng.randrange(2**31), "no_hint", None, p.id) for p in fixed for _ in range(p.plays)]
    for p, env_seeds, env_hints in zip(fresh, seeds, hints):
        for seed, hint in zip(env_seeds, env_hints.hints):
            jobs.append(Job(p.source, seed, "no_hint", None, p.id))
            if hint is not None:
                jobs.append(Job(p.source, seed, "hint", hint, p.id))
    return play_episodes(state.policy, jobs, **play_settings(cfg))


def score_new(state, cfg, playables: list, fresh: list, hints: list, episodes: list) -> tuple[dict, list]:
    """Step 4: (scores by id, the no-hint episodes that train): regret per new environment over
    its paired seeds, then its designer reward; a design that played no hint arm says why."""
    scores, trained = score_playables(playables, episodes, cfg, state.potential)
    for p, env_hints in zip(fresh, hints):
        if env_hints.leak or env_hints.failure:
            scores[p.id] = dataclasses.replace(scores[p.id], note=env_hints.leak or env_hints.failure)
    return scores, trained


def rescore_with_replays(fresh: list, first: list, again: list, scores: dict, cfg, potential,
                         admitted: set) -> None:
    """After step 5: a design admitted this iteration and replayed at its level 0 in the same
    iteration (the same policy, before the update) is scored on all those no-hint plays, not only
    its first K: its solve rate (and any crash) on more seeds; its regret stays on the paired seeds.
    A design the pool refused keeps the score of its first K plays (the leftover budget may replay
    it, but only to train the agent)."""
    replayed = {e.job.design_id for e in again if e.job.level == 0}
    mine = [p for p in fresh if p.id in replayed and p.id in admitted]
    if not mine:
        return
    ids = {p.id for p in mine}
    rescored, _ = score_playables(mine, [e for e in first + again if e.job.design_id in ids and e.job.level == 0],
                                  cfg, potential)
    for p in mine:
        scores[p.id] = dataclasses.replace(rescored[p.id], note=scores[p.id].note)


def update_samples(state, cfg, trained: list, designs: list, scores: dict) -> tuple[list, list, list]:
    """Step 6: (samples, left out, designer rewards). Agent turns of the usable no-hint episodes,
    one baseline group per environment and level; designer completions, one group per skill or
    the whole cohort (gathered over ranks), every valid design and a `--invalid-update-fraction`
    share of the invalid ones, reweighted (the left-out ones still count in the token denominator)."""
    agent_adv = group_advantages([e.ret for e in trained], [e.job.group for e in trained],
                                 normalize_std=cfg.normalize_std)
    samples = [Sample(turn.prompt_ids, turn.completion_ids, adv, "agent", turn.sampling)
               for e, adv in zip(trained, agent_adv) for turn in e.turns]
    for d in designs:  # a design that crashed in play is invalid after all, at the last stage
        if d.valid and scores[d.id].failure:
            d.valid, d.stage, d.reasons = False, "play", [scores[d.id].failure]
    rewards = apply_invalid_policy(
        [(d.stage, scores[d.id].reward if d.valid else 0.0, d.completion.finished) for d in designs],
        "drop" if cfg.drop_invalid else cfg.invalid_reward_mode, cfg.invalid_reward,
        lowest_valid_reward(cfg.designer_reward, cfg.regret_estimator))
    for d, r in zip(designs, rewards):
        d.reward = r
    kept, left_out = [(d, r) for d, r in zip(designs, rewards) if r is not None], []
    if not cfg.no_designer_training:  # a skill's designs may lie on several ranks: gather them
        group = (lambda d: "cohort") if cfg.designer_baseline == "cohort" else (lambda d: d.skill.key)
        batch, mine = distributed.gather_concat([(group(d), r) for d, r in kept])
        design_adv = group_advantages([r for _, r in batch], [k for k, _ in batch],
                                      normalize_std=cfg.normalize_std)[mine]
        thinned = thin_out(list(design_adv), [d.valid for d, _ in kept], cfg.invalid_update_fraction, state.rng)
        for (d, _), adv, w in zip(kept, design_adv, thinned):
            c = d.completion
            (left_out if w is None else samples).append(
                Sample(c.prompt_ids, c.completion_ids, adv if w is None else w, "designer", c.sampling))
    return samples, left_out, rewards


def remember(state, designs: list, scores: dict) -> None:
    """Step 8: every design attempt with its stats (every rank remembers every rank's designs)."""
    if state.memory is not None:
        records = [design_record(d, s and s.no_hint_solve_rate, s and s.hint_solve_rate, s and s.regret)
                   for d, s in ((d, scores.get(d.id)) for d in designs)]
        state.memory.add(distributed.gather_concat(records)[0])
