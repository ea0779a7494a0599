"""Does the active pool give SPADE's agent as much to learn from as the fixed pool, per second?

Runs both arms of the `cpu` preset for 6 iterations from ONE starting policy (the preset's model,
no warm start), one seed, no evaluation, and prints per arm and iteration: informative no-hint
episodes (in groups with both outcomes: what REINFORCE with a group baseline learns from), wall
time by phase, designs attempted and valid, pool size and how many are in the band. The goal it
checks (README, "The active pool"):

    SPADE's informative episodes over iterations 1-5 >= 75% of the fixed pool's, at a mean wall
    time per iteration <= 1.5x the fixed pool's.

A stopped run continues from its newest checkpoint (train.py --resume); finished runs are kept.

    python bench/active_pool.py                        # both arms, 6 iterations, seed 0
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
        pool = f"{r['pool_size']} ({r['pool_in_band']})" if "pool_size" in r else "-"
        print(f"  {r['iteration']:>2}  {r['informative_episodes']:>3}/{r['no_hint_episodes']:<3}  {secs:<22} "
              f"{r.get('valid_designs', 0)}/{r['designs']:<3}  {pool}  agent_loss {r['agent_loss']:+.4f}"
              f"  drift {r['drift_kl'] if r.get('drift_kl') is None else round(r['drift_kl'], 5)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--name", default="pool-bench")
    parser.add_argument("--run-dir", default="runs")
    parser.add_argument("--summary", default="", help="write the per-arm rows and the goal here (JSON)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)

    metrics = {arm: run_arm(arm, args, extra) for arm in ARMS}  # one after the other, never at once
    for arm, m in metrics.items():
        table(arm, m)
    later = lambda m: [r for r in m if 1 <= r["iteration"] <= 5]  # noqa: E731
    informative = {arm: sum(r["informative_episodes"] for r in later(m)) for arm, m in metrics.items()}
    seconds = {arm: fmean(r["time_total_s"] for r in m) for arm, m in metrics.items()}
    ratio_info = informative["spade"] / informative["fixed"] if informative["fixed"] else float("inf")
    ratio_time = seconds["spade"] / seconds["fixed"]
    goal = ratio_info >= 0.75 and ratio_time <= 1.5
    print(f"\ninformative no-hint episodes, iterations 1-5: spade {informative['spade']}, fixed "
          f"{informative['fixed']}: ratio {ratio_info:.2f} (goal >= 0.75)")
    print(f"mean wall time per iteration: spade {seconds['spade']:.0f} s, fixed {seconds['fixed']:.0f} s: "
          f"ratio {ratio_time:.2f} (goal <= 1.5)")
    print(f"goal {'met' if goal else 'NOT met'}")
    if args.summary:
        keep = ("iteration", "informative_episodes", "no_hint_episodes", "designs", "valid_designs", "pool_size",
                "pool_in_band", "pool_admitted", "pool_retired", "pool_readmitted", "agent_loss", "designer_loss",
                "agent_grad_norm", "designer_grad_norm", "update_skipped", "drift_kl", "no_hint_return", "regret",
                *[f"time_{p}_s" for p in PHASES])
        Path(args.summary).write_text(json.dumps({
            "command": "python bench/active_pool.py " + " ".join(sys.argv[1:]),
            "arms": {arm: [{k: r.get(k) for k in keep} for r in m] for arm, m in metrics.items()},
            "informative_1_to_5": informative, "mean_seconds": seconds,
            "informative_ratio": ratio_info, "time_ratio": ratio_time, "goal_met": goal}, indent=1) + "\n")


if __name__ == "__main__":
    main()
