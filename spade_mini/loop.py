"""One SPADE iteration, top to bottom: fill -> hint -> play -> score -> pool -> update -> remember.

    fill     = the pool's fillers (fill.py, --pool-fill): the hand-written examples join, the
               designer writes environments in batched calls until V are valid (or a cap), each
               through the gate (spade_mini/gate), every R iterations or when the pool is short;
               when it is short, the store's designs (the memory's) are played again
    hints    = a privileged hint per episode (the policy's, or the environment's hint()); leaky ones dropped
    episodes = K paired seeds per NEW valid environment, in both arms (no-hint, hint), in lockstep
    scores   = per environment: solve rates, regret = mean(hint) - mean(no-hint), designer reward
    pool     = informative new designs join the active pool (pool.py), which is replayed no-hint
               on fresh seeds with the iteration's other no-hint episodes, and retires what is done
    update   = REINFORCE with a group-mean baseline on no-hint agent turns and designer completions
    memory   = every design attempt with its stats, for later designer prompts

The hint arm and the hints themselves are never trained: they exist only to measure regret.
Every arm plays the same no-hint episodes an iteration; `--pool-fill examples` (the fixed pool,
the paper's baseline) has no designer and so no hint arm. Each step is a function of the state
and its settings (settings.py, built once from the Config) that fills its part of the
iteration's record (`Iteration`), in this order. Everything the loop needs between iterations
lives in `State`. Under torchrun each process runs this same function on its share of the N
slots; the `distributed.*` calls gather what needs the whole batch (one process: they return
their input), and each process keeps a pool of its own iteration only (--pool-keep false).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from spade_mini import alignment
from spade_mini.fill import fill
from spade_mini.gate import Archive
from spade_mini.pool import Pool
from spade_mini.probe import probe_chats
from spade_mini.reinforce import role_token_counts, update
from spade_mini.replay import play_the_rest
from spade_mini.reward import LearningPotential
from spade_mini.run import distributed
from spade_mini.run.row import iteration_row
from spade_mini.samples import remember, update_samples
from spade_mini.settings import Settings
from spade_mini.steps import play_new, score_new, write_hints


@dataclass
class Iteration:
    """What one iteration made, filled by the steps in order; the metrics row (run/row.py), the
    run directory and the tests read it. Plain data."""
    number: int
    times: dict = field(default_factory=dict)   # seconds by phase: design, hint, play, update
    # 1 fill: every design attempt; the new valid designs; what joined the pool without admission
    designs: list = field(default_factory=list)      # designer/design.py Design, valid or not
    fresh: list = field(default_factory=list)        # agent.py Playable per new valid design the budget plays
    waiting: list = field(default_factory=list)      # ids of the new valid designs it does not: in the store
    stored: list = field(default_factory=list)       # agent.py Playable per design taken from the store
    filled: list = field(default_factory=list)       # pool.py PoolEnv: the examples that joined
    # 2 hint: per new design, its K paired seeds and their hints
    seeds: list = field(default_factory=list)
    hints: list = field(default_factory=list)        # designer/hints.py EpisodeHints
    # 3-5 play, score and the pool: every episode, what was played, the scores, what trains the agent
    episodes: list = field(default_factory=list)
    playables: list = field(default_factory=list)
    scores: dict = field(default_factory=dict)       # reward DesignScore by environment id
    trained: list = field(default_factory=list)      # the usable no-hint episodes
    pool: object = None                              # replay.py PoolReport
    # 6-7 samples and the update
    samples: list = field(default_factory=list)
    left_out: list = field(default_factory=list)     # thinned designer samples (they count in the denominator)
    design_rewards: list = field(default_factory=list)
    stats: object = None                             # reinforce.py UpdateStats
    alignment_set: object = None                     # alignment.py SetGradient, when measured
    watch: object = None                             # alignment.py EnvGradients the update fills
    alignment: dict = field(default_factory=dict)    # environment id -> its cosine over the floor
    alignment_note: str = ""                         # where the set's items came from (its first measurement)
    credited: dict = field(default_factory=dict)     # new design id -> the reading its reward was paid on
    # 9 the metrics row (run/row.py)
    row: dict = field(default_factory=dict)


@dataclass
class State:
    policy: object
    optimizer: object
    skills: list                   # the active Skill records
    corpus: object | None          # a Corpus, or None (no grounding)
    memory: object | None          # a Memory, or None
    rng: random.Random
    potential: LearningPotential = field(default_factory=LearningPotential)
    examples: list = field(default_factory=list)  # HandEnvs the examples' filler puts in the pool
    iteration: int = 0
    pool: Pool | None = None         # the active pool (pool.py); None: made from the Config at the first iteration
    probe: list | None = None        # the drift probe (policy/drift.py), made at the first iteration
    probe_sources: list = field(default_factory=list)  # held-out environments the probe starts from
    levels_valid: dict = field(default_factory=dict)  # (source sha256, level) -> passes the gate (replay.py)
    archive: Archive | None = None   # what a design must not re-skin (gate/novelty.py); None: made at the first iteration
    alignment_items: list = field(default_factory=list)  # the alignment set's (environment, seed) items (alignment.py)


def one_iteration(state: State, cfg, progress=None) -> Iteration:
    """Run one iteration and return its record. `progress(phase, **stats)` is called as each
    phase starts. Data parallel, the record holds this rank's share; its row is the whole batch's."""
    settings, record = Settings.of(cfg, distributed.world_size()), Iteration(state.iteration)
    if state.pool is None:
        state.pool = Pool.from_config(cfg)
    if state.archive is None:
        state.archive = Archive.bundled()
    if state.probe is None:  # the drift probe: the starting policy's replies, made once (not counted)
        from spade_mini.policy.drift import make_probe
        state.probe = make_probe(state.policy, probe_chats(state.probe_sources, cfg.drift_probe, cfg.agent_template,
                                                           settings.play.limits), cfg.turn_max_new_tokens)
    tokens_before, started = state.policy.tokens_generated, time.time()
    say = progress or (lambda phase, **stats: None)

    def timed(phase: str, step, **stats):
        say(phase, **stats)
        t = time.time()
        step(state, settings, record)
        record.times[phase] = record.times.get(phase, 0.0) + time.time() - t

    timed("design", fill)                   # 1. the pool's fillers: examples, memory, the designer
    valid = sum(d.valid for d in record.designs) / len(record.designs) if record.designs else 0.0
    timed("hint", write_hints, valid=valid)  # 2. a privileged hint per paired seed of each new design
    timed("play", play_new, valid=valid)     # 3. K paired seeds per new design, both arms
    score_new(state, settings, record)       # 4. regret and the designer reward per new design
    timed("play", play_the_rest)             # 5. admit, replay the pool on fresh seeds, move levels
    skill_of = {p.id: p.skill for p in record.playables}  # each skill's learning-potential averages move once
    state.potential.update_many(distributed.gather_concat([(skill_of[e.job.design_id], e.ret)
                                                           for e in record.trained])[0])
    t = time.time()
    alignment.measure(state, settings, record)  # (every --alignment-every) the alignment set's gradient,
    alignment.credit(state, settings, record)   # and each new design's reading in its reward
    record.times["align"] = time.time() - t
    update_samples(state, settings, record)  # 6. agent turns and designer completions, with advantages
    say("update")                            # 7. one update for both roles (one LoRA adapter, or every weight)
    t = time.time()
    counts = distributed.sum_over_ranks(role_token_counts(record.samples + record.left_out))
    record.stats = update(state.policy, record.samples, state.optimizer, settings.update, token_counts=counts,
                          sync_gradients=distributed.all_reduce_gradients, watch=record.watch)
    record.times["update"] = time.time() - t
    remember(state, record)                  # 8. every design attempt, with its stats
    alignment.note(state, settings, record)  # each environment's alignment, to the pool and memory
    state.iteration += 1
    record.row = iteration_row(state, record, tokens_before, started)  # 9. the whole batch's metrics row
    return record
