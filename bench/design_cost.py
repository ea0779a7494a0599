"""What an admitted environment costs: design and update seconds per environment the pool admits,
with the invalid designs' update thinned against every design scored.

Runs the `cpu` preset for 3 iterations with the designer in every one (`--design-every 1`), one
seed, no evaluation, in two arms from ONE starting policy, one after the other:

    plain  every invalid design scored by the update (--invalid-update-fraction 1);
    thinned  a quarter of them, each counted 4 times (--invalid-update-fraction 0.25).

Both arms write their batches in the decoding loop that stops a row at its closed code block;
the designer before it (`generate` to the token budget) is the committed bench/active_pool.json
(same preset, seed and CPU kind) at commit 63ac03d, since rewritten: its first iteration, 626 s
of design and update on the Xeon with AMX. Prints per
arm and regeneration the seconds of design and of update, the attempts, valid designs and
admitted environments (valid and in the pool's band, read from the run's life table); then
seconds per admitted environment. The committed bench/design_cost.json was measured when the
designer also had a repair prompt (its own code and validation's words) and an edit prompt (a
variant of a pool environment): 0 of 18 repairs and 0 of 4 edits were valid, and both were
removed. The goal
(issue 41): at most 140 s of design and update per admitted environment (about 285 s before).

    python bench/design_cost.py --summary bench/design_cost.json
    python bench/design_cost.py -- --valid-designs 2     # everything after -- goes to train.py

A stopped run continues from its newest checkpoint. Run one model process at a time.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from curve_summary import rows  # noqa: E402  (bench/ is the script's own folder)
from spade_mini.evaluation.plots import life_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARMS = {"plain": ["--invalid-update-fraction", "1"], "thinned": ["--invalid-update-fraction", "0.25"]}
GOAL_S = 140.0


def run_arm(arm: str, args, extra: list[str]) -> Path:
    run = Path(args.run_dir) / f"{args.name}-{arm}-s{args.seed}"
    if len([r for r in rows(run / "metrics.jsonl") if r.get("iteration", -1) >= 0]) < args.iterations:
        cmd = [sys.executable, str(ROOT / "train.py"), "--preset", args.preset, "--iterations", str(args.iterations),
               "--design-every", "1", "--eval-every", "0", "--seed", str(args.seed), "--run-dir", args.run_dir,
               "--name", run.name, *ARMS[arm], *(["--resume"] if (run / "config.json").is_file() else []), *extra]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
    return run


def measure(run: Path) -> dict:
    """Per regeneration: seconds of design and update, and the attempts, valid and admitted."""
    admitted = {r["id"] for r in life_table(run) if r["origin"] == "design"}
    designs = [r for r in rows(run / "samples.jsonl") if r["kind"] == "design"]
    out = []
    for m in (r for r in rows(run / "metrics.jsonl") if r.get("iteration", -1) >= 0):
        mine = [d for d in designs if d["iteration"] == m["iteration"]]
        out.append({"iteration": m["iteration"], "design_s": m["time_design_s"], "update_s": m["time_update_s"],
                    "total_s": m["time_total_s"], "designer_samples": m.get("designer_samples"),
                    "designer_samples_left_out": m.get("designer_samples_left_out"), "attempts": len(mine),
                    "valid": sum(d["valid"] for d in mine), "admitted": sum(d["id"] in admitted for d in mine)})
    seconds = sum(r["design_s"] + r["update_s"] for r in out)
    got = sum(r["admitted"] for r in out)
    return {"regenerations": out, "design_and_update_s": seconds, "admitted": got,
            "seconds_per_admitted": seconds / got if got else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--name", default="design-cost")
    parser.add_argument("--run-dir", default="runs")
    parser.add_argument("--summary", default="", help="write both arms and the goal here (JSON)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    result = {arm: measure(run_arm(arm, args, extra)) for arm in ARMS}  # one after the other, never at once
    for arm, r in result.items():
        print(f"\n{arm}: regeneration, design s, update s, attempts/valid/admitted")
        for g in r["regenerations"]:
            print(f"  {g['iteration']}  {g['design_s']:.0f}  {g['update_s']:.0f}  {g['attempts']}/{g['valid']}/{g['admitted']}")
        per = r["seconds_per_admitted"]
        print(f"  {r['design_and_update_s']:.0f} s of design and update for {r['admitted']} admitted: "
              f"{'-' if per is None else f'{per:.0f}'} s each (goal <= {GOAL_S:.0f})")
    thinned = result["thinned"]["seconds_per_admitted"]
    goal = thinned is not None and thinned <= GOAL_S
    print(f"goal: {'met' if goal else 'NOT met'}")
    if args.summary:
        Path(args.summary).write_text(json.dumps({"command": "python bench/design_cost.py " + " ".join(sys.argv[1:]),
                                                  "arms": result, "goal_s": GOAL_S, "goal_met": goal}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
