"""Steps 2 to 4 of an iteration: what the new designs are worth (fill.py is step 1, replay.py 5).

    write_hints   step 2: a privileged hint per paired seed of each new design
    play_new      step 3: K paired seeds per new design in both arms, in one lockstep batch
    score_new     step 4: regret and the designer reward per new design

Each reads the iteration's record (loop.Iteration) and fills its part. Data parallel
(run/distributed.py), each process runs them on its share of the slots.
"""
from __future__ import annotations

import dataclasses

from spade_mini.agent import play_episodes
from spade_mini.designer import episode_hints, generate_hints
from spade_mini.reward import score_playables


def write_hints(state, settings, record) -> None:
    """Step 2: K seeds per new design, and for each a hint (the policy's, or the episode's own
    hint()), checked against that episode's solution() outside the players."""
    fresh, hint = record.fresh, settings.hint
    written = (generate_hints(state.policy, [p.source for p in fresh], [p.setting for p in fresh],
                              hint.max_new_tokens, temperature=hint.temperature)
               if hint.source == "policy" else [None] * len(fresh))
    record.seeds = [[state.rng.randrange(2**31) for _ in range(p.plays)] for p in fresh]
    record.hints = episode_hints([p.source for p in fresh], record.seeds, written, limits=hint.limits,
                                 max_turns=hint.max_turns)


def play_new(state, settings, record) -> None:
    """Step 3: K paired seeds per new design in both arms, in one lockstep batch; a seed without
    a hint (none written, or a leaky one) plays the no-hint arm only."""
    jobs = [job for p, seeds, hints in zip(record.fresh, record.seeds, record.hints)
            for job in p.paired_jobs(seeds, hints.hints)]
    record.episodes += play_episodes(state.policy, jobs, settings.play)
    record.playables += record.fresh


def score_new(state, settings, record) -> None:
    """Step 4: regret per new design over its paired seeds, then its designer reward; a design
    that played no hint arm says why. Its no-hint episodes train the agent."""
    scores, trained = score_playables(record.fresh, record.episodes, settings.score, state.potential)
    for p, hints in zip(record.fresh, record.hints):
        if hints.leak or hints.failure:
            scores[p.id] = dataclasses.replace(scores[p.id], note=hints.leak or hints.failure)
    record.scores.update(scores)
    record.trained += trained
