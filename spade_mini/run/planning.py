"""A run's memory plan before it starts: `python train.py --plan` prints it per phase, and
train.py refuses a configuration whose longest rows cannot fit.

The plan itself is spade_mini/policy/memplan.py; this module knows the Config. The model's shape
comes from its row in policy/models.py for a built-in model, else from its config.json read
offline (the local Hugging Face cache, or a local folder), else, for the gpu preset's model, from
memplan.KNOWN_SHAPES: no
weights are read or downloaded. The weights' bytes are estimated from that shape (train.py
measures them once loaded). Token budgets are the flags' exact values; prompt lengths are
ESTIMATES: the library's own prompts at CHARS_PER_TOKEN characters per token.
Omitted: evaluation during training (`--eval-every`: its rows are shorter than play's), and
data parallelism (each torchrun process plans its own share on its own device).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from spade_mini.shape import Shape
from spade_mini.policy.memplan import (KNOWN_SHAPES, MemoryPlan, ModelShape, Need, PlanError, free_bytes, gib,
                                       make_plan, parse_bytes, ram_bytes)

CHARS_PER_TOKEN = 3      # an upper estimate for English prose and Python in a modern BPE vocabulary
WORD_CHARS = 7           # one corpus word with its space, generously
OBSERVATION_CHARS = 600  # an environment's first observation (the bundled ones are shorter)
STEP_TOKENS = 100        # an observation after a step, with the chat template around it


@dataclass
class Phase:
    """Generation calls of one phase: `rows` chats per call, each up to `prompt` + `new` tokens."""
    name: str
    rows: int
    prompt: int   # longest prompt, tokens (estimated)
    new: int      # new tokens per row (the flag's budget)
    calls: int    # calls per iteration, at most
    flag: str     # the flag that sets this phase's row length


def model_shape(cfg) -> tuple[ModelShape, str]:
    """The model's shape without its weights, and where it came from."""
    from transformers import AutoConfig

    from spade_mini.policy import MODELS
    if cfg.model in MODELS:
        return MODELS[cfg.model].shape, f"the built-in row of {cfg.model} (spade_mini/policy/models.py)"
    if cfg.model == "tiny":
        from transformers import AutoTokenizer

        from spade_mini.policy import embedded_checkpoint, tiny_model
        path = embedded_checkpoint(cfg.cache_dir)
        return ModelShape.of(tiny_model(AutoTokenizer.from_pretrained(path)).config), "the tiny test model"
    try:
        return ModelShape.of(AutoConfig.from_pretrained(cfg.model, local_files_only=True)), "its config.json, read offline"
    except (OSError, ValueError):
        if cfg.model in KNOWN_SHAPES:
            return KNOWN_SHAPES[cfg.model], "built-in numbers of its config.json (memplan.KNOWN_SHAPES), not downloaded"
        raise PlanError(f"the config of --model {cfg.model} cannot be read offline; download it once "
                        f"(`hf download {cfg.model} config.json`) or pass a local folder as --model.") from None


def phases(cfg) -> list[Phase]:
    """Every generation phase of one iteration at its longest (one process)."""
    from spade_mini.agent import first_message
    from spade_mini.designer import Document, designer_prompt, hint_prompt, skills_for
    from spade_mini.designer.memory import REFERENCE_MAX_CHARS

    def tokens(chat: list[dict], extra_chars: int = 0) -> int:  # ESTIMATE, with 8 template tokens a message
        return math.ceil((sum(len(m["content"]) for m in chat) + extra_chars) / CHARS_PER_TOKEN) + 8 * len(chat)

    shape = Shape.of(cfg)
    n = shape.slots  # the rows of a design call
    designer = cfg.pool_fill != "examples"
    out = []
    if designer:
        doc = None if cfg.no_corpus else Document("", "plan", "plan")
        words = 0 if cfg.no_corpus else cfg.corpus_max_words * WORD_CHARS
        refs = 0 if cfg.no_memory else cfg.memory_references * (REFERENCE_MAX_CHARS + 300)
        prompt = max(tokens(designer_prompt(s, doc, ""), words + refs) for s in skills_for(cfg.setting))
        out.append(Phase("design", n, prompt, cfg.design_max_new_tokens, len(shape.design_calls()),
                         "--design-max-new-tokens"))
        if cfg.hint_source == "policy":
            prompt = tokens(hint_prompt("", "games")) + cfg.design_max_new_tokens  # the source is a design
            out.append(Phase("hint", n, prompt, cfg.hint_max_new_tokens, 1, "--hint-max-new-tokens"))
    episodes = max(shape.play_rows(shape.valid_designs() if designer else 0))  # the larger play call
    first = tokens([{"role": "user", "content": first_message("", None, None, cfg.agent_template)}],
                   OBSERVATION_CHARS)
    turns = min(cfg.max_turns, 1 + max(0, cfg.max_context_tokens - first - cfg.turn_max_new_tokens)
                // (cfg.turn_max_new_tokens + STEP_TOKENS))
    out.append(Phase("play, turn 1", episodes, first, cfg.turn_max_new_tokens, 1, "--turn-max-new-tokens"))
    if turns > 1:  # later turns, at the longest: the chat has grown by a reply and an observation a turn
        longest = min(cfg.max_context_tokens - cfg.turn_max_new_tokens,
                      first + (turns - 1) * (cfg.turn_max_new_tokens + STEP_TOKENS))
        out.append(Phase(f"play, turns 2-{turns}", episodes, longest, cfg.turn_max_new_tokens, turns - 1,
                         "--max-context-tokens"))
    return out


def offline_plan(cfg) -> tuple[MemoryPlan, str]:
    """The plan `train.py` would make, from the shape alone (estimated weights); and a note."""
    import torch

    from spade_mini.policy import pick_dtype
    shape, source = model_shape(cfg)
    cuda = cfg.device == "cuda" or (cfg.device == "auto" and (bool(cfg.gpu_memory) or torch.cuda.is_available()))
    device = torch.device("cuda" if cuda else "cpu")
    dtype = pick_dtype(cfg, device)
    size = torch.empty(0, dtype=dtype).element_size()
    master = 4 if cfg.full_finetune and size < 4 else size  # full fine-tuning keeps fp32 masters
    quantized = cfg.quantize == "4bit" and cfg.model != "tiny"
    weights = shape.weights_bytes(master, quantized)
    if cfg.full_finetune:
        trainable, state = 0, 3 * weights
    else:
        trainable = shape.lora_weights(cfg.lora_r, cfg.lora_targets, 2 if cfg.separate_adapters else 1)
        state = 3 * 4 * trainable  # fp32 LoRA: gradient and AdamW's two moments
    if cfg.gpu_memory:
        total = parse_bytes(cfg.gpu_memory)
    else:
        total = torch.cuda.mem_get_info(device)[0] if cuda and torch.cuda.is_available() else min(free_bytes(device) + weights, ram_bytes())
    plan = make_plan(shape, device=device.type, total_bytes=total, weights_bytes=weights + 4 * trainable,
                     state_bytes=state, dtype_bytes=size, checkpointing=cfg.gradient_checkpointing,
                     update_tokens=cfg.update_tokens, need=None if cuda else run_need(cfg))
    mode = "full fine-tune" if cfg.full_finetune else f"LoRA r{cfg.lora_r} on {','.join(cfg.lora_targets)}"
    note = (f"{cfg.model} (shape: {source}), {'4-bit NF4' if quantized else str(dtype).replace('torch.', '')} "
            f"weights, {mode}, gradient checkpointing {'on' if cfg.gradient_checkpointing else 'off'}, "
            f"on {device.type}")
    return plan, note


def run_need(cfg) -> Need:
    """What this run's phases need at their longest (estimates, as `phases`): every generation
    call with all its rows at once, every episode's chat kept between turns, and an update
    micro-batch that holds the longest sample."""
    calls = phases(cfg)
    play = [p for p in calls if p.name.startswith("play")]
    chat = max(p.rows * (p.prompt + p.new) for p in play) if len(play) > 1 else 0  # kept only between turns
    return Need(tuple((p.rows, p.prompt + p.new) for p in calls), chat, longest_sample(cfg))


def fit_plan(policy, cfg, say=print) -> MemoryPlan:
    """The loaded policy's plan for this run: on a CPU remade by need (memplan.Need: each phase
    gets what this run's sizes need, under the RAM or --gpu-memory as a cap), checked (`check_plan`)
    and said in one line. A GPU keeps the plan that divides its free memory."""
    from spade_mini.policy.load import measured_plan
    if policy.device.type == "cpu":
        policy.plan = measured_plan(policy.model, cfg, policy.device, policy.autocast, need=run_need(cfg))
        policy.chat_cache.max_bytes = policy.plan.chat_cache_bytes
    check_plan(policy.plan, cfg)
    say(policy.plan.line(), flush=True)
    return policy.plan


def check_plan(plan: MemoryPlan, cfg) -> None:
    """Raise PlanError, naming the flag, when a phase's longest row or sample cannot fit at all."""
    for p in phases(cfg):
        need = p.prompt + p.new + plan.row_positions
        if need > plan.generation_positions:
            raise PlanError(f"a {p.name} row needs about {need:,} cache positions but a generation chunk may "
                            f"hold {plan.generation_positions:,} here; lower {p.flag} or raise --gpu-memory.")
    if longest_sample(cfg) > plan.update_tokens:
        raise PlanError(f"a sample of up to {longest_sample(cfg):,} tokens does not fit in the update's "
                        f"{plan.update_tokens:,} tokens per micro-batch; lower --max-context-tokens or "
                        "--design-max-new-tokens, or raise --gpu-memory.")


def longest_sample(cfg) -> int:
    """The longest trained sequence: an agent turn (up to the context) or a design."""
    design = [p.prompt + p.new for p in phases(cfg) if p.name == "design"]
    return max([cfg.max_context_tokens] + design)


def plan_lines(plan: MemoryPlan, cfg) -> list[str]:
    """The plan per phase: rows, longest row, rows per chunk, chunks, peak, tokens per iteration."""
    fixed = plan.weights_bytes + plan.state_bytes
    lines = [plan.line(),
             f"a cache position takes {plan.position_bytes / 1024:.0f} KiB (+{plan.prefill_bytes / 1024:.0f} KiB "
             f"while prefilled), an update token {plan.token_bytes / 1024:.0f} KiB; prompt lengths are estimates",
             f"{'phase':<18}{'rows':>6}{'longest':>9}{'rows/chunk':>12}{'chunks':>8}{'peak GiB':>10}{'tokens/iteration':>18}"]
    for p in phases(cfg):
        length = p.prompt + p.new
        per = max(1, min(p.rows, plan.generation_positions // (length + plan.row_positions)))
        chat = plan.chat_cache_bytes if p.name.startswith("play") else 0
        peak = fixed + chat + plan.generation_bytes(per * (length + plan.row_positions))
        lines.append(f"{p.name:<18}{p.rows:>6}{length:>9,}{per:>12}{math.ceil(p.rows / per):>8,}"
                     f"{peak / 2**30:>10.1f}{p.rows * p.new * p.calls:>18,}")
    longest, budget = longest_sample(cfg), Shape.of(cfg).no_hint_episodes
    turns = sum(p.calls for p in phases(cfg) if p.name.startswith("play"))
    designs = 0 if cfg.pool_fill == "examples" else Shape.of(cfg).design_cap  # every attempt is a designer sample
    samples, trained = designs + budget * turns, designs * cfg.design_max_new_tokens + budget * turns * cfg.turn_max_new_tokens
    per = max(1, min(cfg.micro_batch, plan.update_tokens // longest))
    peak = fixed + plan.update_bytes(per * longest)
    lines.append(f"{'update':<18}{samples:>6}{longest:>9,}{per:>12}{'':>8}{peak / 2**30:>10.1f}{trained:>18,}")
    lines.append("rows/chunk and chunks: per call, at the phase's longest row; tokens/iteration: new tokens at most "
                 "(update: samples are designs and no-hint turns, and their completion tokens at most)")
    return lines


def print_plan(cfg) -> int:
    """`train.py --plan`: print the plan, or say in one sentence why it cannot fit; the exit status."""
    try:
        plan, note = offline_plan(cfg)
        print(f"plan for {note}")
        print("\n".join(plan_lines(plan, cfg)))
        check_plan(plan, cfg)
    except PlanError as e:
        print(f"error: {e}")
        return 2
    print(f"fits: the longest row and the longest sample fit in {gib(plan.total_bytes)}.")
    return 0
