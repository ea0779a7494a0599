"""SPADE self-play training: the policy designs environments, plays them, and learns from both.

    python train.py                        # cpu-smoke on a CPU, the gpu preset when CUDA is there
    python train.py --preset gpu --model Qwen/Qwen3-4B-Instruct-2507 --name qwen4b
    python train.py --name qwen4b --resume # continue a killed run from its last checkpoint

Each iteration (spade_mini/loop.py): the designer writes N environments, the sandbox validates
them, the agent plays K paired seeds per environment with and without a hint, the designer is
rewarded by hint-based regret, and one REINFORCE update trains both roles. Everything is written
to runs/<name>/ (see spade_mini/rundir.py). Ctrl-C saves a checkpoint and exits.
"""
import json
import random
import signal
import sys
from pathlib import Path

from spade_mini.config import main_config

cfg = main_config(description=__doc__.splitlines()[0])
saved = Path(cfg.run_dir) / cfg.name / "config.json"
if cfg.resume and cfg.name and saved.is_file():  # continue with the run's own config; flags still win
    cfg = main_config(description=__doc__.splitlines()[0], base=json.loads(saved.read_text()))
print(f"preset: {cfg.preset}" + ("" if "--preset" in sys.argv else " (chosen automatically)"), flush=True)

import torch  # noqa: E402  (heavy imports only after the flags are known to be good)
from tqdm.auto import tqdm  # noqa: E402

from spade_mini.corpus import Corpus, CorpusError  # noqa: E402
from spade_mini.designer import SkillError, skills_for  # noqa: E402
from spade_mini.envs import EXAMPLES  # noqa: E402
from spade_mini.loop import State, one_iteration  # noqa: E402
from spade_mini.plays import fixed_set_metrics  # noqa: E402
from spade_mini.memory import Memory  # noqa: E402
from spade_mini.model import ModelError, load_policy  # noqa: E402
from spade_mini.reinforce import make_optimizer  # noqa: E402
from spade_mini.reports import Reporter  # noqa: E402
from spade_mini.rundir import RunDir  # noqa: E402
from spade_mini.sandbox import available_layers  # noqa: E402
from spade_mini.warmstart import warm_start  # noqa: E402


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


# --- set-up: run directory, policy, optimizer, skills, corpus, memory ----------------------
if cfg.resume and not cfg.name:
    fail("--resume needs the --name of the run to continue.")
run = RunDir(cfg.run_dir, cfg.name)
if not cfg.resume and (run.path / "config.json").is_file():
    fail(f"{run.path} holds a run already; continue it with --resume, or pick another --name.")
checkpoint = run.latest_checkpoint() if cfg.resume else None
if cfg.resume and checkpoint is None:
    fail(f"no checkpoint in {run.path}; start it without --resume.")
torch.manual_seed(cfg.seed)  # every random draw from here on (sampling included) follows --seed
try:
    skills = skills_for(cfg.setting, cfg.skills or None)
    corpus = None if cfg.no_corpus else Corpus.load(cfg.corpus, cfg.corpus_max_words)
    policy = load_policy(cfg)
except (SkillError, CorpusError, ModelError) as e:
    fail(str(e))
print(f"sandbox: {', '.join(available_layers())}", flush=True)  # the layers every child gets
optimizer = make_optimizer(policy.model, cfg.lr, cfg.weight_decay)
memory = None if cfg.no_memory else Memory.seeded(EXAMPLES, max_records=cfg.memory_size)
pool = [e for e in EXAMPLES if cfg.setting in ("mix", e.setting)]
state = State(policy, optimizer, skills, corpus, memory, random.Random(cfg.seed), pool=pool)

if checkpoint is not None:
    try:
        done, extra = run.load_checkpoint(checkpoint, policy, optimizer)
    except ModelError as e:
        fail(str(e))
    state.rng.setstate(extra["rng"])
    state.lp, state.iteration = extra["lp"], done + 1
    if memory is not None:
        state.memory = Memory.load(checkpoint / "memory.jsonl", max_records=cfg.memory_size)
        state.memory.save(run.path / "memory.jsonl")  # the run's copy may be ahead of the checkpoint
    run.truncate_after(done)
    print(f"resumed {run.path} after iteration {done}", flush=True)
else:
    run.write_config(cfg)
    if cfg.warm_start_steps > 0:  # supervised steps on the examples first (cached across runs)
        run.write_rows("warm_start.jsonl", warm_start(policy, cfg, corpus))
    if cfg.eval_every > 0:  # where the learning curve starts: iteration -1, before self-play
        run.write_rows("metrics.jsonl", [{"iteration": -1, **fixed_set_metrics(policy, cfg)}])
reporter = Reporter(cfg.report_to, run.path)


def save(iteration: int):
    extra = {"rng": state.rng.getstate(), "lp": state.lp}
    run.save_checkpoint(iteration, policy, optimizer, state.memory, extra)


# Ctrl-C lets the current iteration finish, saves it and exits, so a checkpoint is always the
# state between two iterations (a second Ctrl-C aborts at once, without saving).
stop = []


def on_interrupt(*_):
    stop.append(True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tqdm.write("stopping after this iteration; Ctrl-C again to abort without saving")


signal.signal(signal.SIGINT, on_interrupt)

# --- the loop ------------------------------------------------------------------------------
bar = tqdm(range(state.iteration, cfg.iterations), desc="iterations", initial=state.iteration,
           total=cfg.iterations)
phases = tqdm(total=4, desc="phase", leave=False)


def progress(phase: str, **stats):
    phases.n = ["design", "hint", "play", "update"].index(phase)
    phases.set_description(phase)
    phases.set_postfix({k: f"{v:.2f}" for k, v in stats.items()})


try:
    for it in bar:
        row, designs, _, episodes, scores = one_iteration(state, cfg, progress)
        if cfg.eval_every > 0 and ((it + 1) % cfg.eval_every == 0 or it + 1 == cfg.iterations):
            row.update(fixed_set_metrics(policy, cfg))
        run.record_iteration(it, row, designs, episodes, scores)
        reporter.log(row)
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        bar.set_postfix(valid=fmt(row["valid_fraction"]), regret=fmt(row["regret"]),
                        ret=fmt(row["no_hint_return"]), hint_ret=fmt(row["hint_return"]))
        if (it + 1) % cfg.save_every == 0 or it + 1 == cfg.iterations or stop:
            save(it)
        if stop:
            tqdm.write(f"interrupted; resume with: python train.py --name {run.path.name} --resume")
            raise SystemExit(130)
except KeyboardInterrupt:
    tqdm.write("aborted without saving this iteration")
    raise SystemExit(130)
finally:
    phases.close()
    bar.close()
    reporter.close()
print(f"done: {run.path}")
