"""A standing comparison with TRL: seconds per step of TRL's GRPOTrainer and of our update.

Run: python bench/bench_vs_trl.py [--steps 3] [--model qwen-coder-1.5b]. Needs `trl` (pip install -r requirements-bench.txt);
without it, it prints one line and exits. The workload is the same for both: the embedded
model (SmolLM2-135M-Instruct; --model names another built-in one) in float32, LoRA r16 (alpha 32) on q/k/v/o, 2 prompts x 8
generations x up to 64 new tokens per step, temperature 0.6 / top-k 20 / top-p 0.95, reward =
digits in the completion (up to 4) / 4, group-mean baseline without std scaling, one optimizer step
per batch (AdamW, lr 1e-5, clip 1.0), micro-batch 8, no gradient checkpointing, no KL term.

The two trainers are interleaved in one run: a TRL callback runs one step of ours (with
`Policy.generate`, and with `Policy.continue_chats`, whose rows stop at their EOS) after each
TRL step, so both see the same machine load. The first step of each is a warm-up and is not
counted. A TRL step is timed from the end of the previous one (ours excluded), so it includes
everything TRL does per step. Prints only; asserts nothing. Run with OMP_NUM_THREADS=1 on a
shared CPU.
"""
import argparse
import importlib.util
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

PROMPTS = ["What is 17 + 25? Answer with \\boxed{}.", "Name a prime number below 20."]
GENERATIONS, MAX_NEW_TOKENS, MICRO_BATCH, LR = 8, 64, 8, 1e-5
TEMPERATURE, TOP_K, TOP_P = 0.6, 20, 0.95


def reward(text: str) -> float:
    """Digits in the reply, up to 4: it varies within a group (a constant reward would give zero
    advantages, and our update skips those, which would not be a fair comparison)."""
    return min(sum(ch.isdigit() for ch in text), 4) / 4


def trl_reward(completions, **kwargs) -> list[float]:
    """The same reward, in TRL's form: conversational completions are lists of messages."""
    return [reward(c[-1]["content"] if isinstance(c, list) else c) for c in completions]


def our_step(policy, optimizer, go_on: bool) -> tuple[float, bool]:
    """One step of ours on the workload: sample, reward, baseline, update.
    Returns (seconds, whether the update was skipped)."""
    from spade_mini.reinforce import Sample, UpdateSettings, update
    from spade_mini.reward import group_advantages
    t0 = time.perf_counter()
    chats = [[{"role": "user", "content": p}] for p in PROMPTS for _ in range(GENERATIONS)]
    sample = policy.continue_chats if go_on else policy.generate
    outs = sample(chats, MAX_NEW_TOKENS)
    advantages = group_advantages([reward(o.text) for o in outs], [i // GENERATIONS for i in range(len(outs))])
    samples = [Sample(o.prompt_ids, o.completion_ids, a, "agent", o.sampling) for o, a in zip(outs, advantages)]
    stats = update(policy, samples, optimizer, UpdateSettings(micro_batch=MICRO_BATCH, max_grad_norm=1.0))
    return time.perf_counter() - t0, stats.skipped is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="measured steps of each (after one warm-up)")
    parser.add_argument("--model", default="embedded", help="a built-in model (python -m spade_mini.install list)")
    args = parser.parse_args()
    if importlib.util.find_spec("trl") is None:
        print("bench_vs_trl: skipped, trl is not installed (pip install -r requirements-bench.txt)")
        return
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from spade_mini.config import Config
    from spade_mini.policy import load_policy
    from spade_mini.policy.models import checkpoint
    from spade_mini.reinforce import make_optimizer

    cfg = Config(model=args.model, quantize="none", dtype="float32", lora_r=16, lora_alpha=32, lr=LR,
                 temperature=TEMPERATURE, top_k=TOP_K, top_p=TOP_P)
    policy = load_policy(cfg, verbose=False)
    optimizer = make_optimizer(policy.model, LR)
    path = str(checkpoint(args.model, cfg.cache_dir))
    times = {"trl": [], "ours, generate": [], "ours, continue_chats": []}
    skips = []

    class Interleave(TrainerCallback):
        """After each TRL step, one step of each of ours; TRL's clock skips them."""

        def __init__(self):
            self.mark = time.perf_counter()

        def on_step_end(self, targs, state, control, **kwargs):
            times["trl"].append(time.perf_counter() - self.mark)
            for name, go_on in (("ours, generate", False), ("ours, continue_chats", True)):
                seconds, skipped = our_step(policy, optimizer, go_on)
                times[name].append(seconds)
                skips.append(skipped)
            self.mark = time.perf_counter()

    steps = args.steps + 1
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in PROMPTS] * steps})
    targs = GRPOConfig(output_dir=os.path.join("/tmp", f"bench_vs_trl_{os.getpid()}"), max_steps=steps,
                       per_device_train_batch_size=MICRO_BATCH, gradient_accumulation_steps=2,
                       num_generations=GENERATIONS, max_completion_length=MAX_NEW_TOKENS,
                       temperature=TEMPERATURE, top_k=TOP_K, top_p=TOP_P, learning_rate=LR,
                       lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0, beta=0.0,
                       scale_rewards="none", num_iterations=1, gradient_checkpointing=False,
                       bf16=False, fp16=False, use_cpu=True, report_to="none", save_strategy="no",
                       logging_steps=1000, shuffle_dataset=False, seed=0,
                       model_init_kwargs={"dtype": torch.float32})
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=path, reward_funcs=trl_reward, args=targs, train_dataset=data, processing_class=AutoTokenizer.from_pretrained(path),
        peft_config=lora, callbacks=[Interleave()])
    trainer.train()
    print(f"GRPO workload: {len(PROMPTS)} prompts x {GENERATIONS} generations x up to {MAX_NEW_TOKENS} tokens, "
          f"{args.model} fp32, LoRA r16 q/k/v/o, micro-batch {MICRO_BATCH}; "
          f"{args.steps} measured steps each, interleaved")
    mean = {k: sum(v[1:]) / len(v[1:]) for k, v in times.items()}
    for name, s in mean.items():
        print(f"  {name:<21} {s:6.2f} s/step   (steps: {', '.join(f'{x:.1f}' for x in times[name][1:])})")
    print(f"  our updates skipped for zero advantages: {sum(skips)} of {len(skips)}")
    for name in ("ours, generate", "ours, continue_chats"):
        print(f"  TRL / {name}: {mean['trl'] / mean[name]:.2f}x")


if __name__ == "__main__":
    main()
