"""Run plots: a training run's metrics.jsonl as PNG curves, and a page of its environments.

`plot_run(run_dir)` writes `<run_dir>/plots/*.png` (one figure per group of metrics that the
rows contain: missing keys are skipped, so older or partial runs still plot) and
`<run_dir>/plots/envs.html`, a table of every generated environment (`envs/*.py`) with the stats
from its header comment, sorted by regret and re-sortable by clicking a column.
Omitted: smoothing, comparisons across runs, and live updating.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

GROUPS = {  # file name -> (title, metric keys)
    "valid_fraction": ("valid designs", ["valid_fraction"]),
    "returns": ("agent return", ["no_hint_return", "hint_return"]),
    "regret": ("regret (hint - no hint)", ["regret"]),
    "designer_reward": ("designer reward", ["designer_reward"]),
    "losses": ("losses", ["agent_loss", "designer_loss"]),
    "throughput": ("tokens per second", ["tokens_per_s"]),
    "time": ("seconds per phase", ["time_design_s", "time_hint_s", "time_play_s", "time_update_s", "time_total_s"]),
    "memory": ("peak memory (MB)", ["peak_memory_mb"]),
}


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
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
    """The `# key: value` header lines that train.py writes above each environment's source."""
    stats = {}
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith("# ") or ": " not in line:
            break
        key, _, value = line[2:].partition(": ")
        stats[key.strip()] = value.strip()
    return stats


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
    return plot_metrics(read_metrics(metrics), out) + [envs_page(run_dir, out)]
