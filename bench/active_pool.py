"""Do environments last? The active pool with levels, SPADE's designer against the examples' filler.

Runs both arms of the `cpu` preset for 12 iterations from ONE starting policy (the preset's model,
no warm start), one seed, no evaluation: `spade` (the designer fills the pool) and `fixed`
(`--fixed-pool`: the same pool with levels, filled with the starter examples). Prints per arm
and iteration: informative no-hint episodes, wall time by phase, designs attempted and valid,
pool size (in band), pool levels (mean, max) and level moves. The goals it checks (issue 40):

    SPADE's mean wall time per iteration <= 1.5x the fixed pool's;
    SPADE's pool holds >= 4 environments on average over iterations 2-11;
    the designer runs in at most a third of the iterations;
    at least one environment is raised two levels (read from the last checkpoint's pool.json).

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
ARMS = {"spade": [], "fixed": ["--fixed-pool"]}
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
          f"({'/'.join(PHASES)}), designs valid/attempted, pool size (in band)")
    for r in metrics:
        secs = "/".join(f"{r.get(f'time_{p}_s') or 0:.0f}" for p in PHASES)
        pool = (f"{r['pool_size']} ({r['pool_in_band']}) levels {r.get('pool_level_mean') or 0:.1f}/"
                f"{r.get('pool_level_max')} +{r.get('pool_raised', 0)}-{r.get('pool_lowered', 0)}"
                if "pool_size" in r else "-")
        print(f"  {r['iteration']:>2}  {r['informative_episodes']:>3}/{r['no_hint_episodes']:<3}  {secs:<22} "
              f"{r.get('valid_designs', 0)}/{r['designs']:<3}  {pool}  agent_loss {r['agent_loss']:+.4f}"
              f"  drift {r['drift_kl'] if r.get('drift_kl') is None else round(r['drift_kl'], 5)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--name", default="levels-bench")
    parser.add_argument("--run-dir", default="runs")
    parser.add_argument("--summary", default="", help="write the per-arm rows and the goal here (JSON)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)

    metrics = {arm: run_arm(arm, args, extra) for arm in ARMS}  # one after the other, never at once
    for arm, m in metrics.items():
        table(arm, m)
    later = lambda m: [r for r in m if 2 <= r["iteration"] <= 11]  # noqa: E731
    seconds = {arm: fmean(r["time_total_s"] for r in m) for arm, m in metrics.items()}
    ratio_time = seconds["spade"] / seconds["fixed"]
    pool_size = {arm: fmean(r.get("pool_size") or 0 for r in later(m)) if later(m) else 0.0
                 for arm, m in metrics.items()}
    designer_share = sum(r["designs"] > 0 for r in metrics["spade"]) / max(1, len(metrics["spade"]))
    lives = {arm: life_table(Path(args.run_dir) / f"{args.name}-{arm}-s{args.seed}") for arm in ARMS}
    raised = {arm: max((sum(to > frm for _, frm, to in r["moves"]) for r in rows_), default=0)
              for arm, rows_ in lives.items()}
    goals = {"time_ratio <= 1.5": ratio_time <= 1.5, "spade pool >= 4 (iterations 2-11)": pool_size["spade"] >= 4,
             "designer in <= 1/3 of iterations": designer_share <= 1 / 3, "one environment raised twice": raised["spade"] >= 2}
    print(f"\nmean wall time per iteration: spade {seconds['spade']:.0f} s, fixed {seconds['fixed']:.0f} s: "
          f"ratio {ratio_time:.2f} (goal <= 1.5)")
    print(f"mean pool size, iterations 2-11: spade {pool_size['spade']:.1f}, fixed {pool_size['fixed']:.1f} (goal: spade >= 4)")
    print(f"designer ran in {designer_share:.2f} of spade's iterations (goal <= 0.33)")
    print(f"most levels one environment was raised: spade {raised['spade']}, fixed {raised['fixed']} (goal: spade >= 2)")
    for arm, rows_ in lives.items():
        print(f"\n{arm}'s life table: id, origin, admitted, left (why), level of levels, moves, plays, rate")
        for r in rows_:
            print(f"  {r['id']:<28} {r['origin']:<8} {r['admitted']:>2} {str(r['left']):>4} ({r['why']})  "
                  f"{r['level']}/{r['levels'] - 1}  {r['moves']}  {r['plays']}  {r['rate']}")
    print("goals: " + ", ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in goals.items()))
    if args.summary:
        keep = ("iteration", "informative_episodes", "no_hint_episodes", "designs", "valid_designs", "pool_size",
                "pool_in_band", "pool_admitted", "pool_retired", "pool_retired_why", "pool_readmitted", "pool_raised",
                "pool_lowered", "pool_level_mean", "pool_level_max", "pool_skills", "trained_environments",
                "trained_first_observations", "no_hint_squared_deviation", "unspent_episodes", "agent_loss",
                "designer_loss", "update_skipped", "drift_kl", "no_hint_return", "regret",
                *[f"time_{p}_s" for p in PHASES])
        Path(args.summary).write_text(json.dumps({
            "command": "python bench/active_pool.py " + " ".join(sys.argv[1:]),
            "arms": {arm: [{k: r.get(k) for k in keep} for r in m] for arm, m in metrics.items()},
            "life": lives, "mean_seconds": seconds, "time_ratio": ratio_time, "mean_pool_2_to_11": pool_size,
            "designer_share": designer_share, "most_raised": raised, "goals": goals}, indent=1) + "\n")


if __name__ == "__main__":
    main()
