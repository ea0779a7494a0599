"""A GPU check at the `gpu` preset's sizes, with no downloads: design, play and update once.

Run on a GPU:          python bench/gpu_check.py [--tokenizer DIR]
Reduced, on a CPU:     python bench/gpu_check.py --reduced --device cpu      (what the test runs)
Full width, 2 layers:  python bench/gpu_check.py --reduced --layers 2 --device cpu

The model is Qwen3-4B-shaped (36 layers, hidden 2560, 32 heads with 8 key/value heads, vocabulary
151,936) with random weights in bfloat16, built from a config over the embedded tokenizer (only
its tokenizer files are read, so --tokenizer can point at a folder holding just those), and
wrapped by the library's own `policy_from_model` (LoRA, gradient checkpointing, as the preset
says). One iteration's GPU work, with the preset's sizes unless flags shrink them:

- design: one batched `Policy.generate` of N designer prompts (the library's `designer_prompt`
  on bundled documents), `design_max_new_tokens` each (random weights never stop early);
- play: N x K x 2 episodes in lockstep, each turn one `continue_chats` call (the agent's call),
  `turn_max_new_tokens` per turn, a fixed observation between turns (random weights never stop,
  so every turn counts as finished);
- update: one `reinforce.update` on every design and every no-hint turn (advantages +-1).

Every call runs inside the policy's memory plan (spade_mini/policy/memplan.py; `--gpu-memory`
simulates a smaller device), as train.py's do. Prints the plan in one line, then per phase:
seconds, tokens/s, and the planned peak against the measured one. Planned: weights + trainable
state + the phase's largest chunk or micro-batch as the plan counts it (+ the chat cache play
keeps). Measured on a GPU: `max_memory_allocated`, reset per phase; on a CPU: the process's peak
resident set during the phase (VmHWM, reset through /proc/self/clear_refs) less what the process
held besides the model once it was built and had generated one token (libraries, tokenizer,
corpus). Then seconds per iteration, and what it did not run.
"""
import argparse
import importlib.util
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere
import torch  # noqa: E402

from spade_mini.config import Config  # noqa: E402
from spade_mini.designer import (  # noqa: E402
    Corpus,  # noqa: E402
    designer_prompt,  # noqa: E402
    skill_schedule,
    skills_for,
)
from spade_mini.policy import KNOWN_SHAPES, embedded_checkpoint, policy_from_model  # noqa: E402
from spade_mini.policy.chunks import chunk_rows  # noqa: E402
from spade_mini.reinforce import Sample, UpdateSettings, make_optimizer, micro_batches, update  # noqa: E402

SHAPE = KNOWN_SHAPES[Config.from_preset("gpu").model]  # the preset model's numbers, in one place
QWEN3_4B = dict(hidden_size=SHAPE.hidden, intermediate_size=SHAPE.intermediate, num_hidden_layers=SHAPE.layers,
                num_attention_heads=SHAPE.heads, num_key_value_heads=SHAPE.kv_heads, head_dim=SHAPE.head_dim,
                vocab_size=SHAPE.vocab, tie_word_embeddings=SHAPE.tied, max_position_embeddings=32_768,
                rope_theta=5_000_000.0, rms_norm_eps=1e-6)
REDUCED = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16)
REDUCED_SIZES = dict(designs=2, design_tokens=16, plays=1, turns=2, turn_tokens=8, micro_batch=2,
                     corpus_words=60)
OBSERVATION = "Wrong: that is not the value. Try again, and answer with \\boxed{}."
GAME_CHAT = ("You are playing a language game. Make valid actions to win.\nObservation: Start with the number "
             "{seed}. Add 7, then multiply by 3. Answer with a number, e.g. \\boxed{{25}}.\n"
             "Please reason step by step, and put your final answer within \\boxed{{}}.")


def build_policy(args, cfg: Config, device: torch.device):
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    narrow = REDUCED if args.reduced and not args.layers else {}  # --layers keeps the full width
    shape = {**QWEN3_4B, **narrow, **({"num_hidden_layers": args.layers} if args.layers else {})}
    config = Qwen3Config(**shape, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM._from_config(config, dtype=torch.bfloat16)  # random weights, on the device
    return policy_from_model(model, tokenizer, cfg, device=device)


def resident_bytes(peak: bool = False) -> int:
    """The process's resident set now (VmRSS), or its peak since the last reset (VmHWM)."""
    status = open("/proc/self/status").read()
    return int(re.search(r"VmHWM:\s+(\d+)" if peak else r"VmRSS:\s+(\d+)", status).group(1)) * 1024


class Phase:
    """Times a phase and measures its peak memory (module docstring)."""
    baseline = 0  # CPU: the resident set besides the model (module docstring)

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current resident set
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak_gb = torch.cuda.max_memory_allocated() / 2**30
        else:
            self.peak_gb = (resident_bytes(peak=True) - Phase.baseline) / 2**30
        self.seconds = time.perf_counter() - self.t0


def report(name: str, phase: Phase, tokens: int, what: str, planned: int, extra: str = "") -> None:
    print(f"  {name:<7} {phase.seconds:8.1f} s  {tokens / phase.seconds:9.1f} {what}/s  "
          f"peak planned {planned / 2**30:7.3f} GB, measured {phase.peak_gb:7.3f} GB  {extra}", flush=True)


def planned_generation(plan, prompt_lengths: list[int], new: int, kept: int = 0) -> int:
    """The plan's peak for a call: fixed part, its largest chunk, and `kept` bytes of chat cache."""
    chunks = chunk_rows([0] * len(prompt_lengths), prompt_lengths, new, plan.generation_positions, plan.row_positions)
    largest = max(len(c) * (max(prompt_lengths[i] for i in c) + new + plan.row_positions) for c in chunks)
    return plan.weights_bytes + plan.state_bytes + plan.generation_bytes(largest) + kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reduced", action="store_true", help="a 2-layer model and small sizes (CPU test)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--tokenizer", default=None, help="a folder with tokenizer files (default: the embedded model's)")
    parser.add_argument("--designs", type=int, help="designs in the batch (preset: designs_per_iteration)")
    parser.add_argument("--design-tokens", type=int, help="new tokens per design (preset: design_max_new_tokens)")
    parser.add_argument("--plays", type=int, help="paired seeds per design (preset: plays_per_design)")
    parser.add_argument("--turns", type=int, help="turns per episode (default 1)")
    parser.add_argument("--turn-tokens", type=int, help="new tokens per turn (preset: turn_max_new_tokens)")
    parser.add_argument("--micro-batch", type=int, help="sequences per update pass (preset: micro_batch)")
    parser.add_argument("--layers", type=int, help="the full width with only this many layers (with --reduced: the small sizes)")
    parser.add_argument("--gpu-memory", default="", help="memory the plan divides, e.g. 24GiB (default: what is free)")
    args = parser.parse_args()
    preset = Config.from_preset("gpu")
    sizes = dict(designs=preset.designs_per_iteration, design_tokens=preset.design_max_new_tokens,
                 plays=preset.plays_per_design, turns=1, turn_tokens=preset.turn_max_new_tokens,
                 micro_batch=preset.micro_batch, corpus_words=preset.corpus_max_words)
    sizes.update(REDUCED_SIZES if args.reduced else {})
    sizes.update({k: v for k, v in vars(args).items() if k in sizes and v is not None})
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    args.tokenizer = args.tokenizer or str(embedded_checkpoint(preset.cache_dir))
    cfg = Config.from_preset("gpu", quantize="none", dtype="bfloat16", micro_batch=sizes["micro_batch"],
                             gpu_memory=args.gpu_memory)
    t0 = time.perf_counter()
    policy = build_policy(args, cfg, device)
    plan = policy.plan
    n_params = sum(p.numel() for p in policy.model.parameters())
    name = f"Qwen3-4B-shaped ({args.layers} layers)" if args.layers else (
        "reduced Qwen3-shaped" if args.reduced else "Qwen3-4B-shaped")
    print(f"gpu_check: {name} model, {n_params / 1e9:.2f}B parameters, random bf16 weights, on {device} "
          f"({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), built in "
          f"{time.perf_counter() - t0:.1f} s; LoRA r{cfg.lora_r} on {','.join(cfg.lora_targets)}, "
          f"gradient checkpointing {'on' if cfg.gradient_checkpointing else 'off'}")
    print(f"  sizes: {sizes['designs']} designs x {sizes['design_tokens']} tokens; "
          f"{sizes['designs']} x {sizes['plays']} seeds x 2 arms = {sizes['designs'] * sizes['plays'] * 2} "
          f"episodes x {sizes['turns']} turn(s) x {sizes['turn_tokens']} tokens; micro-batch {sizes['micro_batch']}")
    print(f"  {plan.line()}")
    rng = random.Random(0)
    corpus = Corpus.load("default", max_words=sizes["corpus_words"])
    skills = skill_schedule(skills_for("games"), 0, sizes["designs"], group=2)
    design_chats = [designer_prompt(s, corpus.sample(rng), "") for s in skills]
    if device.type == "cpu":  # one token first, so that what generating imports is in the baseline
        policy.generate(design_chats[:1], 1, temperature=0)
        Phase.baseline = resident_bytes() - plan.weights_bytes

    with Phase(device) as phase, policy.acting_as("designer"):
        designs = policy.generate(design_chats, sizes["design_tokens"], temperature=cfg.temperature)
    kept = sum(len(d.completion_ids) for d in designs)
    planned = planned_generation(plan, [len(d.prompt_ids) for d in designs], sizes["design_tokens"])
    report("design", phase, kept, "tok", planned, f"prompts up to {max(len(d.prompt_ids) for d in designs)} tokens")
    times = [phase.seconds]

    episodes = sizes["designs"] * sizes["plays"] * 2
    chats = [[{"role": "user", "content": GAME_CHAT.format(seed=i % 97)}] for i in range(episodes)]
    turns, before, planned = [], (policy.tokens_prefilled, policy.tokens_reused), 0
    with Phase(device) as phase:
        for _ in range(sizes["turns"]):
            lengths = [len(policy.prompt_ids(chat)) for chat in chats]
            held = min(plan.chat_cache_bytes, plan.position_bytes * sum(n + sizes["turn_tokens"] for n in lengths))
            planned = max(planned, planned_generation(plan, lengths, sizes["turn_tokens"], held))
            with policy.acting_as("agent"):
                outs = policy.continue_chats(chats, sizes["turn_tokens"], keys=list(range(episodes)),
                                             temperature=cfg.temperature)
            turns.append(outs)
            for chat, out in zip(chats, outs):
                chat += [{"role": "assistant", "content": out.text}, {"role": "user", "content": OBSERVATION}]
    kept = sum(len(o.completion_ids) for outs in turns for o in outs)
    report("play", phase, kept, "tok", planned, f"prefilled {policy.tokens_prefilled - before[0]}, "
                                                f"reused {policy.tokens_reused - before[1]} prompt tokens")
    times.append(phase.seconds)

    samples = [Sample(d.prompt_ids, d.completion_ids, (-1.0) ** i, "designer", d.sampling)
               for i, d in enumerate(designs)]
    samples += [Sample(o.prompt_ids, o.completion_ids, (-1.0) ** i, "agent", o.sampling)
                for outs in turns for i, o in enumerate(outs[0::2])]  # the no-hint half of the episodes
    optimizer = make_optimizer(policy.model, cfg.lr)
    largest = max(len(b) * max(len(s.prompt_ids) + len(s.completion_ids) for s in b)
                  for _, b in micro_batches(samples, sizes["micro_batch"], plan))
    with Phase(device) as phase:
        stats = update(policy, samples, optimizer, UpdateSettings(micro_batch=sizes["micro_batch"], max_grad_norm=cfg.max_grad_norm))
    planned = plan.weights_bytes + plan.state_bytes + plan.update_bytes(largest)
    report("update", phase, stats.tokens, "trained tok", planned,
           f"{len(samples)} samples, micro-batches up to {largest} padded tokens, grad norm {stats.grad_norm:.3g}")
    times.append(phase.seconds)
    print(f"  seconds per iteration (design + play + update): {sum(times):.1f}; out-of-memory retries: "
          f"{plan.oom_retries}")
    bnb = importlib.util.find_spec("bitsandbytes") is not None
    print("  not run: 4-bit NF4 base weights (the preset's quantize=4bit; "
          + ("bitsandbytes is installed, but" if bnb else "bitsandbytes is not installed, and")
          + " a model built from a config is not quantized: that happens in from_pretrained); hints "
          "(random weights write no valid design, so the preset asks for none); sandbox validation and "
          "environment steps (CPU work: bench/bench_sandbox.py)"
          + ("" if sizes["turns"] > 1 else "; turns after the first (--turns)"))


if __name__ == "__main__":
    main()
