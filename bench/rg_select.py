"""Choose the curve's reasoning-gym families: those the starting policy solves on between 10% and
70% of their items, measured on seeds the curve never uses.

    python bench/rg_select.py -- --preset cpu                       # 24 items a candidate
    python bench/rg_select.py --items 40 --json bench/rg_select.json -- --preset cpu

The policy is loaded and warm-started as train.py does; every candidate (a reasoning-gym dataset
at its default settings, and at the easy settings where `benchmarks.RG_EASY` has them) gets
`--items` questions generated from SELECT_SEED (the curve draws from fixed_set.EVAL_SEED), asked
greedily once each with the curve's instruction and token budget, and scored strictly (the last
\\boxed{}). Printed: each candidate's rate and whether it lies in RATE_RANGE, beside the share of
replies that finished within the tokens, that boxed something, and the lenient rate (an unboxed
answer read too), which say why a family sits at the floor; `--tokens` asks with another budget.
`--json` is written after each candidate, with the CPU and the seconds. A family whose generator fails here is listed with its error.
"""
import argparse
import json
import time
from pathlib import Path

from warm_policy import bench_config, cpu_name, warm_policy

from spade_mini.evaluation.benchmarks import (BOX_INSTRUCTION, EASY_BOX_INSTRUCTION, RG_EASY, Item,  # noqa: E402
                                              need, score_reasoning_gym)

SELECT_SEED = 7 * 10**6  # never a curve seed (those start at fixed_set.EVAL_SEED = 10**6, a few hundred on)
RATE_RANGE = (0.1, 0.7)
CANDIDATES = ("basic_arithmetic", "simple_equations", "syllogism", "letter_counting", "number_sequence", "maze",
              "chain_sum", "gcd", "lcm", "count_bits", "number_sorting", "spell_backward", "word_sequence_reversal",
              "leg_counting", "base_conversion", "fraction_simplification", "decimal_arithmetic", "number_filtering",
              "coin_flip", "dice", "calendar_arithmetic", "time_intervals", "power_function", "prime_factorization",
              "products", "bitwise_arithmetic", "word_sorting", "string_insertion", "family_relationships")


def candidate_items(name: str, easy: bool, n: int, seed: int) -> list[Item]:
    import reasoning_gym as rg
    ds = rg.create_dataset(name, size=n, seed=seed, **(RG_EASY[name] if easy else {}))
    instruction = EASY_BOX_INSTRUCTION if easy else BOX_INSTRUCTION
    return [Item(f"{name}/{'easy' if easy else 'default'}/{j}",
                 [{"role": "user", "content": f"{ds[j]['question']}\n\n{instruction}"}], {"dataset": ds, "entry": ds[j]})
            for j in range(n)]


def write(args, cfg, rows: list[dict], t0: float) -> None:
    """The rows so far (written after each candidate: a long selection stopped early keeps them)."""
    if args.json:
        args.json.write_text(json.dumps({"model": cfg.model, "preset": cfg.preset, "items": args.items,
                                         "seed": SELECT_SEED, "tokens": args.tokens or cfg.turn_max_new_tokens,
                                         "cpu": cpu_name(), "seconds": round(time.time() - t0), "rows": rows},
                                        indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=24, help="questions per candidate")
    parser.add_argument("--tokens", type=int, help="tokens a reply (default: the preset's turn budget, the curve's)")
    parser.add_argument("--json", type=Path)
    args, cfg = bench_config(parser, "bench/rg_select.py")
    need("reasoning_gym")
    policy = warm_policy(cfg)
    t0, rows = time.time(), []
    for name in CANDIDATES:
        for easy in ((True, False) if name in RG_EASY else (False,)):
            label = f"{name} ({'easy' if easy else 'default'})"
            try:
                items = candidate_items(name, easy, args.items, SELECT_SEED)
            except Exception as e:  # a generator that cannot make these items: listed, not chosen
                rows.append({"candidate": label, "error": f"{type(e).__name__}: {e}"[:200]})
                continue
            with policy.acting_as("agent"):
                outs = policy.generate([it.chat for it in items], args.tokens or cfg.turn_max_new_tokens, temperature=0.0)
            solved = [bool(o.finished and score_reasoning_gym(it, o.text)) for it, o in zip(items, outs)]
            loose = [bool(o.finished and score_reasoning_gym(it, o.text, loose=True)) for it, o in zip(items, outs)]
            rate, n = sum(solved) / len(solved), len(outs)
            rows.append({"candidate": label, "name": name, "easy": easy, "rate": rate,
                         "chosen": RATE_RANGE[0] <= rate <= RATE_RANGE[1], "lenient": sum(loose) / n,
                         "finished": sum(o.finished for o in outs) / n,
                         "boxed": sum("\\boxed{" in o.text for o in outs) / n, "reply": outs[0].text[:160]})
            write(args, cfg, rows, t0)
            print(f"{label}: {rate:.2f} (lenient {rows[-1]['lenient']:.2f}, finished {rows[-1]['finished']:.2f}, "
                  f"boxed {rows[-1]['boxed']:.2f}; {time.time() - t0:.0f} s)", flush=True)
    print("\n| candidate | solved | in range |\n|---|---|---|")
    for r in rows:
        print(f"| {r['candidate']} | " + (f"error: {r['error']}" if "error" in r else
                                         f"{r['rate']:.2f} | {'yes' if r['chosen'] else ''}") + " |")
    chosen = [r["candidate"] for r in rows if r.get("chosen")]
    print(f"\n{len(chosen)} of {len(rows)} candidates in {RATE_RANGE}: {chosen}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
