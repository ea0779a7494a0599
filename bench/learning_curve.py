"""A SPADE learning curve anyone can reproduce on a CPU (`make demo`, about 30 minutes on 2 cores).

The embedded model (SmolLM2-135M-Instruct) after its warm start, then N iterations of self-play
with the cpu-smoke sizes. Every `--eval-every` iterations train.py plays the bundled example
environments on fixed seeds it never trains on, without a hint (`eval_return`, iteration -1 is
the policy before self-play). This script runs that training, then draws three panels from the
run's metrics.jsonl: the agent's fixed-set return, the designer's valid fraction, and regret.

    python bench/learning_curve.py                       # 20 iterations, runs/curve-<time>/
    python bench/learning_curve.py --iterations 30 --name curve30 -- --lr 5e-5

Everything after `--` goes to train.py unchanged. The plot is runs/<name>/learning_curve.png;
the numbers are printed as a table (and are in metrics.jsonl).
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def table(rows: list[dict]) -> str:
    cols = ["iteration", "eval_return", "eval_solve_rate", "valid_fraction", "regret",
            "no_hint_return", "eos_fraction", "trained_tokens", "time_total_s"]
    fmt = lambda v: "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [("eval_return", "agent: no-hint return on the examples\n(fixed fresh seeds)"),
              ("valid_fraction", "designer: valid fraction"), ("regret", "regret (mean over environments)")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (key, title) in zip(axes, panels):
        points = [(r["iteration"], r[key]) for r in rows if r.get(key) is not None]
        if points:
            ax.plot(*zip(*points), marker="o", ms=3)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--name", default="curve-" + time.strftime("%Y%m%d-%H%M%S"))
    parser.add_argument("--run-dir", default="runs")
    parser.add_argument("--plot-only", action="store_true", help="redraw from an existing run")
    args = parser.parse_args(argv)
    run = Path(args.run_dir) / args.name
    if not args.plot_only:
        cmd = [sys.executable, str(ROOT / "train.py"), "--preset", "cpu-smoke", "--iterations",
               str(args.iterations), "--eval-every", str(args.eval_every), "--save-every",
               str(max(1, args.iterations // 4)), "--keep-checkpoints", "0", "--run-dir", args.run_dir,
               "--name", args.name, *extra]
        print(" ".join(cmd), flush=True)
        t0 = time.time()
        if subprocess.run(cmd).returncode != 0:
            return 1
        print(f"training took {(time.time() - t0) / 60:.1f} min", flush=True)
    rows = read_rows(run)
    plot(rows, run / "learning_curve.png")
    print(table(rows))
    print(f"plot: {run / 'learning_curve.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
