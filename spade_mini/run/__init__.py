"""Around the loop: the run directory and its checkpoints, what a run reports, and data
parallelism.

    rundir.py       RunDir (config, metrics, samples, environment files, checkpoints),
                    env_file_text / read_env_file, random_streams / restore_streams
    durable.py      writes a kill or a full disk cannot half-do; checkpoint manifests; WriteError
    reports.py      sample_rows for samples.jsonl; Reporter (TensorBoard or wandb, optional)
    row.py          iteration_row: the metrics row of one iteration, gathered over ranks
    resume.py       restore: a checkpoint back into the loop's State; StopSignals: stop between iterations
    distributed.py  the same loop on every torchrun process: shares, gathers, broadcasts

Other folders use the names below; the files above import each other directly.
"""
from spade_mini.run import distributed
from spade_mini.run.durable import WriteError
from spade_mini.run.reports import Reporter, sample_rows
from spade_mini.run.rundir import (RunDir, checkpoint_damage, env_file_text, iteration_records, load_pool,
                                   random_streams, read_env_file, restore_streams)

__all__ = ["RunDir", "checkpoint_damage", "load_pool", "env_file_text", "read_env_file", "iteration_records",
           "random_streams", "restore_streams", "WriteError", "Reporter", "sample_rows", "distributed"]
