"""SPADE against the fixed-pool baseline on a CPU: a learning curve on held-out environments.

`make demo` runs this. Every run of both arms starts from ONE policy (the preset's model; with a
warm start, the cached warm start) and trains for the same iterations with the same agent update
and the same episodes per iteration, under its own --seed:

    spade  the policy designs environments (shown the tier's examples in its memory), plays them
           with and without a hint, and both roles learn (designer: the blend of difficulty and
           regret);
    fixed  the agent plays the tier's examples themselves (`--fixed-pool`): no designer.

The starting policy is evaluated once (`train.py --iterations 0`): it is the same for every run
(a LoRA adapter starts as a no-op, and evaluation is greedy). Then every `--eval-every`
iterations and at the last one train.py plays the tier's HELD-OUT environments (which neither
arm, a warm start, the memory nor the designer's prompt ever saw) greedily, without a hint, on
the same seeds. Each point is paired, item by item, against the starting policy
(`spade_mini/evaluation/intervals.py`: the paired delta, its 95% interval, the exact McNemar p).
The script writes one plot (both arms' curves with their 95% bands; SPADE's valid fraction,
regret and the no-hint solve rate of its valid designs per iteration), prints the tables, and
keeps a small summary (JSON) that notebooks/05 reads.

A stopped run continues: the start evaluation and every finished run are kept, and a run that
stopped part-way resumes from its newest checkpoint (train.py --resume; one every iteration),
keeping the evaluations it finished.

    python bench/learning_curve.py                        # 1 seed, both arms, the cpu preset
    python bench/learning_curve.py --seeds 0,1,2 --summary bench/learning_curve.json
    python bench/learning_curve.py --plot-only --name demo  # redraw from existing runs

Everything after `--` goes to train.py unchanged (for the start evaluation and both arms).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import fmean

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spade_mini.evaluation.intervals import interval, paired_delta  # noqa: E402

ARMS = {"spade": [], "fixed": ["--fixed-pool"]}


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def run_name(name: str, arm: str, seed: int) -> str:
    return f"{name}-{arm}-s{seed}"


def arm_seed(key: str) -> tuple[str, str]:
    """The arm and seed of a run name made by run_name."""
    *_, arm, seed = key.split("-")
    return arm, seed[1:]


def train(cmd: list[str], log: Path, threads: int) -> int:
    """One train.py process on `threads` threads (runs at once share the cores); appends to its log."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with open(log, "a") as out:
        return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode


def evaluations(run: Path) -> dict[int, dict[tuple, float]]:
    """Per evaluated iteration, each item's (environment, seed) outcome."""
    by_it: dict[int, dict[tuple, float]] = {}
    for r in rows(run / "eval.jsonl"):
        by_it.setdefault(r["iteration"], {})[(r["env"], r["seed"])] = float(r["solved"])
    return by_it


def finished(run: Path, iterations: int) -> bool:
    """Whether a run did all its iterations and evaluated the last one."""
    return any(r["iteration"] == iterations - 1 and "eval_solve_rate" in r for r in rows(run / "metrics.jsonl"))


def arm_summary(run: Path, start: dict[tuple, float] | None = None) -> dict:
    """What one run shows: per evaluated iteration its solve rate (with interval) and its paired
    delta against the starting policy (its own iteration -1, else `start`); per iteration the
    designer's valid fraction, regret, its valid designs' no-hint solve rate, and the memory."""
    by_it = evaluations(run)
    if -1 not in by_it and start is not None:
        by_it[-1] = start
    base = by_it.get(-1, {})
    points = []
    for it in sorted(by_it):
        keys = sorted(base)
        if sorted(by_it[it]) != keys:
            raise ValueError(f"{run}: iteration {it} did not play the same items as the starting policy")
        scores = [by_it[it][k] for k in keys]
        mean, low, high, _ = interval(scores)
        d = paired_delta([base[k] for k in keys], scores)
        points.append({"iteration": it, "n": len(keys), "solve_rate": mean, "low": low, "high": high,
                       "delta": d.delta, "delta_low": d.low, "delta_high": d.high, "p": d.p})
    metrics = [r for r in rows(run / "metrics.jsonl") if r["iteration"] >= 0]
    per_env: dict[str, list[float]] = {}
    if by_it:
        last = max(by_it)
        for (env, _), solved in by_it[last].items():
            per_env.setdefault(env, []).append(solved)
    return {"points": points,
            "iterations": [{k: r.get(k) for k in ("iteration", "valid_fraction", "regret", "no_hint_return",
                                                  "hint_return", "agent_loss", "designer_loss", "leaky_hints",
                                                  "memory_designs", "memory_in_band", "time_total_s")}
                           for r in metrics],
            "final_per_env": {env: fmean(v) for env, v in sorted(per_env.items())}}


def thirds(values: list[float]) -> tuple[float | None, float | None]:
    n = len(values)
    if n < 3:
        return None, None
    k = n // 3
    return fmean(values[:k]), fmean(values[-k:])


def table(summary: dict) -> str:
    lines = ["| arm | seed | start | last eval | paired delta [95% CI] | McNemar p | valid fraction first/last third |",
             "|---|---|---|---|---|---|---|"]
    for key, s in summary["runs"].items():
        arm, seed = arm_seed(key)
        first, last = s["points"][0], s["points"][-1]
        valid = [r["valid_fraction"] for r in s["iterations"] if r["valid_fraction"] is not None]
        a, b = thirds(valid) if arm == "spade" else (None, None)
        third = "-" if a is None else f"{a:.2f} / {b:.2f}"
        lines.append(f"| {arm} | {seed} | {first['solve_rate']:.3f} | {last['solve_rate']:.3f} (it {last['iteration']}) "
                     f"| {last['delta']:+.3f} [{last['delta_low']:+.3f}, {last['delta_high']:+.3f}] | {last['p']:.2g} | {third} |")
    for arm, m in summary["arms"].items():
        lines.append(f"| **{arm}, {m['seeds']} seeds** | | {m['start']:.3f} | {m['last']:.3f} "
                     f"| {m['delta']:+.3f} [{m['delta_low']:+.3f}, {m['delta_high']:+.3f}] (pooled pairs) | {m['p']:.2g} | |")
    return "\n".join(lines)


def pooled(run_dirs: list[Path], start: dict[tuple, float] | None = None) -> dict:
    """One arm over its seeds: every seed's items pooled as pairs (starting policy, last evaluation)."""
    base, last = [], []
    for run in run_dirs:
        by_it = evaluations(run)
        if -1 not in by_it and start is not None:
            by_it[-1] = start
        end = max(by_it)
        keys = sorted(by_it[-1])
        base += [by_it[-1][k] for k in keys]
        last += [by_it[end][k] for k in keys]
    d = paired_delta(base, last)
    return {"seeds": len(run_dirs), "start": fmean(base), "last": fmean(last), "delta": d.delta,
            "delta_low": d.low, "delta_high": d.high, "p": d.p, "pairs": len(base)}


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    colours = {"spade": "tab:blue", "fixed": "tab:orange"}
    for key, s in summary["runs"].items():
        arm = arm_seed(key)[0]
        pts = s["points"]
        xs = [p["iteration"] for p in pts]
        axes[0].plot(xs, [p["solve_rate"] for p in pts], marker="o", ms=3, color=colours[arm], label=key)
        axes[0].fill_between(xs, [p["low"] for p in pts], [p["high"] for p in pts], color=colours[arm], alpha=0.12)
        if arm == "spade":
            its = s["iterations"]
            axes[1].plot([r["iteration"] for r in its], [r["valid_fraction"] for r in its], marker="o", ms=3, label=key)
            for ax, k in ((axes[2], "regret"), (axes[3], "no_hint_return")):
                got = [(r["iteration"], r[k]) for r in its if r.get(k) is not None]
                if got:
                    ax.plot(*zip(*got), marker="o", ms=3, label=key)
    axes[0].set_title("agent: held-out solve rate (greedy, no hint)\n95% Wilson bands; -1 = starting policy", fontsize=9)
    axes[1].set_title("SPADE designer: valid fraction", fontsize=9)
    axes[2].set_title("SPADE: regret (hint - no hint)", fontsize=9)
    axes[3].set_title("SPADE: no-hint solve rate of its valid designs", fontsize=9)
    for ax in axes:
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # SPADE's panels are empty when nothing validated
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--eval-every", type=int, default=3)
    parser.add_argument("--seeds", default="0", help="comma-separated training seeds (each arm runs each)")
    parser.add_argument("--arms", default="spade,fixed")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (the cores are split between them)")
    parser.add_argument("--name", default="demo")
    parser.add_argument("--run-dir", default="runs")
    parser.add_argument("--summary", default=None, help="also write the summary here (JSON)")
    parser.add_argument("--plot-only", action="store_true", help="redraw from existing runs")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    arms = [a for a in args.arms.split(",") if a.strip()]
    if unknown := [a for a in arms if a not in ARMS]:
        parser.error(f"unknown arm {unknown[0]!r}; use spade and/or fixed")
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    runs = {run_name(args.name, arm, seed): (arm, seed) for seed in seeds for arm in arms}
    start_run = run_dir / f"{args.name}-start"
    threads = max(1, (os.cpu_count() or 1) // max(1, args.jobs))
    common = ["--preset", args.preset, "--run-dir", str(run_dir), "--eval-every", str(args.eval_every), *extra]
    if not args.plot_only:
        t0 = time.time()
        # the starting policy (a warm start, when the preset has one, is cached and shared), evaluated once
        if -1 not in evaluations(start_run):
            cmd = [sys.executable, str(ROOT / "train.py"), *common, "--iterations", "0", "--name", start_run.name,
                   *(["--resume"] if (start_run / "config.json").is_file() else [])]
            if train(cmd, run_dir / f"{start_run.name}.log", os.cpu_count() or 1) != 0 or -1 not in evaluations(start_run):
                print(f"the start evaluation failed: {run_dir / f'{start_run.name}.log'}")
                return 1
        print(f"starting policy evaluated: {(time.time() - t0) / 60:.1f} min", flush=True)

        def one(key: str) -> int:
            arm, seed = runs[key]
            if finished(run_dir / key, args.iterations):
                return 0
            resume = ["--resume"] if (run_dir / key / "config.json").is_file() else []
            cmd = [sys.executable, str(ROOT / "train.py"), *common, "--iterations", str(args.iterations),
                   "--eval-start", "false", "--seed", str(seed), "--name", key, *ARMS[arm], *resume]
            code = train(cmd, run_dir / f"{key}.log", threads)
            print(f"{key}: {'done' if code == 0 else f'failed ({code})'} after {(time.time() - t0) / 60:.1f} min", flush=True)
            return code

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            if any(code != 0 for code in pool.map(one, list(runs))):
                return 1
        print(f"all runs: {(time.time() - t0) / 60:.1f} min", flush=True)
    start = evaluations(start_run).get(-1)
    summary = {"settings": {"preset": args.preset, "iterations": args.iterations, "eval_every": args.eval_every,
                            "seeds": seeds, "extra": extra},
               "runs": {key: arm_summary(run_dir / key, start) for key in runs},
               "arms": {arm: pooled([run_dir / run_name(args.name, arm, s) for s in seeds], start) for arm in arms}}
    out = run_dir / f"{args.name}-learning_curve.png"
    plot(summary, out)
    (run_dir / f"{args.name}-summary.json").write_text(json.dumps(summary, indent=1))
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=1))
    print(table(summary))
    print(f"plot: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
