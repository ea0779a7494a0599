"""Choose the alignment set's items: the (environment, seed) pairs of the other tier's examples on
which the starting policy is neither always right nor always wrong (spade_mini/alignment.py).

    python bench/alignment_set.py -- --preset cpu              # 8 seeds x 8 plays of each candidate
    python bench/alignment_set.py --seeds 4 --plays 4 -- --preset cpu-smoke

The policy is loaded and warm-started as train.py does; every candidate item (each environment
of `alignment.alignment_envs(tier, setting)` on seeds 0..S-1, level 0) is played `--plays` times
no-hint with the run's sampling, turn cap and agent prompt. Items whose start rate lies in
alignment.RATE_BAND are kept, at most alignment.ITEMS, spread over the environments (each one's
first in-band seed, then each one's second, ...), and written to spade_mini/alignment_set.json
under "<model>/<tier>/<setting>" with every item's rate, the CPU and the seconds. A run of that
model, tier and setting plays those items; others play unmeasured items and say so.
"""
import argparse
import json
import time
from pathlib import Path

from warm_policy import bench_config, cpu_name, warm_policy

from spade_mini import alignment
from spade_mini.agent import play_episodes
from spade_mini.settings import play_settings


def spread_items(rates: dict[tuple[str, int], float], limit: int) -> list[tuple[str, int]]:
    """In-band items, each environment's first, then each one's second, ..., `limit` at most."""
    kept = {}
    for (name, seed), rate in rates.items():
        if alignment.in_band({"x": rate}):
            kept.setdefault(name, []).append(seed)
    rounds = max(map(len, kept.values()), default=0)
    order = [(name, seeds[k]) for k in range(rounds) for name, seeds in kept.items() if k < len(seeds)]
    return order[:limit]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="candidate seeds per environment")
    parser.add_argument("--plays", type=int, default=8, help="no-hint episodes per candidate item")
    parser.add_argument("--batch", type=int, default=64, help="episodes per play_episodes call")
    parser.add_argument("--out", type=Path, default=alignment.MEASURED)
    args, cfg = bench_config(parser, "bench/alignment_set.py")
    policy = warm_policy(cfg)
    envs = alignment.alignment_envs(cfg.examples, cfg.setting)
    items = [(env, seed) for env in envs for seed in range(args.seeds)]
    jobs = alignment.alignment_jobs(items, args.plays)
    t0, episodes = time.time(), []
    for start in range(0, len(jobs), args.batch):
        episodes += play_episodes(policy, jobs[start:start + args.batch], play_settings(cfg))
        print(f"played {len(episodes)}/{len(jobs)} episodes ({time.time() - t0:.0f} s)", flush=True)
    rates = {}
    for env, seed in items:
        mine = [e for e in episodes if e.job.group == alignment.item_id(env, seed)]
        rates[(env.name, seed)] = sum(e.ret > 0 for e in mine) / len(mine)
    chosen = spread_items(rates, alignment.ITEMS)
    print("\n| environment | " + " | ".join(f"seed {s}" for s in range(args.seeds)) + " |")
    print("|---|" + "---|" * args.seeds)
    for env in envs:
        print(f"| {env.name} | " + " | ".join(f"{rates[(env.name, s)]:.2f}" for s in range(args.seeds)) + " |")
    print(f"\n{len(chosen)} items in {alignment.RATE_BAND}: {chosen}")
    cpu = cpu_name()
    measured = json.loads(args.out.read_text()) if args.out.exists() else {}
    measured[f"{cfg.model}/{cfg.examples}/{cfg.setting}"] = {
        "items": [list(i) for i in chosen], "rates": {f"{n}#{s}": r for (n, s), r in rates.items()},
        "plays": args.plays, "seconds": round(time.time() - t0), "cpu": cpu, "preset": cfg.preset}
    args.out.write_text(json.dumps(measured, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
