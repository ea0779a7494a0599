"""SPADE against the fixed-pool baseline on a CPU: a learning curve on held-out environments.

`make demo` runs this. Every run of both arms starts from ONE policy (the preset's model; with a
warm start, the cached warm start) and trains for the same iterations with the same agent update
and the same no-hint episodes per iteration, under its own --seed:

    spade  the policy designs environments (shown the tier's examples in its memory), plays them
           with and without a hint, replays its active pool, and both roles learn (`--pool-fill designs`);
    fixed  the same active pool with levels, filled with the tier's examples: no designer (`--pool-fill examples`);
    both   the pool starts with the examples and the designer adds to them (`--pool-fill both`).

The starting policy is evaluated once (`train.py --iterations 0`): it is the same for every run
(a LoRA adapter starts as a no-op, and evaluation is greedy). Then every `--eval-every`
iterations and at the last one train.py plays the tier's HELD-OUT environments (which neither
arm, a warm start, the memory nor the designer's prompt ever saw), each distinct item once,
greedily, without a hint; at the start and the last point also the transfer suites
(`--transfer-items`, spade_mini/evaluation/transfer.py). Every point is paired, item by item,
against the starting policy (spade_mini/evaluation/curve.py: distinct items, the detectable
change, the item-level and the environment-cluster interval, the saturated environments left
out); per arm the table gives the mean over seeds with its 95% t interval.

A stopped run continues: the start evaluation and every finished run are kept, and a run that
stopped part-way resumes from its newest checkpoint (train.py --resume; one every iteration),
keeping the evaluations it finished. The summary (`--summary`, JSON) is rewritten as each run
finishes and holds every point's item outcomes, so on another machine, with only the committed
summary, the same command runs only the runs it does not hold as finished.

    python bench/learning_curve.py                        # 1 seed, both arms, the cpu preset
    python bench/learning_curve.py --seeds 0,1,2 --summary bench/learning_curve.json
    python bench/learning_curve.py --plot-only --name demo  # redraw from existing runs

Everything after `--` goes to train.py unchanged (for the start evaluation and both arms).
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from curve_summary import (ARMS, FROZEN, arm_seed, code_version, evaluations, load_previous, record,  # noqa: E402
                           run_name, summarize, transfers)


def train(cmd: list[str], log: Path, threads: int) -> int:
    """One train.py process on `threads` threads (runs at once share the cores); appends to its log."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with open(log, "a") as out:
        return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode


def freeze(run: Path, cmd: list[str]) -> str | None:
    """Write what a run starts with into its folder (the code's commit and tree, the command, the
    CPU); a run that resumes must train the same code: else the sentence that stops it."""
    now = code_version()
    if (run / FROZEN).is_file():
        was = json.loads((run / FROZEN).read_text())
        if was["code"] != now["code"]:
            return (f"{run.name} started with the code of commit {was['commit'][:10]} and this checkout trains other "
                    "code; nothing changes mid-arm: check that commit out to finish it, or start the run anew.")
        return None
    from spade_mini.policy.dtypes import cpu_name
    run.mkdir(parents=True, exist_ok=True)
    (run / FROZEN).write_text(json.dumps({**now, "command": cmd[1:], "cpu": cpu_name()}, indent=1) + "\n")
    return None


def ci(m: dict, fmt: str = "+.3f") -> str:
    """A mean over seeds with its interval ("-" for none)."""
    if m["mean"] is None:
        return "-"
    return format(m["mean"], fmt) + ("" if m["low"] is None else f" [{m['low']:{fmt}}, {m['high']:{fmt}}]")


def table(summary: dict) -> str:
    ev = summary["evidence"]
    lines = [f"{ev['distinct']} distinct held-out items; saturated (left out): {', '.join(ev['saturated']) or 'none'}; "
             f"never solved: {', '.join(ev['never_solved']) or 'none'}; {ev['items']} items of evidence.", "",
             "| run | start | last point | paired delta [item 95% CI] | [cluster 95% CI] | McNemar p | detectable |",
             "|---|---|---|---|---|---|---|"]
    for key, s in summary["runs"].items():
        p = s["points"][-1]
        mde = "-" if p["mde"] is None else f"{p['mde']:.3f}"
        lines.append(f"| {key}{'' if s['finished'] else ' (unfinished)'} | {p['base']:.3f} | {p['other']:.3f} (it {p['iteration']}) "
                     f"| {p['delta']:+.3f} [{p['delta_low']:+.3f}, {p['delta_high']:+.3f}] "
                     f"| [{p['cluster_low']:+.3f}, {p['cluster_high']:+.3f}] | {p['p']:.2g} | {mde} |")
    lines += ["", "| arm | seeds | start | last point | delta (mean over seeds, 95% t CI) | seeds with p < 0.05 |",
              "|---|---|---|---|---|---|"]
    suites = sorted({(suite, score) for m in summary["arms"].values() for suite, sc in m["transfer"].items() for score in sc})
    for arm, m in summary["arms"].items():
        lines.append(f"| {arm} | {m['finished']}/{m['runs']} | {ci(m['base'], '.3f')} | {ci(m['other'], '.3f')} "
                     f"| {ci(m['delta'])} | {m['seeds_p_below_0.05']} |")
    if suites:
        lines += ["", "| arm | transfer suite | score | start | last point | delta (mean over seeds, 95% t CI) |",
                  "|---|---|---|---|---|---|"]
        for arm, m in summary["arms"].items():
            for suite, score in suites:
                got = m["transfer"].get(suite, {}).get(score)
                if got:
                    lines.append(f"| {arm} | {suite} | {score} | {ci(got['base'], '.3f')} | {ci(got['other'], '.3f')} | {ci(got['delta'])} |")
    return "\n".join(lines + per_environment(summary))


def per_environment(summary: dict) -> list[str]:
    """Where a run gained or lost: each held-out environment's solve rate at the start and at the
    last point, per run; then each run's active pool (environment, admitted, levels, plays, why it left)."""
    runs = {k: s for k, s in summary["runs"].items() if s.get("start_per_env")}
    if not runs:
        return []
    envs = sorted(next(iter(runs.values()))["start_per_env"])
    lines = ["", "| held-out environment | start | " + " | ".join(runs) + " |", "|---|---|" + "---|" * len(runs)]
    for env in envs:
        start = next(iter(runs.values()))["start_per_env"][env]
        lines.append(f"| {env} | {start:.2f} | " + " | ".join(f"{s['final_per_env'].get(env, float('nan')):.2f}"
                                                            for s in runs.values()) + " |")
    for key, s in runs.items():
        if s.get("life"):
            lines += ["", f"{key}'s pool: id, skill, origin, admitted, left (why), level of levels, moves, plays"]
            lines += [f"  {r['id']} {r.get('skill')} {r.get('origin')} {r['admitted']} {r['left']} ({r['why']}) "
                      f"{r['level']}/{r['levels'] - 1} {r['moves']} {r['plays']}" for r in s["life"]]
    return lines


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 5, figsize=(21, 3.8))
    colours = {"spade": "tab:blue", "fixed": "tab:orange", "both": "tab:green", "plain": "tab:gray"}
    for key, s in summary["runs"].items():
        arm, pts = arm_seed(key)[0], s["points"]
        for ax, x in ((axes[0], "iteration"), (axes[1], "seconds")):
            xs = [p[x] for p in pts]
            ax.plot(xs, [p["solve_rate"] for p in pts], marker="o", ms=3, color=colours[arm], label=key)
            ax.fill_between(xs, [p["low"] for p in pts], [p["high"] for p in pts], color=colours[arm], alpha=0.12)
        for ax, k, arms in ((axes[2], "valid_fraction", ("spade", "both")), (axes[3], "regret", ("spade", "both")),
                            (axes[4], "no_hint_return", tuple(ARMS))):
            got = [(r["iteration"], r[k]) for r in s["iterations"] if r.get(k) is not None]
            if arm in arms and got:  # None: the designer did not run, or the fixed pool has no hint arm
                ax.plot(*zip(*got), marker="o", ms=3, color=colours[arm], label=key)
    ev = summary["evidence"]
    axes[0].set_title(f"held-out solve rate, {ev['distinct']} distinct items (greedy, no hint)\n"
                      "95% Wilson bands; -1 = starting policy", fontsize=9)
    axes[1].set_title("the same against training seconds\n(time_total_s summed, evaluations excluded)", fontsize=9)
    axes[2].set_title("SPADE designer: valid fraction\n(iterations where it designed)", fontsize=9)
    axes[3].set_title("SPADE: regret (hint - no hint)", fontsize=9)
    axes[4].set_title("no-hint return of what each arm trained on", fontsize=9)
    for i, ax in enumerate(axes):
        ax.set_xlabel("seconds" if i == 1 else "iteration")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # SPADE's panels are empty when nothing validated
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def missing_suites(preset: str, extra: list[str]) -> str | None:
    """The sentence that stops a curve before any training when a transfer suite it would play is
    not installed (a curve without one of its suites is not the curve it names, and round five keeps
    reasoning-gym's items to compare with round four); None if all are."""
    from spade_mini.evaluation.benchmarks import INSTALL
    from spade_mini.presets import PRESETS
    items = PRESETS.get(preset, {}).get("transfer_items", 0)
    for flag, value in zip(extra, extra[1:]):
        if flag == "--transfer-items":
            items = int(value)
    for arg in extra:
        if arg.startswith("--transfer-items="):
            items = int(arg.split("=", 1)[1])
    if items <= 0 or importlib.util.find_spec("reasoning_gym") is not None:
        return None
    return (f"the transfer suites need the 'reasoning_gym' package and it is not installed; run "
            f"`{INSTALL['reasoning_gym']}` (or `make demo`, which installs requirements-eval.txt), "
            f"or pass `-- --transfer-items 0` to run the curve without transfer suites.")


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
    parser.add_argument("--summary", default=None,
                        help="also write the summary here (JSON), after every finished run, and the plot beside it (.png); "
                             "the finished runs it holds are not run again")
    parser.add_argument("--plot-only", action="store_true", help="redraw from existing runs")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    arms = [a for a in args.arms.split(",") if a.strip()]
    if unknown := [a for a in arms if a not in ARMS]:
        parser.error(f"unknown arm {unknown[0]!r}; use any of {', '.join(ARMS)}")
    if not args.plot_only and (missing := missing_suites(args.preset, extra)):  # plotting trains nothing
        print(missing)
        return 2
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    runs = {run_name(args.name, arm, seed): (arm, seed) for seed in seeds for arm in arms}
    start_run = run_dir / f"{args.name}-start"
    settings = {"preset": args.preset, "iterations": args.iterations, "eval_every": args.eval_every,
                "seeds": seeds, "extra": extra}
    prev_start, prev_runs = load_previous(Path(args.summary) if args.summary else None, settings)
    lock = threading.Lock()

    def write_summary() -> dict:
        """From the run directories, else the earlier summary's records; written as each run finishes."""
        with lock:
            start = ({"evals": evaluations(start_run)[-1], "transfer": transfers(start_run).get(-1, {})}
                     if -1 in evaluations(start_run) else prev_start)
            if start is None:
                raise SystemExit(f"no start evaluation in {start_run} or in --summary; run without --plot-only first")
            # every run the earlier summary holds stays (another invocation may have run other arms or seeds)
            records = {key: record(run_dir / key, args.iterations) if (run_dir / key / "metrics.jsonl").is_file()
                       else prev_runs[key] for key in {**prev_runs, **runs}
                       if (run_dir / key / "metrics.jsonl").is_file() or key in prev_runs}
            summary = summarize(settings, start, records)
            text = json.dumps(summary, indent=1)
            (run_dir / f"{args.name}-summary.json").write_text(text)
            if args.summary:
                Path(args.summary).write_text(text)
            return summary

    threads = max(1, (os.cpu_count() or 1) // max(1, args.jobs))
    common = ["--preset", args.preset, "--run-dir", str(run_dir), "--eval-every", str(args.eval_every), *extra]
    if not args.plot_only:
        t0 = time.time()
        # the starting policy (a warm start, when the preset has one, is cached and shared), evaluated once
        if -1 not in evaluations(start_run) and prev_start is None:
            cmd = [sys.executable, str(ROOT / "train.py"), *common, "--iterations", "0", "--name", start_run.name,
                   *(["--resume"] if (start_run / "config.json").is_file() else [])]
            if train(cmd, run_dir / f"{start_run.name}.log", os.cpu_count() or 1) != 0 or -1 not in evaluations(start_run):
                print(f"the start evaluation failed: {run_dir / f'{start_run.name}.log'}")
                return 1
        print(f"starting policy evaluated: {(time.time() - t0) / 60:.1f} min", flush=True)

        def one(key: str) -> int:
            arm, seed = runs[key]
            here = (run_dir / key / "metrics.jsonl").is_file()
            if (here and record(run_dir / key, args.iterations)["finished"]) or \
                    (not here and prev_runs.get(key, {}).get("finished")):
                return 0
            resume = ["--resume"] if (run_dir / key / "config.json").is_file() else []
            cmd = [sys.executable, str(ROOT / "train.py"), *common, "--iterations", str(args.iterations),
                   "--eval-start", "false", "--seed", str(seed), "--name", key, *ARMS[arm], *resume]
            if refused := freeze(run_dir / key, cmd):
                print(refused, flush=True)
                return 2
            code = train(cmd, run_dir / f"{key}.log", threads)
            print(f"{key}: {'done' if code == 0 else f'failed ({code})'} after {(time.time() - t0) / 60:.1f} min", flush=True)
            if code == 0:
                write_summary()
            return code

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            if any(code != 0 for code in pool.map(one, list(runs))):
                return 1
        print(f"all runs: {(time.time() - t0) / 60:.1f} min", flush=True)
    summary = write_summary()
    out = run_dir / f"{args.name}-learning_curve.png"
    plot(summary, out)
    if args.summary:  # the plot beside the summary, to commit with it
        plot(summary, Path(args.summary).with_suffix(".png"))
    print(table(summary))
    print(f"plot: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
