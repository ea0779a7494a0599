"""`--dtype auto` on a CPU: bfloat16 only where this CPU computes it faster, measured.

A CPU with bfloat16 matrix units (Intel AMX, or AVX-512 BF16) can run a model in bf16 at
several times its float32 speed, but not at every shape: on the 2-core Xeon this project is
developed on, SmolLM2-135M decodes 5x SLOWER in bf16 at batch 1 and 1.6x faster at batch 8. So
the choice is measured on the run's own workload, not assumed from the flags:

    workload   what one design iteration asks of the model, from the run's sizes: each generation
               phase as rows x (prompt tokens, new tokens) x calls, and the tokens (prompts and
               replies) the update scores and differentiates
    probe      a model of the run's architecture and widths with random weights and 1 and 3
               layers, built in float32 and in bfloat16; each times every phase's prompt pass at
               the phase's batch and prompt length and its decode steps at its batch (the
               project's own `decoding.decode`), and a forward and backward pass of an update
               micro-batch, each the fastest of two. Per-layer cost (3 layers minus 1) scales to
               the real depth.
    choice     the dtype whose design iteration (each phase's calls x (prompt pass + new tokens x
               decode step), and the update's tokens x seconds per token) is shorter

The answer is cached per CPU model, torch version, architecture and workload in the model cache
(`dtype-choices.json`), so a run measures once. A CPU without bf16 units gets float32 unmeasured,
and so does a GPU get bfloat16 (load.py). LoRA adapters and their optimizer state stay float32
whatever the base weights are (peft keeps adapters in float32; test_model.py checks both).

Omitted on purpose: float16 (no CPU matrix units for it here) and per-phase dtypes.
"""
from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from spade_mini.shape import Shape

PROBE_NEW = 16         # decode steps each probe times
# Decode steps are timed after a prompt of STEP_PROMPT tokens: a step of the 1.5B costs about the same
# after 64 cached tokens as after 840 (0.23 and 0.25 s at 8 rows, measured on the Xeon), and after a
# long prompt they are a small difference of two large, noisy times (timed there, the probe said
# 1,031 s for a design iteration the Xeon runs in about 510).
STEP_PROMPT = 64
PROBE_REPEATS = 2      # each time is the fastest of this many
PROBE_UPDATE_LEN = 256  # tokens of each row of the probe's update micro-batch
PROBE_LAYERS = (1, 3)  # depths timed; the difference is two layers' cost
# Typical prompt lengths in tokens, MEASURED with the 1.5B's tokenizer on the cpu preset's prompts
# (tests/test_dtypes.py checks that the prompts have not drifted far from them): the designer's
# prompt with a 60-word document and no memory reference 815-848 (round four's designs, whose
# memory held 0 or 1 reference: mean 837); an agent's first turn 82-104 on the starter examples,
# about 63 on round four's designs; a hint's prompt: the design's source and its instructions
# (HINT_INSTRUCTION_TOKENS: an estimate, not measured).
DESIGN_PROMPT_TOKENS = 840
TURN_PROMPT_TOKENS = 80
HINT_INSTRUCTION_TOKENS = 200


class Phase(NamedTuple):
    """Generation calls of one phase: `calls` of `rows` chats, each `prompt` tokens plus `new`."""
    rows: int
    prompt: int
    new: int
    calls: int


@dataclass(frozen=True)
class Workload:
    """One design iteration's work: its generation phases, and the update's tokens scored in
    micro-batches of `update_rows` rows."""
    phases: tuple[Phase, ...]
    update_tokens: int
    update_rows: int

    @classmethod
    def of(cls, cfg) -> "Workload":
        """ESTIMATES from the run's flags (its Shape, shape.py), for an iteration in which the
        designer runs (with the active pool most iterations only play and update: about
        `--design-every` times cheaper; with `--pool-fill examples` no iteration designs). The
        designer writes its `design_cap` attempts in calls of N rows, the last one shorter, and
        the valid ones it stops at are played K times in both arms; the rest of the no-hint
        budget replays the pool; an episode is one turn at the typical prompt length. The
        update scores every no-hint turn, every valid design and the `--invalid-update-fraction`
        of the invalid ones, prompt and reply."""
        shape = Shape.of(cfg)
        turn = lambda rows: Phase(rows, TURN_PROMPT_TOKENS, cfg.turn_max_new_tokens, 1)  # noqa: E731
        update = shape.no_hint_episodes * (TURN_PROMPT_TOKENS + cfg.turn_max_new_tokens)
        if cfg.pool_fill == "examples" or shape.slots == 0:
            return cls((turn(shape.no_hint_episodes),), update, max(1, cfg.micro_batch))
        design, valid = (DESIGN_PROMPT_TOKENS, cfg.design_max_new_tokens), shape.valid_designs()
        paired, rest = shape.play_rows(valid)
        calls = shape.design_calls()  # rows of each call
        phases = [Phase(rows, *design, calls.count(rows)) for rows in sorted(set(calls), reverse=True)]
        phases += [turn(paired), turn(rest)]
        if cfg.hint_source == "policy":  # the hint prompt holds a design's source
            phases.append(Phase(valid, cfg.design_max_new_tokens + HINT_INSTRUCTION_TOKENS, cfg.hint_max_new_tokens, 1))
        scored = valid + math.ceil((shape.design_cap - valid) * cfg.invalid_update_fraction)
        update += scored * sum(design)
        return cls(tuple(p for p in phases if p.rows and p.calls), update, max(1, cfg.micro_batch))


def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 matrix units (the kernel's cpuinfo flags)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f" {flag}" in flags for flag in ("amx_bf16", "avx512_bf16"))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def choose_cpu_dtype(model_config, workload: Workload, cache_dir: str | None, say=print) -> torch.dtype:
    """float32 or bfloat16 for this run on this CPU (module docstring); the choice is said once."""
    if not cpu_has_bf16():
        say("dtype auto: float32 (this CPU has no bfloat16 matrix units, so bf16 is emulated: slower "
            "at every batch the update uses)", flush=True)
        return torch.float32
    key = json.dumps({"cpu": cpu_name(), "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "model": model_config.to_diff_dict(), "workload": asdict(workload)}, sort_keys=True, default=str)
    store = Path(os.path.expanduser(cache_dir)) / "dtype-choices.json" if cache_dir else None
    known = _read(store)
    if key not in known:
        seconds = {name: iteration_seconds(model_config, dtype, workload)
                   for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}
        known[key] = seconds
        _write(store, known)
        cached = ""
    else:
        seconds, cached = known[key], " (cached)"
    name = min(seconds, key=seconds.get)
    say(f"dtype auto: {name}; a design iteration's generation and update probed at {seconds['float32']:.1f} s in "
        f"float32 and {seconds['bfloat16']:.1f} s in bfloat16 on this CPU{cached}", flush=True)
    return getattr(torch, name)


def iteration_seconds(model_config, dtype: torch.dtype, workload: Workload) -> float:
    """The probe: seconds of one design iteration's generation and update at `dtype`."""
    return sum(probe_parts(model_config, dtype, workload).values())


def probe_parts(model_config, dtype: torch.dtype, workload: Workload) -> dict[str, float]:
    """Seconds of each part of an iteration at the config's depth: each phase's prompt passes and
    decode steps, and the update; extrapolated from models of PROBE_LAYERS layers."""
    (la, lb), depth = PROBE_LAYERS, model_config.num_hidden_layers
    a, b = (_probe(model_config, dtype, workload, layers) for layers in PROBE_LAYERS)
    # a part timed faster with 3 layers than with 1 (noise) adds nothing per layer
    return {name: a[name] + max(0.0, (b[name] - a[name]) / (lb - la)) * (depth - la) for name in a}


def probe_model(model_config, dtype: torch.dtype, layers: int):
    """A model of the config's architecture and widths with `layers` layers and random weights."""
    from transformers import AutoModelForCausalLM
    values = {**model_config.to_dict(), "num_hidden_layers": layers}
    if values.get("layer_types"):
        values["layer_types"] = values["layer_types"][:layers]
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(model_config.__class__.from_dict(values), dtype=dtype).eval()


def _probe(model_config, dtype: torch.dtype, workload: Workload, layers: int) -> dict[str, float]:
    from spade_mini.policy.decoding import decode
    from spade_mini.policy.logprobs import Sampling
    model = probe_model(model_config, dtype, layers)
    vocab = model_config.vocab_size
    sampling = Sampling(0.6, 20, 0.95)
    parts = {}
    for i, (rows, prompt, new, calls) in enumerate(workload.phases):
        prompts = torch.randint(3, vocab, (rows, prompt)).tolist()
        short = [p[:STEP_PROMPT] for p in prompts]
        go = lambda chats, tokens: decode(model, chats, tokens, sampling, set(), 0)  # noqa: E731
        go(short[:1], 2)  # warm-up: first-call allocations are not speed
        with torch.no_grad():  # a step: the difference of two decodes after a short prompt
            step = max(0.0, _fastest(lambda: go(short, 1 + PROBE_NEW)) - _fastest(lambda: go(short, 1))) / PROBE_NEW
            first = _fastest(lambda: go(prompts, 1))  # the prompt pass and one step
        name = f"phase {i}: {calls} x generate {rows} rows of {prompt} + {new} tokens"
        parts[f"{name}: prompt passes"] = calls * max(0.0, first - step)
        parts[f"{name}: decode steps"] = calls * step * new
    rows = workload.update_rows
    ids = torch.randint(3, vocab, (rows, PROBE_UPDATE_LEN))
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)

    def backward():
        model(inputs_embeds=embeds, use_cache=False).logits.float().logsumexp(-1).mean().backward()
    backward()  # warm-up
    parts[f"update of {workload.update_tokens} tokens"] = \
        _fastest(backward) / (rows * PROBE_UPDATE_LEN) * workload.update_tokens
    return parts


def _fastest(run, repeats: int = PROBE_REPEATS) -> float:
    """Seconds of the fastest of `repeats` calls of `run` (noise only ever adds time)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _read(store: Path | None) -> dict:
    try:
        return json.loads(store.read_text()) if store and store.is_file() else {}
    except (OSError, ValueError):
        return {}


def _write(store: Path | None, known: dict) -> None:
    if store is None:
        return
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = store.with_name(f".{store.name}.{os.getpid()}")
        tmp.write_text(json.dumps(known, indent=1))
        os.replace(tmp, store)
    except OSError:
        pass  # a cache that cannot be written only costs the next run a measurement
