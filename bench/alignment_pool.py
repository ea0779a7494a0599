"""Does alignment tell broken environments from honest ones? The fixed pool with labelled designs
injected, played for a few iterations with alignment measured every iteration.

    python bench/alignment_pool.py --json bench/alignment_pool.json -- --preset cpu
    python bench/alignment_pool.py --use off --json bench/alignment_pool_off.json -- --preset cpu

The pool starts with the tier's examples and, beside them, designs from bench/validity/*.jsonl
that validated there, chosen by the second reader's labels (tests/golden/valid_design_labels.json):
`mismatch` (the question asks one thing and step pays another, e.g. the cheapest seller asked,
the dearest paid), `given_away` (the observation prints this instance's answer) and `honest`
(neither, no coin flip and no other defect; re-skins and leaky hints allowed, since the agent
plays without hints). Each iteration is train.py's with `--pool-fill examples` and
`--alignment-every 1`; `--use pool` adds `--alignment-pool` (weights and "misaligned"
retirement), `--use off` measures without using it. Printed and written: each kind's readings
(cosine over the floor) with a 95% interval over environments, who left and why, the correlation
of a reading with the set's solve rate at the next measurement minus this one (over environments
and iterations, with its interval), and the cost of alignment against the rest of the iteration.
"""
import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path

from warm_policy import ROOT, bench_config, cpu_name, warm_policy

from spade_mini.designer import extract_code, skills_for
from spade_mini.envs import TIERS, tier
from spade_mini.loop import State, one_iteration
from spade_mini.policy import make_optimizer
from spade_mini.pool import Pool

LABELS = ROOT / "tests" / "golden" / "valid_design_labels.json"


def kind(label: dict) -> str | None:
    if label["coin_flip"]:
        return None
    if label["question_reward_mismatch"]:
        return "mismatch"
    if label["answer_in_observation"]:
        return "given_away"
    return "honest" if not label["other_defect"] else None


def labelled(per_kind: int, rng: random.Random) -> list[tuple[str, str, str, str]]:
    """(id, kind, skill, source) of `per_kind` labelled designs of each kind, drawn with `rng`."""
    rows = {}
    for label in json.loads(LABELS.read_text())["labels"]:
        k = kind(label)
        if k is not None:
            lines = (ROOT / label["file"]).read_text().splitlines()
            reply = json.loads(lines[label["line"]])["reply"]
            rows.setdefault(k, []).append((f"{k}-{label['class_name']}-{label['line']}", k, label["skill"],
                                           extract_code(reply)))
    return [row for k in sorted(rows) for row in rng.sample(rows[k], min(per_kind, len(rows[k])))]


def mean_interval(xs: list[float]) -> list[float | None]:
    if not xs:
        return [None, None, None]
    m = statistics.mean(xs)
    h = 1.96 * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan")
    return [m, m - h, m + h]


def correlation(pairs: list[tuple[float, float]]) -> list[float | None]:
    """Pearson's r with its 95% interval (Fisher's z), [r, low, high]."""
    if len(pairs) < 4:
        return [None, None, None]
    xs, ys = zip(*pairs)
    if statistics.pstdev(xs) == 0 or statistics.pstdev(ys) == 0:
        return [None, None, None]
    r = statistics.correlation(xs, ys)
    z, h = math.atanh(max(-0.999999, min(0.999999, r))), 1.96 / math.sqrt(len(pairs) - 3)
    return [r, math.tanh(z - h), math.tanh(z + h)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--per-kind", type=int, default=3, help="labelled designs of each kind injected")
    parser.add_argument("--use", choices=("pool", "off"), default="pool")
    parser.add_argument("--json", type=Path)
    args, cfg = bench_config(parser, "bench/alignment_pool.py", lambda args: [
        "--pool-fill", "examples", "--alignment-every", "1", *(["--alignment-pool"] if args.use == "pool" else [])])
    policy = warm_policy(cfg)
    state = State(policy, make_optimizer(policy.model, cfg.lr), skills_for(cfg.setting), None, None, random.Random(cfg.seed),
                  examples=tier(cfg.examples, cfg.setting),
                  probe_sources=[e.source for e in tier(cfg.examples, cfg.setting, held_out=True)])
    state.pool = Pool.from_config(cfg)
    state.pool.max_size = max(state.pool.max_size, len(TIERS[cfg.examples][0]) + 3 * args.per_kind)
    injected = labelled(args.per_kind, random.Random(cfg.seed))
    kinds = {env_id: k for env_id, k, _, _ in injected}
    state.pool.skill_room = lambda skill: True  # the injected designs join whatever their skills
    state.pool.fill([(env_id, skill, "games", source, 1) for env_id, _, skill, source in injected], iteration=0)
    rows, readings, t0 = [], [], time.time()
    for it in range(args.iterations):
        record = one_iteration(state, cfg)
        rows.append(record.row)
        readings += [(it, env, reading) for env, reading in record.alignment.items()]
        print(f"iteration {it}: floor {record.row['alignment_floor']}, set rate {record.row['alignment_set_rate']}, "
              f"{len(record.alignment)} readings, pool {len(state.pool.envs)} ({time.time() - t0:.0f} s)", flush=True)
    kind_of = lambda env: kinds.get(env, "example")  # noqa: E731
    by_env = {}
    for _, env, reading in readings:
        by_env.setdefault(env, []).append(reading)
    per_kind = {k: mean_interval([statistics.mean(v) for e, v in by_env.items() if kind_of(e) == k])
                for k in ("example", "honest", "mismatch", "given_away")}
    rates = [r["alignment_set_rate"] for r in rows]
    pairs = [(reading, rates[it + 1] - rates[it]) for it, _, reading in readings if it + 1 < len(rates)]
    life = state.pool.life_table()
    align_s = sum(r["time_align_s"] for r in rows)
    rest_s = sum(r["time_total_s"] for r in rows) - align_s
    cpu = cpu_name()
    print("\n| kind | environments read | mean reading [95% interval over environments] |\n|---|---|---|")
    for k, (m, lo, hi) in per_kind.items():
        n = sum(kind_of(e) == k for e in by_env)
        print(f"| {k} | {n} | " + ("-" if m is None else f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}]") + " |")
    print("\nleft the pool: " + ", ".join(f"{r['id']} ({kind_of(r['id'])}): {r['why']}" for r in life if r["why"]))
    print(f"reading vs the set's next change: r = {correlation(pairs)} over {len(pairs)} pairs")
    print(f"alignment {align_s:.0f} s against the rest of the iterations' {rest_s:.0f} s: "
          f"{align_s / rest_s:.0%} ({cpu})")
    if args.json:
        args.json.write_text(json.dumps({
            "model": cfg.model, "preset": cfg.preset, "use": args.use, "iterations": args.iterations, "cpu": cpu,
            "kinds": kinds, "per_kind": per_kind, "readings": readings, "life": life,
            "next_change_correlation": correlation(pairs), "pairs": len(pairs),
            "align_s": align_s, "rest_s": rest_s, "rows": rows}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
