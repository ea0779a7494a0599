"""What an evaluation writes: per-model summaries, paired deltas, detectable effects, table, plots.

From the item scores of evaluate.py: `summarize` gives each (suite, tier, metric, model) its mean
and 95% interval; `compare` gives every model but the reference (the base model, else the first)
its paired delta to the reference on the items both scored; `power` gives each row the smallest
effect its n can detect at the reference's observed rate (intervals.py says how each is
computed). `write_results` writes `results.json` (all of it, item scores included), `results.md`
(one row per metric, saying its tier, one column per model and per delta), `results.png`,
`deltas.png` (with two or more models) and `curves.png` (with two or more checkpoints of a run).
Omitted: HTML reports and comparisons between evaluations written at different times.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from spade_mini.evaluation import intervals as iv
from spade_mini.evaluation.benchmarks import SUITES, TIERS

LOWER_IS_BETTER = {"invalid_action"}


@dataclass
class Metric:
    suite: str
    tier: str
    metric: str
    model: str
    n: int
    mean: float
    low: float
    high: float
    ci: str  # "wilson" | "normal"


@dataclass
class Comparison:
    suite: str
    tier: str
    metric: str
    model: str
    reference: str
    n: int        # items both models scored
    delta: float  # model - reference
    low: float
    high: float
    p: float
    method: str   # "agresti-min" | "paired-normal"


@dataclass
class Power:
    suite: str
    tier: str
    metric: str
    n: int
    rate: float               # the reference's observed mean
    detectable: float | None  # smallest detectable improvement at 95% confidence, 80% power


def by_row(scores) -> dict[tuple[str, str, str], dict[str, dict[str, float]]]:
    """(suite, tier, metric) -> model -> item -> score, items in the order they were scored."""
    out: dict = {}
    for s in scores:
        out.setdefault((s.suite, s.tier, s.metric), {}).setdefault(s.model, {})[s.item] = s.score
    return out


def row_order(keys) -> list[tuple[str, str, str]]:
    rank = lambda x, seq: seq.index(x) if x in seq else len(seq)  # noqa: E731
    return sorted(keys, key=lambda r: (rank(r[0], SUITES), rank(r[1], TIERS), r[2]))


def summarize(scores) -> list[Metric]:
    return [Metric(*row, model, len(items), *iv.interval(list(items.values())))
            for row, models in by_row(scores).items() for model, items in models.items()]


def compare(scores, reference: str) -> list[Comparison]:
    out = []
    for row, models in by_row(scores).items():
        ref = models.get(reference)
        for model, items in models.items():
            if ref is None or model == reference:
                continue
            common = [k for k in ref if k in items]
            d = iv.paired_delta([ref[k] for k in common], [items[k] for k in common])
            out.append(Comparison(*row, model, reference, d.n, d.delta, d.low, d.high, d.p, d.method))
    return out


def power(scores, reference: str) -> list[Power]:
    out = []
    for row, models in by_row(scores).items():
        values = list(models.get(reference, {}).values())
        if not values:
            continue
        mean = sum(values) / len(values)
        if iv.is_binary(values):  # a lower-is-better rate improves by falling: mirror it
            found = iv.detectable_effect(len(values), 1 - mean if row[2] in LOWER_IS_BETTER else mean)
        else:
            sd = (sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1)) ** 0.5
            found = iv.detectable_shift(len(values), sd)
        out.append(Power(*row, len(values), mean, found))
    return out


def print_power(scores, reference: str) -> None:
    print(f"smallest detectable paired effect (95% confidence, 80% power) at {reference}'s rate:")
    for p in sorted(power(scores, reference), key=lambda p: row_order([(p.suite, p.tier, p.metric)])):
        shown = "out of reach" if p.detectable is None else f"{p.detectable:+.3f}"
        print(f"  {p.suite} / {p.tier} / {p.metric}: n={p.n} rate={p.rate:.3f} -> {shown}")


def markdown_table(metrics, comparisons, powers, models, skipped=None) -> str:
    cells = {(m.suite, m.tier, m.metric, m.model): m for m in metrics}
    deltas = {(c.suite, c.tier, c.metric, c.model): c for c in comparisons}
    detect = {(p.suite, p.tier, p.metric): p for p in powers}
    others = [m for m in models if any(c.model == m for c in comparisons)]
    ref = comparisons[0].reference if comparisons else (models[0] if models else "")
    head = ["suite", "tier", "metric", *models, *[f"Δ {m} − {ref} [95% CI] p" for m in others], "detectable Δ"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in row_order({(m.suite, m.tier, m.metric) for m in metrics}):
        out = [*row[:2], row[2] + (" (lower is better)" if row[2] in LOWER_IS_BETTER else "")]
        for model in models:
            m = cells.get((*row, model))
            out.append("-" if m is None else f"{m.mean:.3f} [{m.low:.2f}, {m.high:.2f}] n={m.n}")
        for model in others:
            c = deltas.get((*row, model))
            out.append("-" if c is None else f"{c.delta:+.3f} [{c.low:+.2f}, {c.high:+.2f}] p={c.p:.2g}")
        p = detect.get(row)
        out.append("-" if p is None or p.detectable is None else f"{p.detectable:.3f}")
        lines.append("| " + " | ".join(out) + " |")
    lines += ["", "Mean [95% CI]: Wilson score interval when every score in the cell is 0 or 1, else the "
              "normal approximation. Tier `full`: the benchmark as published; `easy`: settings a small "
              "model moves on. Δ: paired over the same items; 0/1 scores: Agresti-Min interval and exact "
              "McNemar p (near the edge the stricter of the two), else the normal interval of per-item "
              f"differences. Detectable Δ: smallest improvement over {ref}'s rate that n paired items "
              "detect at 95% confidence, 80% power (- when none is in reach)."]
    lines += [f"Skipped {s}: {why}" for s, why in (skipped or {}).items()]
    return "\n".join(lines) + "\n"


def iteration_of(model: str) -> int | None:
    """Iterations trained: 0 for the base model, i + 1 for '<run>/checkpoint-<i>'."""
    if model == "base":
        return 0
    tail = model.rsplit("checkpoint-", 1)
    return int(tail[1]) + 1 if len(tail) == 2 and tail[1].isdigit() else None


def write_results(out_dir: Path, cfg, st, models: list[str], scores, skipped: dict[str, str]) -> dict:
    from spade_mini.evaluation import plots
    out_dir.mkdir(parents=True, exist_ok=True)
    reference = "base" if "base" in models else models[0]
    metrics, comparisons, powers = summarize(scores), compare(scores, reference), power(scores, reference)
    result = {"models": models, "reference": reference, "settings": dataclasses.asdict(st),
              "config": cfg.to_dict() if hasattr(cfg, "to_dict") else {}, "skipped": skipped,
              "metrics": [dataclasses.asdict(m) for m in metrics],
              "deltas": [dataclasses.asdict(c) for c in comparisons],
              "power": [dataclasses.asdict(p) for p in powers],
              "items": [dataclasses.asdict(s) for s in scores]}
    (out_dir / "results.json").write_text(json.dumps(result, indent=1))
    (out_dir / "results.md").write_text(markdown_table(metrics, comparisons, powers, models, skipped))
    rows = row_order({(m.suite, m.tier, m.metric) for m in metrics})
    plots.eval_bars(metrics, rows, models, out_dir / "results.png")
    if comparisons:
        plots.eval_deltas(comparisons, rows, out_dir / "deltas.png")
    steps = {m: iteration_of(m) for m in models if iteration_of(m) is not None}
    if sum(1 for m in steps if m != "base") >= 2:
        plots.checkpoint_curves(metrics, rows, steps, out_dir / "curves.png")
    return result
