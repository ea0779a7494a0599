"""Evaluation: does what the agent learned transfer? A leaf: nothing in training imports it,
except the `--eval-every` curve (fixed_set.py), which train.py plays between iterations.

    evaluate.py    plans, suites and tiers; every model scored on the same items (eval.py)
    benchmarks.py  one-turn benchmark items and their scorers (reasoning_gym, HumanEval, BFCL)
    heldout.py     the held-out environments, played as training plays
    report.py      summaries, paired deltas, detectable effects, results.md
    intervals.py   Wilson and paired intervals, McNemar's test, sample sizes
    plots.py       a run's metric plots and environment table; evaluation plots
    fixed_set.py   fixed_set_metrics: the learning curve of --eval-every

Other folders use the names below; the files above import each other directly.
"""
from spade_mini.evaluation.fixed_set import fixed_set_metrics
from spade_mini.evaluation.plots import plot_run

__all__ = ["fixed_set_metrics", "plot_run"]
