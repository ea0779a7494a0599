"""What chunked scoring buys: peak memory and time of token log-probs, old (full logits) vs new.

Run: python bench/bench_logprobs.py [--completion 4096] [--hidden 128]. A random two-layer
Qwen3-shaped model with Qwen3's vocabulary (151,936) scores one completion of --completion
tokens after a 64-token prompt, forward and backward (the update's work), with the plain
softmax and with the agent's truncated sampler (temperature 0.6, top-k 20, top-p 0.95). "old"
is the plain scorer the tests check against: (B, C + 1, V) logits at once, then
log-softmax per row; "new" is `scoring.token_logprobs`. The embeddings (and so the tied head)
are frozen, as with LoRA.

Memory: each variant runs in a fresh subprocess, which resets its resident-set high-water mark
(Linux: writing 5 to /proc/self/clear_refs) just before the scored call and reads VmHWM after
it, so the number is the peak resident memory the call added; torch's CPU allocator returns
large blocks to the system, so this sees every large tensor. Time: the better of two calls.
A small hidden size keeps the run short on a CPU; the head's matmul grows with it. With the
frozen head both paths do that matmul twice (the new one both times in the forward pass); a
trained head would cost the new path a third (its chunk is recomputed in backward).
Prints only; asserts nothing. Run with OMP_NUM_THREADS=1 on a shared CPU.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from anywhere
QWEN3_VOCAB = 151_936
PROMPT = 64
SAMPLINGS = {"plain": (1.0, 0, 1.0), "truncated": (0.6, 20, 0.95)}


def child(args) -> None:
    """One variant in this fresh process: build, warm up, then measure two calls."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from spade_mini.policy import Sampling, token_logprobs
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from test_scoring import reference_logprobs  # the plain scorer: what token_logprobs replaced
    fn = token_logprobs if args.child == "new" else reference_logprobs
    torch.manual_seed(0)
    h = args.hidden
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=QWEN3_VOCAB, hidden_size=h, intermediate_size=2 * h,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=h // 4, tie_word_embeddings=True)).eval()
    model.get_input_embeddings().weight.requires_grad_(False)
    sampling = Sampling(*SAMPLINGS[args.sampling])
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, QWEN3_VOCAB, (PROMPT,), generator=g).tolist()]
    completions = [torch.randint(1, QWEN3_VOCAB, (args.completion,), generator=g).tolist()]

    def scored_step(c):
        lps = fn(model, prompts, [completions[0][:c]], 0, samplings=[sampling])
        sum(lp.sum() for lp in lps).backward()  # what the update does with them
        model.zero_grad(set_to_none=True)

    scored_step(8)  # warm-up: first-call allocations are not the method's
    seconds, peaks = [], []
    for _ in range(2):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident set
        start = status_mb("VmRSS")
        t0 = time.perf_counter()
        scored_step(args.completion)
        seconds.append(time.perf_counter() - t0)
        peaks.append(status_mb("VmHWM") - start)
    print(json.dumps({"seconds": min(seconds), "peak_mb": max(peaks)}))


def status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024  # kB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completion", type=int, default=4096, help="completion tokens C")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--sampling", default="both", choices=["plain", "truncated", "both"])
    parser.add_argument("--child", choices=["old", "new"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    print(f"token log-probs of one {args.completion}-token completion, V = {QWEN3_VOCAB}, hidden {args.hidden}, "
          "forward + backward; peak = resident memory the call added (fresh process per variant)")
    for sampling in (["plain", "truncated"] if args.sampling == "both" else [args.sampling]):
        rows = {}
        for variant in ("old", "new"):
            cmd = [sys.executable, __file__, "--child", variant, "--sampling", sampling,
                   "--completion", str(args.completion), "--hidden", str(args.hidden)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            rows[variant] = json.loads(out.strip().splitlines()[-1])
            print(f"  {sampling:<9} {variant}: {rows[variant]['seconds']:7.2f} s  peak {rows[variant]['peak_mb']:8.0f} MB",
                  flush=True)
        print(f"  {sampling:<9} new / old: peak {rows['new']['peak_mb'] / rows['old']['peak_mb']:.3f}, "
              f"time {rows['new']['seconds'] / rows['old']['seconds']:.2f}")


if __name__ == "__main__":
    main()
