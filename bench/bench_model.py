"""What batching and quantization buy: generation throughput by batch size, and peak memory.

Run: python bench/bench_model.py [--quantize none|4bit]. Throughput is sampled generation of 48
new tokens on the embedded model for the same prompts at batch 1, 4, 8 and 16, printed as tokens
per second and as a ratio to batch 1 ("kept" tokens stop at EOS, "decoded" counts every position
the batch computed). Memory: each variant is loaded in a fresh subprocess, which generates once
and reports its peak resident set (ru_maxrss), so one variant's allocations never hide the
other's. Prints only; asserts nothing.
On a CPU shared with other jobs, run with OMP_NUM_THREADS=1: oversubscribed OpenMP threads
spin and can make generation several times slower, which swamps what is being measured.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere
from spade_mini.config import Config  # noqa: E402
from spade_mini.policy import load_policy  # noqa: E402

BATCHES = [1, 4, 8, 16]
NEW_TOKENS = 48
MEMORY_NEW_TOKENS = 8  # enough to allocate the cache; 4-bit decoding is slow on CPU
PROMPTS = ["Name three colours.", "What is 12 times 7?", "Describe a cat in one sentence.",
           "Give me a word that rhymes with tree.", "How many legs does a spider have?",
           "Write a haiku about rain.", "What is the capital of France?", "Count from 1 to 5."]


def chats(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(n)]


def throughput(quantize: str) -> None:
    policy = load_policy(Config(model="embedded", quantize=quantize, temperature=0.6), verbose=False)
    policy.generate(chats(1), 4)  # warm-up: first-call allocations are not throughput
    base = None
    print(f"throughput, embedded model ({quantize}), sampled, {NEW_TOKENS} new tokens")
    print(f"{'batch':>5} {'s':>7} {'kept tok/s':>11} {'decoded tok/s':>14} {'ratio to b1':>12}")
    for b in BATCHES:
        before = policy.tokens_generated
        t0 = time.perf_counter()
        outs = policy.generate(chats(b), NEW_TOKENS)
        dt = time.perf_counter() - t0
        kept = policy.tokens_generated - before
        decoded = b * max(len(o.completion_ids) for o in outs)  # the batch runs to its longest row
        base = base or kept / dt
        print(f"{b:>5} {dt:>7.2f} {kept / dt:>11.1f} {decoded / dt:>14.1f} {kept / dt / base:>11.2f}x")


def measure_child(quantize: str) -> None:
    """Child side: load, generate once, print peak RSS and the model's own footprint as JSON."""
    policy = load_policy(Config(model="embedded", quantize=quantize), verbose=False)
    policy.generate(chats(4), MEMORY_NEW_TOKENS)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    print(json.dumps({"peak_mb": peak_mb, "footprint_mb": policy.model.get_memory_footprint() / 2**20}))


def memory() -> None:
    rows = {}
    for q in ("4bit", "none"):
        out = subprocess.run([sys.executable, __file__, "--child", q], capture_output=True, text=True,
                             check=True).stdout
        rows[q] = json.loads(out.strip().splitlines()[-1])
    print("memory (fresh process each: load + one generate)")
    for q, name in (("4bit", "4-bit NF4 + LoRA"), ("none", "unquantized + LoRA")):
        print(f"  {name:<20} peak RSS {rows[q]['peak_mb']:7.0f} MB   "
              f"get_memory_footprint {rows[q]['footprint_mb']:6.0f} MB")
    print(f"  ratio 4-bit / unquantized: peak RSS {rows['4bit']['peak_mb'] / rows['none']['peak_mb']:.2f}, "
          f"footprint {rows['4bit']['footprint_mb'] / rows['none']['footprint_mb']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quantize", default="none", choices=["none", "4bit"],
                        help="base weights for the throughput part (default none, as the CPU preset)")
    parser.add_argument("--child", choices=["none", "4bit"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measure_child(args.child)
    else:
        throughput(args.quantize)
        memory()
