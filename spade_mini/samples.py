"""Steps 6 and 8 of an iteration: what the update reads, and what the memory keeps.

    update_samples   step 6: the agent's turns and the designer's completions, with advantages
    remember         step 8: every design attempt into the memory

Data parallel (run/distributed.py), the few lines that gather a whole batch say so.
"""
from __future__ import annotations

from spade_mini.designer import design_record
from spade_mini.reinforce import Sample
from spade_mini.reward import apply_invalid_policy, group_advantages, thin_out
from spade_mini.run import distributed


def update_samples(state, settings, record) -> None:
    """Step 6: agent turns of the usable no-hint episodes, one baseline group per environment
    and level; designer completions, one group per skill or the whole cohort (gathered over
    ranks), every played valid design and a share of the invalid ones, reweighted (the left-out
    ones still count in the token denominator); a design that waits in the store is no sample."""
    s, trained = settings.samples, record.trained
    agent_adv = group_advantages([e.ret for e in trained], [e.job.group for e in trained], normalize_std=s.normalize_std)
    record.samples = [Sample(turn.prompt_ids, turn.completion_ids, adv, "agent", turn.sampling, env=e.job.design_id)
                      for e, adv in zip(trained, agent_adv) for turn in e.turns]
    scores = record.scores  # a waiting design (valid, not played: record.waiting) has no reward yet
    designs = [d for d in record.designs if d.id not in record.waiting]
    for d in designs:  # a design that crashed in play is invalid after all, at the last stage
        if d.valid and scores[d.id].failure:
            d.valid, d.stage, d.reasons = False, "play", [scores[d.id].failure]
    rewards = apply_invalid_policy([(d.stage, scores[d.id].reward if d.valid else 0.0, d.completion.finished)
                                    for d in designs], s.invalid_mode, s.invalid_reward, s.lowest_valid)
    for d, r in zip(designs, rewards):
        d.reward = r
    record.design_rewards = rewards
    kept = [(d, r) for d, r in zip(designs, rewards) if r is not None]
    if not s.train_designer:
        return
    group = (lambda d: "cohort") if s.designer_baseline == "cohort" else (lambda d: d.skill.key)
    batch, mine = distributed.gather_concat([(group(d), r) for d, r in kept])  # a skill may span ranks
    design_adv = group_advantages([r for _, r in batch], [k for k, _ in batch], normalize_std=s.normalize_std)[mine]
    thinned = thin_out(list(design_adv), [d.valid for d, _ in kept], s.invalid_fraction, state.rng)
    for (d, _), adv, w in zip(kept, design_adv, thinned):
        c = d.completion
        (record.left_out if w is None else record.samples).append(
            Sample(c.prompt_ids, c.completion_ids, adv if w is None else w, "designer", c.sampling))


def remember(state, record) -> None:
    """Step 8: every design attempt with its stats (every rank remembers every rank's designs)."""
    if state.memory is not None:
        scores = record.scores
        records = [design_record(d, s and s.no_hint_solve_rate, s and s.hint_solve_rate, s and s.regret)
                   for d, s in ((d, scores.get(d.id)) for d in record.designs)]
        state.memory.add(distributed.gather_concat(records)[0])
