"""Decoding speed and memory of one model at one dtype, through the project's own two samplers.

    python bench/bench_model.py --model qwen-coder-1.5b --dtype bfloat16
    python bench/bench_model.py --model embedded --dtype float32 --quantize 4bit

Loads the policy as a run does (LoRA, unquantized unless --quantize 4bit) and samples NEW_TOKENS
new tokens at temperature 0.6 for the same prompts at batch 1 and batch 8, twice each, through
`Policy.generate` (Hugging Face `generate`) and `Policy.continue_chats` (decoding.py: rows leave
at EOS, keys and values are reused). Tokens per second count the tokens kept (a row stops at its
EOS); "decoded" also counts the positions `generate` computes after a row's EOS. The better of
two calls is kept. Peak resident memory is this process's (load, then every call). Prints one
JSON line at the end (bench/model_menu.py collects them). On a CPU shared with other jobs, run
with OMP_NUM_THREADS set to the free cores: oversubscribed OpenMP threads spin.
Prints only; asserts nothing.
"""
import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere
import torch  # noqa: E402

from spade_mini.config import Config  # noqa: E402
from spade_mini.policy import load_policy  # noqa: E402

BATCHES = [1, 8]
NEW_TOKENS = 32
PROMPTS = ["Write a Python function that checks whether a number is prime, with a docstring.",
           "Describe how a bicycle works, part by part.", "Write a short story about a lighthouse keeper.",
           "Explain what a hash table is and when to use one.", "List ten animals and one fact about each.",
           "Write a poem about autumn in four stanzas.", "Explain the rules of chess to a beginner.",
           "Write a Python class for a bank account with deposit and withdraw methods."]


def chats(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(n)]


def best_rate(call, policy, b: int) -> tuple[float, float]:
    """(kept tokens/s, decoded tokens/s): the better of two calls."""
    best = (0.0, 0.0)
    for _ in range(2):
        before = policy.tokens_generated
        t0 = time.perf_counter()
        outs = call(b)
        dt = time.perf_counter() - t0
        kept = policy.tokens_generated - before
        decoded = b * max(len(o.completion_ids) for o in outs)  # the batch runs to its longest row
        best = max(best, (kept / dt, decoded / dt))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--quantize", default="none", choices=["none", "4bit"])
    args = parser.parse_args()
    torch.manual_seed(0)
    t0 = time.time()
    policy = load_policy(Config(model=args.model, quantize=args.quantize, dtype=args.dtype, temperature=0.6),
                         verbose=False)
    load_s = time.time() - t0
    policy.generate(chats(1), 4)  # warm-up: first-call allocations are not throughput
    row = {"model": args.model, "dtype": args.dtype, "quantize": args.quantize, "new_tokens": NEW_TOKENS,
           "load_s": round(load_s, 1), "threads": torch.get_num_threads()}
    print(f"{args.model}, {args.dtype}, {args.quantize}: {NEW_TOKENS} new tokens at temperature 0.6, "
          f"{row['threads']} threads", flush=True)
    samplers = {"generate": lambda b: policy.generate(chats(b), NEW_TOKENS),
                "continue_chats": lambda b: policy.continue_chats(chats(b), NEW_TOKENS, keys=list(range(b)))}
    for name, call in samplers.items():
        for b in BATCHES:
            kept, decoded = best_rate(call, policy, b)
            row[f"{name}_b{b}"] = round(kept, 2)
            print(f"  {name:<15} batch {b}: {kept:6.2f} tok/s kept, {decoded:6.2f} decoded", flush=True)
    row["peak_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)  # kB on Linux
    print(f"  peak resident memory {row['peak_gib']} GiB")
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
