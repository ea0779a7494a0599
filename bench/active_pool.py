"""Does a design earn its place beside the examples? The seeded pool ("both") against the fixed pool.

Runs both arms of the `cpu` preset for 12 iterations from ONE starting policy (the preset's model,
no warm start), one seed, no evaluation, one after the other: `both` (`--pool-fill both`: the
pool starts with the starter examples and the designer adds to them) and `fixed`
(`--pool-fill examples`: the same pool, the examples only, no designer). Prints per arm and
iteration: informative no-hint episodes, wall time by phase, designs attempted and valid, pool
size (examples + designs, in band), levels and level moves; then each arm's life table with the
examples and the designs apart: how many designs were admitted, how long each stayed, how many
plays it got, why it left; and the wall-time ratio of the arms. The summary (JSON) names the CPU.

A stopped run continues from its newest checkpoint (train.py --resume); finished runs are kept.

    python bench/active_pool.py                        # both arms, 12 iterations, seed 0
    python bench/active_pool.py --summary bench/active_pool.json
    python bench/active_pool.py -- --valid-designs 2   # everything after -- goes to train.py

Run one model process at a time: two on 2 cores each run about 8x slower.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from spade_mini.evaluation.plots import life_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARMS = {"both": ["--pool-fill", "both"], "fixed": ["--pool-fill", "examples"]}
PHASES = ("design", "hint", "play", "update", "total")


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def run_arm(arm: str, args, extra: list[str]) -> list[dict]:
    name = f"{args.name}-{arm}-s{args.seed}"
    run = Path(args.run_dir) / name
    done = rows(run / "metrics.jsonl")
    if len([r for r in done if r.get("iteration", -1) >= 0]) < args.iterations:
        resume = ["--resume"] if (run / "config.json").is_file() else []
        cmd = [sys.executable, str(ROOT / "train.py"), "--preset", args.preset, "--iterations", str(args.iterations),
               "--seed", str(args.seed), "--run-dir", args.run_dir, "--name", name, *ARMS[arm], *resume, *extra]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
    return [r for r in rows(run / "metrics.jsonl") if r.get("iteration", -1) >= 0]


def table(arm: str, metrics: list[dict]) -> None:
    print(f"\n{arm}: iteration, informative/no-hint episodes, seconds by phase "
          f"({'/'.join(PHASES)}), designs valid/attempted, pool examples+designs (in band), levels")
    for r in metrics:
        secs = "/".join(f"{r.get(f'time_{p}_s') or 0:.0f}" for p in PHASES)
        pool = (f"{r['pool_examples']}+{r['pool_designs']} ({r['pool_in_band']}) levels {r.get('pool_level_mean') or 0:.1f}/"
                f"{r.get('pool_level_max')} +{r.get('pool_raised', 0)}-{r.get('pool_lowered', 0)}")
        print(f"  {r['iteration']:>2}  {r['informative_episodes']:>3}/{r['no_hint_episodes']:<3}  {secs:<22} "
              f"{r.get('valid_designs', 0)}/{r['designs']:<3}  {pool}  agent_loss {r['agent_loss']:+.4f}")


def lives(rows_: list[dict], last: int) -> dict:
    """The life table by origin: examples, and designs (admitted, or back from the memory)."""
    stay = lambda r: (last if r["left"] is None else r["left"]) - r["admitted"] + 1  # noqa: E731  (iterations in the pool)
    designs = [r for r in rows_ if r["origin"] != "example"]
    return {"examples": [r for r in rows_ if r["origin"] == "example"], "designs": designs,
            "designs_admitted": sum(r["origin"] == "design" for r in designs),
            "design_iterations": [stay(r) for r in designs], "design_plays": [r["plays"] for r in designs]}


def cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--name", default="seeded-bench")
    parser.add_argument("--run-dir", default="runs")
    parser.add_argument("--summary", default="", help="write the per-arm rows and life tables here (JSON)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)

    metrics = {arm: run_arm(arm, args, extra) for arm in ARMS}  # one after the other, never at once
    for arm, m in metrics.items():
        table(arm, m)
    seconds = {arm: fmean(r["time_total_s"] for r in m) for arm, m in metrics.items()}
    ratio_time = seconds["both"] / seconds["fixed"]
    tables = {arm: life_table(Path(args.run_dir) / f"{args.name}-{arm}-s{args.seed}") for arm in ARMS}
    by_origin = {arm: lives(rows_, args.iterations - 1) for arm, rows_ in tables.items()}
    for arm, rows_ in tables.items():
        print(f"\n{arm}'s life table: id, origin, admitted, left (why), level of levels, moves, plays, rate")
        for r in sorted(rows_, key=lambda r: (r["origin"] == "example", r["admitted"])):
            print(f"  {r['id']:<28} {r['origin']:<8} {r['admitted']:>2} {str(r['left']):>4} ({r['why']})  "
                  f"{r['level']}/{r['levels'] - 1}  {r['moves']}  {r['plays']}  {r['rate']}")
    d = by_origin["both"]
    print(f"\nboth: {d['designs_admitted']} designs admitted, {len(d['designs'])} in the pool in all; iterations in "
          f"the pool {d['design_iterations']}, plays {d['design_plays']}")
    print(f"mean wall time per iteration: both {seconds['both']:.0f} s, fixed {seconds['fixed']:.0f} s: ratio {ratio_time:.2f}")
    if args.summary:
        keep = ("iteration", "informative_episodes", "no_hint_episodes", "designs", "valid_designs", "pool_size",
                "pool_examples", "pool_designs", "pool_in_band", "pool_admitted", "pool_retired", "pool_retired_why",
                "pool_readmitted", "pool_raised", "pool_lowered", "pool_level_mean", "pool_level_max", "pool_skills",
                "trained_environments", "trained_first_observations", "no_hint_squared_deviation", "unspent_episodes",
                "agent_loss", "designer_loss", "update_skipped", "drift_kl", "no_hint_return", "regret",
                *[f"time_{p}_s" for p in PHASES])
        Path(args.summary).write_text(json.dumps({
            "command": "python bench/active_pool.py " + " ".join(sys.argv[1:]), "cpu": cpu(),
            "arms": {arm: [{k: r.get(k) for k in keep} for r in m] for arm, m in metrics.items()},
            "life": by_origin, "mean_seconds": seconds, "time_ratio": ratio_time}, indent=1) + "\n")


if __name__ == "__main__":
    main()
