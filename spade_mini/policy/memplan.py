"""The memory plan: what every phase may hold on this device, decided before the run starts.

Nothing is measured after the fact. From the model's shape (layers, key/value heads, head size,
hidden size, vocabulary), its dtype, its quantization and its trainable part, and from the memory
the device has (its free memory once the weights are loaded, or `--gpu-memory`; on a CPU, the
RAM), the plan gives each phase a budget:

    fixed         weights + trainable state (gradients, AdamW's two moments) + a margin
    ---- what is left is the working memory W; the phases use it one at a time ----
    generation    cache positions one chunk of rows may hold, padding included: b rows hold
                  b x (longest reused prefix + longest rest of prompt + new tokens). A position
                  costs its keys and values in every layer, plus one layer's activations for
                  when it is prefilled; a row's next-token logits count as `row_positions`.
    chat cache    a quarter of W: keys and values kept between an agent's turns (play only)
    update        padded tokens (rows x longest) per micro-batch: with gradient checkpointing a
                  token keeps every layer's input, plus one layer's activations (with the
                  float32 copies its norms keep) twice over while that layer is recomputed and
                  differentiated

On a CPU the plan is made BY NEED (`Need`, estimated from the run's sizes by run/planning.py):
each phase gets what its longest call needs, at most, and the plan's total is the fixed part, a
margin and the largest phase, with the RAM (or `--gpu-memory`) as the cap. The update then
holds one longest sample per micro-batch (shorter ones packed into as many tokens): a CPU gains
nothing from more rows per pass, and a plan that claims the whole machine hides what a run takes.

`chunks.py` cuts a generation call into chunks within its positions (`chunk_rows`), and an
update into micro-batches within its tokens (`pack_by_tokens`, longest first, so padding stays small). Where the
estimate is short, the device says so: a chunk or micro-batch that runs out of memory is halved
and retried, and the plan is tightened for the rest of the run (`survived`; policy.py and
reinforce.py do the retrying, as accelerate's find_executable_batch_size does).

Shapes: legend in spade_mini/__init__.py (h key/value heads, d head size, H hidden, V vocabulary).
Omitted: attention that materialises (T, T) scores (the plan assumes SDPA), kernels' workspaces
and allocator fragmentation beyond the margin, and models whose layers differ from one another.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from spade_mini.policy.logprobs import LOGIT_CHUNK_ELEMENTS

GiB = 2**30
MARGIN_SHARE = 0.10        # of the memory: the CUDA context, fragmentation, what the plan omits
MARGIN_MIN_BYTES = 2**30   # at least this much margin
CHAT_CACHE_SHARE = 0.25    # of the working memory, for keys and values kept between turns
NF4_BYTES = 0.5 + 4 / 64   # a 4-bit weight plus its block's fp32 scale (bitsandbytes NF4, blocks of 64)
LOGIT_COPIES = 4           # a row's next-token logits: the head's output, fp32, scaled, probabilities
HEAD_COPIES = 4            # the update's logits chunk (logprobs.py): raw, scaled, log-softmax, gradient


class PlanError(ValueError):
    """A configuration that cannot fit in the memory there is; the message names the flag to change."""


@dataclass(frozen=True)
class ModelShape:
    """What memory depends on in a decoder-only transformer."""
    layers: int
    hidden: int         # H
    intermediate: int   # MLP width
    heads: int          # query heads
    kv_heads: int       # h
    head_dim: int       # d
    vocab: int          # V
    tied: bool          # the input embedding and the output head are one matrix

    @classmethod
    def of(cls, config) -> "ModelShape":
        """The shape of a transformers config (the text part of a multimodal one)."""
        c = config.get_text_config() if hasattr(config, "get_text_config") else config
        heads = c.num_attention_heads
        return cls(c.num_hidden_layers, c.hidden_size, c.intermediate_size, heads,
                   getattr(c, "num_key_value_heads", None) or heads,
                   getattr(c, "head_dim", None) or c.hidden_size // heads, c.vocab_size,
                   bool(getattr(c, "tie_word_embeddings", False)))

    def projections(self) -> dict[str, tuple[int, int]]:
        """(inputs, outputs) of each projection of a layer, by the module names LoRA targets."""
        H, q, kv, mlp = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {"q_proj": (H, q), "k_proj": (H, kv), "v_proj": (H, kv), "o_proj": (q, H),
                "gate_proj": (H, mlp), "up_proj": (H, mlp), "down_proj": (mlp, H)}

    @property
    def layer_weights(self) -> int:
        """Weights of one layer's projections: what 4-bit quantization packs."""
        return sum(a * b for a, b in self.projections().values())

    @property
    def other_weights(self) -> int:
        """Embedding, output head (unless tied) and norms: kept in the compute dtype."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + (2 * self.layers + 1) * self.hidden

    def position_bytes(self, dtype_bytes: int) -> int:
        """One cached position: its key and value (h x d each) in every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def layer_activation_bytes(self, dtype_bytes: int) -> int:
        """One token's activations in one layer: residual, norm and outputs (4 H), queries and
        attention output (2 x heads x d), keys and values (2 h x d), the MLP's gate, up and product."""
        return (4 * self.hidden + 2 * self.heads * self.head_dim + 2 * self.kv_heads * self.head_dim
                + 3 * self.intermediate) * dtype_bytes

    def norm_float32_bytes(self) -> int:
        """One token's float32 copies in one layer that its RMSNorms (2 H, and Qwen3's per-head
        norms of queries and keys) make and keep for the backward pass."""
        return 4 * (2 * self.hidden + (self.heads + self.kv_heads) * self.head_dim)

    def weights_bytes(self, dtype_bytes: int, quantized: bool) -> int:
        """The base weights, estimated: 4-bit projections (NF4) or all in `dtype_bytes`."""
        per_weight = NF4_BYTES if quantized else dtype_bytes
        return int(self.layers * self.layer_weights * per_weight + self.other_weights * dtype_bytes)

    def lora_weights(self, r: int, targets: list[str], adapters: int = 1) -> int:
        """Parameters of LoRA adapters of rank r on the named projections of every layer."""
        shapes = self.projections()
        return adapters * self.layers * sum(r * sum(shapes[t]) for t in targets if t in shapes)


# The gpu preset's model, so that `train.py --plan` needs no download: the shape numbers of
# Qwen/Qwen3-4B-Instruct-2507's config.json, copied by hand. Every other model's shape is read
# from its own config.
KNOWN_SHAPES = {
    "Qwen/Qwen3-4B-Instruct-2507": ModelShape(layers=36, hidden=2560, intermediate=9728, heads=32,
                                              kv_heads=8, head_dim=128, vocab=151_936, tied=True),
}


@dataclass(frozen=True)
class Need:
    """What a run's phases need at their longest (run/planning.py estimates it from the run's sizes):
    each generation call as (rows, longest row in positions), the positions every episode keeps
    between turns, and the padded tokens of an update micro-batch that holds the longest sample."""
    generation: tuple[tuple[int, int], ...]
    chat_positions: int
    update_tokens: int


@dataclass
class MemoryPlan:
    """Every phase's budget on one device (bytes unless named otherwise)."""
    device: str                # 'cuda', or 'cpu' (a RAM budget)
    total_bytes: int           # what the plan divides
    weights_bytes: int         # the model as loaded (measured), or its estimate
    state_bytes: int           # gradients and AdamW moments of the trainable weights
    margin_bytes: int
    position_bytes: int        # one cached position (keys and values, every layer)
    prefill_bytes: int         # one layer's activations, per position being prefilled
    row_positions: int         # one row's next-token logits, counted in positions
    token_bytes: int           # one padded token of an update micro-batch
    head_bytes: int            # the update's logits chunk, once per micro-batch
    generation_positions: int  # cache positions per generation chunk, padding included
    chat_cache_bytes: int      # keys and values kept between an agent's turns
    update_tokens: int         # padded tokens per update micro-batch
    by_need: bool = False      # sized by what the run needs (under total_bytes as a cap), not by all there is
    update_limit: int = 0      # by need: a longer sample than estimated may still take this many tokens alone
    oom_retries: int = 0       # out-of-memory errors survived by halving

    @property
    def work_bytes(self) -> int:
        return self.total_bytes - self.weights_bytes - self.state_bytes - self.margin_bytes

    def generation_bytes(self, positions: int) -> int:
        """What a chunk of `positions` cache positions (logits' share included) may take."""
        return positions * (self.position_bytes + self.prefill_bytes)

    def update_bytes(self, tokens: int) -> int:
        return tokens * self.token_bytes + self.head_bytes

    def line(self) -> str:
        """The plan in one line, for the log."""
        return (f"memory plan{' by need' if self.by_need else ''}: {gib(self.total_bytes)} on {self.device} = "
                f"weights {gib(self.weights_bytes)} + "
                f"trainable state {gib(self.state_bytes)} + margin {gib(self.margin_bytes)} + work "
                f"{gib(self.work_bytes)}: generation chunks of {self.generation_positions:,} cache positions, "
                f"chat cache {gib(self.chat_cache_bytes)}, update micro-batches of {self.update_tokens:,} tokens")

    def survived(self, what: str, now: str) -> None:
        """Count an out-of-memory error that halving got past; say so the first time, and give the
        allocator back what the failed attempt left cached."""
        import gc

        import torch
        self.oom_retries += 1
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if self.oom_retries == 1:
            print(f"out of memory in {what}: halved and retried; {now} for the rest of the run "
                  "(metrics.jsonl counts these as oom_retries).", flush=True)


def make_plan(shape: ModelShape, *, device: str, total_bytes: int, weights_bytes: int, state_bytes: int,
              dtype_bytes: int, checkpointing: bool, update_tokens: int = 0,
              margin_bytes: int | None = None, need: Need | None = None) -> MemoryPlan:
    """Split `total_bytes` between the fixed part and each phase (module docstring). With a
    `need`, no phase gets more than it needs and the plan's total is what they need, with
    `total_bytes` as the cap (what cannot fit under it is chunked). Raises PlanError when the
    fixed part leaves nothing, or `update_tokens` asks for more than is left."""
    margin = max(MARGIN_MIN_BYTES, int(MARGIN_SHARE * total_bytes)) if margin_bytes is None else margin_bytes
    work = total_bytes - weights_bytes - state_bytes - margin
    position, layer = shape.position_bytes(dtype_bytes), shape.layer_activation_bytes(dtype_bytes)
    chat = int(CHAT_CACHE_SHARE * work)
    per_position = position + layer
    inputs = shape.layers * shape.hidden * dtype_bytes  # every layer's input, kept for the backward pass
    trained = layer + shape.norm_float32_bytes()  # one layer's activations kept for its backward pass
    token = (inputs + 2 * trained if checkpointing else (shape.layers + 1) * trained) + 2 * shape.hidden * dtype_bytes
    head = LOGIT_CHUNK_ELEMENTS * 4 * HEAD_COPIES
    fit = (work - head) // token
    if fit < 1:
        raise PlanError(f"the model takes {gib(weights_bytes + state_bytes)} with its trainable state, which with "
                        f"{gib(margin)} of margin leaves no working memory in {gib(total_bytes)}; raise "
                        "--gpu-memory, or use --quantize 4bit or a smaller --model.")
    if update_tokens > fit:
        raise PlanError(f"--update-tokens {update_tokens:,} needs {gib(update_tokens * token + head)} but "
                        f"{gib(work)} is left for the update; lower --update-tokens, or set it to 0 for "
                        f"the plan's {fit:,}.")
    row = math.ceil(shape.vocab * 4 * LOGIT_COPIES / per_position)
    generation, update = int((work - chat) // per_position), int(update_tokens or fit)
    if need is not None:
        generation = min(generation, max(rows * (length + row) for rows, length in need.generation))
        chat = min(chat, need.chat_positions * position)
        update = update_tokens or min(fit, need.update_tokens)
        work = max(generation * per_position + chat, update * token + head)
        fixed = weights_bytes + state_bytes
        wanted = max(MARGIN_MIN_BYTES, int(MARGIN_SHARE * (fixed + work))) if margin_bytes is None else margin_bytes
        total_bytes = min(total_bytes, fixed + wanted + work)
        margin = total_bytes - fixed - work  # under the cap: at least the margin the cap's plan kept
    return MemoryPlan(device, total_bytes, weights_bytes, state_bytes, margin, position, layer, row, token, head,
                      generation, chat, update, by_need=need is not None,
                      update_limit=int(fit) if need is not None and not update_tokens else 0)


def gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """'24GiB', '80 GB', '512MiB' -> bytes (GB = 10^9, GiB = 2^30)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b)\s*", text.lower())
    if not m or m.group(2) not in UNITS:
        raise PlanError(f"--gpu-memory expects a size such as 24GiB or 80GB, not {text!r}.")
    return int(float(m.group(1)) * UNITS[m.group(2)])


def out_of_memory(error: BaseException) -> bool:
    """Whether an error is the device (or the CPU allocator) running out of memory."""
    import torch
    return isinstance(error, torch.cuda.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and any(s in str(error) for s in ("out of memory", "can't allocate memory")))


def free_bytes(device) -> int:
    """Memory not yet taken: the GPU's free memory plus what torch holds cached but unused; on a
    CPU the available RAM, shared by the processes of this machine (torchrun)."""
    import torch
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return meminfo("MemAvailable", "SC_AVPHYS_PAGES") // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def meminfo(field: str, pages: str) -> int:
    """A /proc/meminfo field in bytes (else sysconf's page count of the same)."""
    text = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    m = re.search(rf"{field}:\s+(\d+) kB", text)
    return int(m.group(1)) * 1024 if m else os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")


def ram_bytes() -> int:
    """This machine's RAM, shared by the processes of this machine (torchrun)."""
    return meminfo("MemTotal", "SC_PHYS_PAGES") // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def model_bytes(model, device) -> int:
    """What the loaded model takes: the GPU's allocated memory, or on a CPU its tensors' bytes."""
    import torch
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    tensors = {t.data_ptr(): t.nbytes for t in [*model.parameters(), *model.buffers()]}  # tied once
    return sum(tensors.values())
