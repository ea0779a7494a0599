"""Evaluation: does what the agent learned transfer? A leaf: nothing in training imports it,
except the `--eval-every` curve (fixed_set.py, transfer.py), which train.py plays between iterations.

    evaluate.py    plans, suites and tiers; every model scored on the same items (eval.py)
    benchmarks.py  one-turn benchmark items and their scorers (reasoning_gym, HumanEval, BFCL)
    heldout.py     the held-out environments, played as training plays
    report.py      summaries, paired deltas, detectable effects, results.md
    intervals.py   Wilson and paired intervals, McNemar's test, sample sizes
    plots.py       a run's metric plots and environment table; evaluation plots
    fixed_set.py   fixed_set_metrics: the learning curve of --eval-every, on distinct items
    transfer.py    transfer_metrics: the curve's transfer suites at its start and last point
    curve.py       a curve point's statistics: distinct items, detectable change, cluster intervals

Other folders use the names below; the files above import each other directly.
"""
from spade_mini.evaluation.fixed_set import fixed_set_metrics
from spade_mini.evaluation.plots import plot_run
from spade_mini.evaluation.transfer import transfer_metrics

__all__ = ["fixed_set_metrics", "plot_run", "transfer_metrics"]
