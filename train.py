"""SPADE self-play training: the policy designs environments, plays them, and learns from both.

    python train.py                        # the cpu preset on a CPU, the gpu preset when CUDA is there
    python train.py --preset gpu --model Qwen/Qwen3-4B-Instruct-2507 --name qwen4b
    python train.py --name qwen4b --resume # continue a killed run from its last checkpoint
    torchrun --standalone --nproc-per-node 4 train.py --preset gpu --pool-keep false   # data parallel, 4 GPUs

Each iteration (spade_mini/loop.py): the designer writes environments until K are valid (every
R iterations, or when the active pool is short), the sandbox validates them, the agent plays K
paired seeds per new environment with and without a hint, the designer is rewarded by
hint-based regret, the informative ones join the active pool (spade_mini/pool.py), which is
replayed without a hint on fresh seeds, and one REINFORCE update trains both roles. Everything is written
to runs/<name>/ (see spade_mini/run/rundir.py). Ctrl-C, SIGTERM or SIGUSR1 finishes the
iteration, saves a checkpoint and exits; a full disk stops the run with one sentence, and
--resume continues either. Under torchrun every process runs this same script on its share of
each iteration, and rank 0 writes the run directory (spade_mini/run/distributed.py).
"""
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

from spade_mini.cli import main_config

cfg = main_config(description=__doc__.splitlines()[0])
saved = Path(cfg.run_dir) / cfg.name / "config.json"
if cfg.resume and cfg.name and saved.is_file():  # continue with the run's own config; flags still win
    cfg = main_config(description=__doc__.splitlines()[0], base=json.loads(saved.read_text()))
if os.environ.get("RANK", "0") == "0":  # torchrun's rank 0 speaks for every process
    print(f"preset: {cfg.preset}" + ("" if "--preset" in sys.argv else " (chosen automatically)"), flush=True)
if cfg.plan:  # the memory plan alone, per phase: no GPU, no weights (spade_mini/run/planning.py)
    from spade_mini.run.planning import print_plan
    raise SystemExit(print_plan(cfg))

import torch  # noqa: E402  (heavy imports only after the flags are known to be good)
from tqdm.auto import tqdm  # noqa: E402

from spade_mini.designer import Corpus, CorpusError, Memory, SkillError, skills_for  # noqa: E402
from spade_mini.envs import MEMORY_ONLY, TIERS, tier  # noqa: E402
from spade_mini.evaluation import fixed_set_metrics, transfer_metrics  # noqa: E402
from spade_mini.loop import State, one_iteration  # noqa: E402
from spade_mini.run.row import peak_memory_mb  # noqa: E402
from spade_mini.policy import ModelError, PlanError, load_policy  # noqa: E402
from spade_mini.reinforce import make_optimizer  # noqa: E402
from spade_mini.run import Reporter, RunDir, WriteError, distributed  # noqa: E402
from spade_mini import alignment  # noqa: E402
from spade_mini.fill import own_examples  # noqa: E402
from spade_mini.gate import describe  # noqa: E402
from spade_mini.pool import Pool  # noqa: E402
from spade_mini.settings import gate_settings  # noqa: E402
from spade_mini.shape import Shape  # noqa: E402
from spade_mini.run import iteration_records, random_streams  # noqa: E402
from spade_mini.run.resume import StopSignals, restore  # noqa: E402
from spade_mini.run.planning import fit_plan  # noqa: E402
from spade_mini.sandbox import available_layers  # noqa: E402
from spade_mini.warmstart import warm_start  # noqa: E402


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def disk_refused(e: WriteError):  # what was saved before stays intact (spade_mini/run/durable.py)
    fail(f"{e}; free space on that disk, then continue the run with --name {run.path.name} --resume.")


# --- set-up: processes, run directory, policy, optimizer, skills, corpus, memory -------------
try:
    distributed.init(cfg.device)  # torchrun's process group; nothing to do in one process
except distributed.DistributedError as e:
    fail(str(e))
main, world = distributed.is_main(), distributed.world_size()
say = print if main else (lambda *args, **kwargs: None)
if world > 1 and cfg.pool_keep:
    fail("a pool kept from one iteration to the next lives in one process; under torchrun add --pool-keep false "
         "(each iteration's pool then holds only what that iteration filled).")
if world > 1 and cfg.alignment_every:
    fail("alignment compares one process's gradients before they are summed over processes; under torchrun "
         "leave out --alignment-every.")
if Shape.of(cfg).slots < world:
    fail(f"{Shape.of(cfg).slots} design slots (--design-batch, else --designs-per-iteration) leave a process "
         f"without a design; give at least {world}, one per process.")
if cfg.resume and not cfg.name:
    fail("--resume needs the --name of the run to continue.")
run = RunDir(cfg.run_dir, distributed.from_main(cfg.name or time.strftime("%Y%m%d-%H%M%S")))
if main and not cfg.resume and (run.path / "config.json").is_file():
    fail(f"{run.path} holds a run already; continue it with --resume, or pick another --name.")
# the newest intact checkpoint, chosen by rank 0 (which says why it skips a damaged one)
checkpoint = distributed.from_main(run.latest_checkpoint(report=print) if cfg.resume and main else None)
if cfg.resume and checkpoint is None:
    if not saved.is_file():
        fail(f"no checkpoint in {run.path}; start it without --resume.")
    say(f"no intact checkpoint in {run.path}: starting it again from its first iteration.", flush=True)
save_every = cfg.save_every or (10 if cfg.full_finetune else 1)  # a LoRA state is small: save every iteration
torch.manual_seed(cfg.seed)  # every random draw from here on (sampling included) follows --seed
try:
    skills = skills_for(cfg.setting, cfg.skills or None)
    corpus = None if cfg.no_corpus else Corpus.load(cfg.corpus, cfg.corpus_max_words)
    policy = load_policy(cfg, verbose=main)
    fit_plan(policy, cfg, say=say)  # the memory plan: on a CPU by this run's need; printed in one line
    if cfg.alignment_every and not alignment.measurable(policy):
        fail(f"alignment copies the trainable weights' gradient, and this run trains more than "
             f"{alignment.FLAT_LIMIT:,}; train a LoRA adapter (leave out --full-finetune) or leave out --alignment-every.")
except (SkillError, CorpusError, ModelError, PlanError) as e:
    fail(str(e))
say(f"sandbox: {', '.join(available_layers())}", flush=True)  # the layers every child gets
optimizer = make_optimizer(policy.model, cfg.lr, cfg.weight_decay)
try:  # the examples' filler puts these in the pool: the tier's, or the user's own once they pass the gate
    examples = (own_examples(cfg.examples_dir, [s.key for s in skills], gate_settings(cfg), policy.count_tokens, say)
                if cfg.examples_dir else tier(cfg.examples, cfg.setting))
    shown = examples if cfg.examples_dir else TIERS[cfg.examples][0] + MEMORY_ONLY[cfg.examples]
    memory = None if cfg.no_memory else Memory.seeded(shown, max_records=cfg.memory_size, shapes={
        e.name: describe(e.source, gate_settings(cfg)) for e in shown})  # what each asks: the coverage line
except ValueError as e:
    fail(str(e))
# every random draw from here on (designs, seeds, sampling) follows --seed, distinct per rank
state = State(policy, optimizer, skills, corpus, memory, random.Random(distributed.rank_seed(cfg.seed)),
              examples=examples, pool=Pool.from_config(cfg),
              probe_sources=[e.source for e in tier(cfg.examples, cfg.setting, held_out=True)])
if distributed.rank() > 0:  # rank 0 (and one process) keeps the stream --seed started above
    torch.manual_seed(distributed.rank_seed(cfg.seed))

def evaluate_curve(iteration: int) -> dict:
    """--eval-every: the held-out curve's metrics, and its episodes into eval.jsonl; at the
    start and the last iteration also the transfer suites (--transfer-items), into transfer.jsonl."""
    point = fixed_set_metrics(policy, cfg)
    run.append("eval.jsonl", [{"iteration": iteration, **item} for item in point.items])
    if cfg.transfer_items > 0 and (iteration < 0 or iteration + 1 == cfg.iterations):
        suites = transfer_metrics(policy, cfg)
        run.append("transfer.jsonl", [{"iteration": iteration, **item} for item in suites.items])
        return {**point.metrics, **suites.metrics}
    return point.metrics


try:  # tidy the run directory, or write its first files
    if checkpoint is not None:  # weights, optimizer, streams, pool, memory (spade_mini/run/resume.py)
        try:
            done = restore(state, run, checkpoint, cfg, say)
        except ModelError as e:
            fail(str(e))
        say(f"resumed {run.path} after iteration {done}", flush=True)
    elif main:
        if cfg.resume:  # a run stopped before its first checkpoint: drop what it wrote
            run.truncate_after(-1)
        run.write_config(cfg)
        if cfg.warm_start_steps > 0:  # supervised steps on the examples first (cached across runs)
            run.write_rows("warm_start.jsonl", warm_start(policy, cfg, corpus))
            say(f"warm start: saved as {run.save_warm_start(policy)} (evaluate it alone with eval.py)", flush=True)
    distributed.broadcast_parameters(policy.trainable_parameters())  # rank 0's warm start, everywhere
    if main and checkpoint is None and cfg.eval_every > 0 and cfg.eval_start:  # the curve starts before self-play
        run.write_rows("eval.jsonl", [])
        run.write_rows("metrics.jsonl", [{"iteration": -1, **evaluate_curve(-1)}])
except WriteError as e:
    disk_refused(e)
reporter = Reporter(cfg.report_to if main else "none", run.path)


def save(iteration: int):
    streams = distributed.all_gather(random_streams(state.rng))  # every rank's own, for an exact resume
    if main:
        run.save_checkpoint(iteration, policy, optimizer, state.memory, state.potential, streams,
                            state.pool, state.archive)
        run.remove_old_checkpoints(cfg.keep_checkpoints)


def check_identical(when: str):  # --check-weights-every: a debug check of data parallelism
    try:
        distributed.check_identical(policy.trainable_parameters(), when, state.potential,
                                    state.memory and state.memory.records)
    except distributed.DistributedError as e:
        fail(str(e))


# Ctrl-C, SIGTERM or SIGUSR1: finish the iteration, save it, exit 128 + n; a second aborts
stops = StopSignals(world, tqdm.write if main else (lambda *a: None))

# --- the loop ------------------------------------------------------------------------------
bar = tqdm(range(state.iteration, cfg.iterations), desc="iterations", initial=state.iteration,
           total=cfg.iterations, disable=not main)
phases = tqdm(total=4, desc="phase", leave=False, disable=not main)


def progress(phase: str, **stats):
    phases.n = ["design", "hint", "play", "update"].index(phase)
    phases.set_description(phase)
    phases.set_postfix({k: f"{v:.2f}" for k, v in stats.items()})


try:
    if cfg.check_weights_every > 0:
        check_identical("at the start")
    for it in bar:
        record = one_iteration(state, cfg, progress if main else None)
        row = record.row
        # rank 0 writes every rank's sample rows and environments, in slot order, designs first
        samples, envs = iteration_records(it, record.designs, record.episodes, record.scores)
        samples = sorted(distributed.gather_concat(samples)[0], key=lambda r: r["kind"] != "design")
        envs = distributed.gather_concat(envs)[0]
        if cfg.check_weights_every > 0 and (it + 1) % cfg.check_weights_every == 0:
            check_identical(f"after iteration {it}")
        if main:
            if cfg.eval_every > 0 and ((it + 1) % cfg.eval_every == 0 or it + 1 == cfg.iterations):
                row.update(evaluate_curve(it))
            run.write_iteration(row, samples, envs)
            reporter.log(row)
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        bar.set_postfix(valid=fmt(row["valid_fraction"]), regret=fmt(row["regret"]),
                        ret=fmt(row["no_hint_return"]), informative=row["informative_episodes"],
                        pool=row["pool_size"])
        # every rank stops after the same iteration: the first signal that any of them received
        signals = [s for got in distributed.all_gather(stops.received[:1]) for s in got]
        if (it + 1) % save_every == 0 or it + 1 == cfg.iterations or signals:
            save(it)
        if signals:
            say(f"stopped by {signal.Signals(signals[0]).name} after saving iteration {it}; "
                f"resume with: python train.py --name {run.path.name} --resume", flush=True)
            raise SystemExit(128 + signals[0])
except KeyboardInterrupt:
    tqdm.write("aborted without saving this iteration")
    raise SystemExit(128 + (stops.received[-1] if stops.received else signal.SIGINT))
except WriteError as e:
    disk_refused(e)
except PlanError as e:  # a single row that runs out of memory on its own
    fail(str(e))
finally:
    stops.release()  # past the loop, a signal ends the process at once
    phases.close()
    bar.close()
    reporter.close()
    distributed.close()
say(f"done: {run.path} (peak memory {peak_memory_mb() / 1024:.1f} GiB; "
    f"the memory plan said {policy.plan.total_bytes / 2**30:.1f} GiB)")
