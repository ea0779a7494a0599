"""Plots: a training run's curves and environments page, and an evaluation's figures.

`plot_run(run_dir)` writes `<run_dir>/plots/*.png` (one figure per group of metrics that the
rows contain: missing keys are skipped, so older or partial runs still plot) and
`<run_dir>/plots/envs.html`, a table of every generated environment (`envs/*.py`) with the stats
from its header comment, sorted by regret and re-sortable by clicking a column; with an active
pool, `life.png`: each environment's life in the pool (admitted, its level over the iterations,
why it left), from the newest checkpoint's pool.json.
Omitted: smoothing, comparisons across runs, and live updating.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from spade_mini.run import read_env_file

GROUPS = {  # file name -> (title, metric keys)
    "valid_fraction": ("valid designs", ["valid_fraction"]),
    "returns": ("agent return", ["no_hint_return", "hint_return"]),
    "regret": ("regret (hint - no hint)", ["regret"]),
    "designer_reward": ("designer reward", ["designer_reward"]),
    "losses": ("losses", ["agent_loss", "designer_loss"]),
    "throughput": ("tokens per second", ["tokens_per_s"]),
    "time": ("seconds per phase", ["time_design_s", "time_hint_s", "time_play_s", "time_update_s", "time_total_s"]),
    "memory": ("peak memory (MB)", ["peak_memory_mb"]),
    "pool": ("the active pool", ["pool_size", "pool_in_band", "pool_level_mean", "pool_level_max"]),
}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def read_metrics(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a half-written last line of a live run
        if isinstance(row, dict):
            rows.append(row)
    return rows


def plot_metrics(rows: list[dict], out: Path) -> list[Path]:
    plt = _pyplot()
    written = []
    for fname, (title, keys) in GROUPS.items():
        present = [k for k in keys if any(isinstance(r.get(k), (int, float)) for r in rows)]
        if not present:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for k in present:
            pts = [(r.get("iteration", i), r[k]) for i, r in enumerate(rows) if isinstance(r.get(k), (int, float))]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=k)
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{fname}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def env_stats(path: Path) -> dict[str, str]:
    return read_env_file(path)[0]


def _num(v: str) -> float:
    try:
        return float(v)
    except ValueError:
        return float("-inf")


SORT_JS = """<script>
function sortBy(c){const t=document.getElementById('envs'),b=t.tBodies[0],r=[...b.rows];
const d=t.dataset.col==c&&t.dataset.dir=='desc'?'asc':'desc';t.dataset.col=c;t.dataset.dir=d;
r.sort((x,y)=>{const a=x.cells[c].innerText,e=y.cells[c].innerText,p=parseFloat(a),q=parseFloat(e);
const k=isNaN(p)||isNaN(q)?a.localeCompare(e):p-q;return d=='asc'?k:-k});r.forEach(x=>b.appendChild(x));}
</script>"""


def envs_page(run_dir: Path, out: Path) -> Path:
    envs = sorted((run_dir / "envs").glob("*.py")) if (run_dir / "envs").is_dir() else []
    stats = {p.name: env_stats(p) for p in envs}
    keys = sorted({k for s in stats.values() for k in s}, key=lambda k: (k != "regret", k))
    order = sorted(envs, key=lambda p: _num(stats[p.name].get("regret", "")), reverse=True)
    n_samples = 0
    if (run_dir / "samples.jsonl").is_file():
        n_samples = sum(1 for line in (run_dir / "samples.jsonl").read_text().splitlines() if line.strip())
    head = "".join(f"<th onclick='sortBy({i})'>{html.escape(k)}</th>" for i, k in enumerate(["file"] + keys))
    body = "".join("<tr><td><a href='../envs/{0}'>{0}</a></td>".format(html.escape(p.name))
                   + "".join(f"<td>{html.escape(stats[p.name].get(k, ''))}</td>" for k in keys) + "</tr>\n"
                   for p in order)
    page = (f"<!doctype html><meta charset='utf-8'><title>{html.escape(run_dir.name)} environments</title>"
            "<style>td,th{padding:2px 8px;border-bottom:1px solid #ddd}th{cursor:pointer}</style>"
            f"<h2>{html.escape(run_dir.name)}: {len(envs)} environments</h2>"
            f"<p>{n_samples} rows in <a href='../samples.jsonl'>samples.jsonl</a>. Click a column to sort "
            f"(initially by regret, highest first).</p><table id='envs'><thead><tr>{head}</tr></thead>"
            f"<tbody>\n{body}</tbody></table>{SORT_JS}")
    path = out / "envs.html"
    path.write_text(page)
    return path


def plot_run(run_dir: str | Path) -> list[Path]:
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise FileNotFoundError(f"{metrics} does not exist; pass a run folder written by train.py.")
    out = run_dir / "plots"
    out.mkdir(exist_ok=True)
    rows = read_metrics(metrics)
    life = life_plot(run_dir, out, max((r.get("iteration", 0) for r in rows), default=0))
    return plot_metrics(rows, out) + [envs_page(run_dir, out)] + ([life] if life else [])


def life_table(run_dir: Path) -> list[dict]:
    """The active pool's life table in the newest checkpoint: a row per environment it has held
    (pool.py's life_row; those still in it have no `left`), [] without a pool."""
    found = sorted(run_dir.glob("checkpoint-*/pool.json"), key=lambda p: int(p.parent.name.rpartition("-")[2]))
    if not found:
        return []
    from spade_mini.pool import Pool
    return Pool.from_dict(json.loads(found[-1].read_text())).life_table()


def life_plot(run_dir: Path, out: Path, last: int) -> Path | None:
    """One line per environment, from the iteration it joined to the one it left (or the last),
    at the height of its level; the reason it left at its end."""
    rows = life_table(run_dir)
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.2))
    for y, r in enumerate(rows):
        start = r["moves"][0][1] if r["moves"] else r["level"]
        points, level, at = [], start, r["admitted"]
        for it, _, to in r["moves"]:
            points.append((at, it, level))
            at, level = it, to
        points.append((at, last if r["left"] is None else r["left"], level))
        for a, b, lv in points:
            ax.plot([a, max(b, a + 0.3)], [y, y], linewidth=6, color=plt.cm.viridis(lv / max(1, r["levels"] - 1)))
            ax.text(a, y + 0.15, str(lv), fontsize=7)
        ax.text((last if r["left"] is None else r["left"]) + 0.4, y, f"{r['why'] or 'in the pool'}, {r['plays']} plays",
                fontsize=7, va="center")
    ax.set_yticks(range(len(rows)), [r["id"] for r in rows], fontsize=7)
    ax.set_xlabel("iteration (the number over a bar: its level)")
    ax.set_title("the active pool: each environment's life")
    ax.set_xlim(-0.5, last + 4)
    fig.tight_layout()
    path = out / "life.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# --- evaluation ----------------------------------------------------------------------------------

def _label(row) -> str:
    return "{} {}\n{}".format(*row)


def eval_bars(metrics, rows: list[tuple], models: list[str], path: Path) -> None:
    """One group of bars per (suite, tier, metric), one bar per model, 95% intervals as whiskers."""
    plt = _pyplot()
    cells = {(m.suite, m.tier, m.metric, m.model): m for m in metrics}
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(rows) * max(1, len(models))), 4))
    width = 0.8 / max(1, len(models))
    for j, model in enumerate(models):
        found = [(i, cells[(*row, model)]) for i, row in enumerate(rows) if (*row, model) in cells]
        ax.bar([i + j * width for i, _ in found], [m.mean for _, m in found], width, capsize=3, label=model,
               yerr=[[max(0.0, m.mean - m.low) for _, m in found], [max(0.0, m.high - m.mean) for _, m in found]])
    ax.set_xticks([i + width * (len(models) - 1) / 2 for i in range(len(rows))])
    ax.set_xticklabels([_label(r) for r in rows], fontsize=6, rotation=40, ha="right")
    ax.set_ylabel("score (95% CI)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def eval_deltas(comparisons, rows: list[tuple], path: Path) -> None:
    """Paired delta of each model to the reference, one horizontal line per row and model."""
    plt = _pyplot()
    models = list(dict.fromkeys(c.model for c in comparisons))
    fig, ax = plt.subplots(figsize=(7, max(3, 0.3 * len(rows) * len(models))))
    step = 0.8 / max(1, len(models))
    for j, model in enumerate(models):
        found = [(i, c) for i, row in enumerate(rows) for c in comparisons
                 if c.model == model and (c.suite, c.tier, c.metric) == row]
        ax.errorbar([c.delta for _, c in found], [i + j * step for i, _ in found], fmt="o", capsize=3,
                    xerr=[[c.delta - c.low for _, c in found], [c.high - c.delta for _, c in found]], label=model)
    ax.axvline(0.0, color="grey", linewidth=1)
    ax.set_yticks([i + step * (len(models) - 1) / 2 for i in range(len(rows))])
    ax.set_yticklabels([_label(r).replace("\n", " / ") for r in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel(f"paired delta to {comparisons[0].reference} (95% CI)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def checkpoint_curves(metrics, rows: list[tuple], steps: dict[str, int], path: Path) -> None:
    """One panel per (suite, tier, metric): mean against iterations trained, 95% band."""
    plt = _pyplot()
    cols = min(4, len(rows))
    nrows = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.4 * nrows), squeeze=False)
    for ax, row in zip(axes.flat, rows):
        pts = sorted(((steps[m.model], m) for m in metrics if (m.suite, m.tier, m.metric) == row and m.model in steps),
                     key=lambda pt: pt[0])
        xs = [x for x, _ in pts]
        ax.plot(xs, [m.mean for _, m in pts], marker="o", markersize=3)
        ax.fill_between(xs, [m.low for _, m in pts], [m.high for _, m in pts], alpha=0.25)
        ax.set_title(_label(row).replace("\n", " / "), fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.supxlabel("iterations trained (0: base)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
