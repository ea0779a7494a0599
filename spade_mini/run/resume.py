"""Continuing a run: what `--resume` restores, and how a run stops between iterations.

`restore` puts a checkpoint back into the loop's `State`: the weights and optimizer, the learning
potential, each rank's random streams (so the rest of the run is the uninterrupted one's), the
active pool and the memory; rank 0 cuts the run directory's files back to the checkpoint.
`StopSignals`: Ctrl-C, SIGTERM (what SLURM, Kubernetes and `docker stop` send before a kill) and
SIGUSR1 (SLURM's --signal) let the current iteration finish, so a checkpoint is always the state
between two iterations; a second signal aborts at once, without saving. Under torchrun, Ctrl-C
reaches torchrun too, which ends every process at once, so only SIGTERM and SIGUSR1 are caught
there (torchrun passes them on; docs/preemption.md).
"""
from __future__ import annotations

import signal

import torch

from spade_mini.designer import Memory
from spade_mini.run import distributed
from spade_mini.run.rundir import load_archive, load_pool, restore_streams


def restore(state, run, checkpoint, cfg, say) -> int:
    """Load `checkpoint` into `state` (every rank reads it; rank 0 tidies the run directory);
    return the last iteration it holds. Raises ModelError for weights that do not fit the model."""
    done, state.potential, streams = run.load_checkpoint(checkpoint, state.policy, state.optimizer)
    state.iteration = done + 1
    if len(streams) == distributed.world_size():
        restore_streams(state.rng, streams[distributed.rank()])
    else:
        state.rng.seed(distributed.rank_seed(cfg.seed + state.iteration))
        torch.manual_seed(distributed.rank_seed(cfg.seed + state.iteration))
        say(f"resuming a run saved by {len(streams)} processes with {distributed.world_size()}: weights, "
            "optimizer, memory and learning potential carry over, and each process's random streams "
            "restart from --seed plus the iteration, so the rest differs from an uninterrupted run.", flush=True)
    state.pool = load_pool(checkpoint) or state.pool
    state.archive = load_archive(checkpoint)
    if state.memory is not None:
        state.memory = Memory.load(checkpoint / "memory.jsonl", max_records=cfg.memory_size)
        if distributed.is_main():  # the run's copy may be ahead of the checkpoint
            run.write_text("memory.jsonl", (checkpoint / "memory.jsonl").read_text(encoding="utf-8"))
    if distributed.is_main():
        run.truncate_after(done)
    return done


class StopSignals:
    """The stop signals this process received (`received`); the first is said with `say`, a
    second raises KeyboardInterrupt. `release()` restores the defaults (past the loop, a signal
    ends the process at once)."""

    def __init__(self, world: int, say):
        self.received: list[int] = []
        self.signals = (signal.SIGTERM, signal.SIGUSR1) + ((signal.SIGINT,) if world == 1 else ())
        self.say = say
        for sig in self.signals:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame) -> None:
        self.received.append(signum)
        if len(self.received) > 1:
            raise KeyboardInterrupt
        self.say(f"{signal.Signals(signum).name}: stopping after this iteration; "
                 "a second signal aborts without saving")

    def release(self) -> None:
        for sig in self.signals:
            signal.signal(sig, signal.SIG_DFL)
