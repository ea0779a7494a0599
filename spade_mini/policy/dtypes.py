"""`--dtype auto` on a CPU: bfloat16 only where this CPU computes it faster, measured.

A CPU with bfloat16 matrix units (Intel AMX, or AVX-512 BF16) can run a model in bf16 at
several times its float32 speed, but not at every shape: on the 2-core Xeon this project is
developed on, SmolLM2-135M decodes 5x SLOWER in bf16 at batch 1 and 1.6x faster at batch 8. So
the choice is measured on the run's own workload, not assumed from the flags:

    workload   what one iteration asks of the model, from the run's sizes: each generation phase
               as (rows, new tokens per row), and the tokens the update scores and differentiates
    probe      a model of the run's architecture and widths with random weights and 1 and 3
               layers, built in float32 and in bfloat16; each times a decode of every phase's
               batch (the project's own `decoding.decode`) and a forward and backward pass of an
               update micro-batch. Per-layer cost (3 layers minus 1) scales to the real depth.
    choice     the dtype whose iteration (each phase's seconds per token x its tokens) is shorter

The answer is cached per CPU model, torch version, architecture and workload in the model cache
(`dtype-choices.json`), so a run measures once. A CPU without bf16 units gets float32 unmeasured,
and so does a GPU get bfloat16 (load.py). LoRA adapters and their optimizer state stay float32
whatever the base weights are (peft keeps adapters in float32; test_model.py checks both).

Omitted on purpose: float16 (no CPU matrix units for it here) and per-phase dtypes.
"""
from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

PROBE_PROMPT = 64      # tokens of each probe prompt
PROBE_NEW = 8          # tokens each probe decode draws
PROBE_UPDATE_LEN = 256  # tokens of each row of the probe's update micro-batch
PROBE_LAYERS = (1, 3)  # depths timed; the difference is two layers' cost


@dataclass(frozen=True)
class Workload:
    """One iteration's work: generation phases as (rows, new tokens per row), and update tokens
    scored in micro-batches of `update_rows` rows."""
    phases: tuple[tuple[int, int], ...]
    update_tokens: int
    update_rows: int

    @classmethod
    def of(cls, cfg) -> "Workload":
        """ESTIMATES from the run's flags: each design's prompt about as long as its reply, one agent
        turn per episode (fixed pool: the no-hint arm only, no designs)."""
        n, k = cfg.designs_per_iteration, cfg.plays_per_design
        episodes = n * k * (1 if cfg.fixed_pool else 2)
        phases = [(episodes, cfg.turn_max_new_tokens)]
        update = n * k * 2 * cfg.turn_max_new_tokens
        if not cfg.fixed_pool:
            phases.append((n, cfg.design_max_new_tokens))
            update += n * 2 * cfg.design_max_new_tokens
            if cfg.hint_source == "policy":
                phases.append((n, cfg.hint_max_new_tokens))
        return cls(tuple(phases), update, max(1, cfg.micro_batch))


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
    say(f"dtype auto: {name}; an iteration's generation and update measured at {seconds['float32']:.1f} s in "
        f"float32 and {seconds['bfloat16']:.1f} s in bfloat16 on this CPU{cached}", flush=True)
    return getattr(torch, name)


def iteration_seconds(model_config, dtype: torch.dtype, workload: Workload) -> float:
    """The probe: seconds of one iteration's generation and update at `dtype`, extrapolated from
    models of PROBE_LAYERS layers to the config's depth."""
    per_depth = [_probe(model_config, dtype, workload, layers) for layers in PROBE_LAYERS]
    (a, b), (la, lb) = per_depth, PROBE_LAYERS
    per_layer = max(0.0, (b - a) / (lb - la))
    return a + per_layer * (model_config.num_hidden_layers - la)


def probe_model(model_config, dtype: torch.dtype, layers: int):
    """A model of the config's architecture and widths with `layers` layers and random weights."""
    from transformers import AutoModelForCausalLM
    values = {**model_config.to_dict(), "num_hidden_layers": layers}
    if values.get("layer_types"):
        values["layer_types"] = values["layer_types"][:layers]
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(model_config.__class__.from_dict(values), dtype=dtype).eval()


def _probe(model_config, dtype: torch.dtype, workload: Workload, layers: int) -> float:
    from spade_mini.policy.decoding import decode
    from spade_mini.policy.logprobs import Sampling
    model = probe_model(model_config, dtype, layers)
    vocab = model_config.vocab_size
    sampling = Sampling(0.6, 20, 0.95)
    total = 0.0
    for rows, new in workload.phases:
        prompts = torch.randint(3, vocab, (rows, PROBE_PROMPT)).tolist()
        decode(model, prompts[:1], 2, sampling, set(), 0)  # warm-up: first-call allocations are not speed
        t0 = time.perf_counter()
        with torch.no_grad():
            decode(model, prompts, PROBE_NEW, sampling, set(), 0)
        total += (time.perf_counter() - t0) / PROBE_NEW * new  # a phase's decode steps at its batch
    rows = workload.update_rows
    ids = torch.randint(3, vocab, (rows, PROBE_UPDATE_LEN))
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    for repeat in range(2):  # the first pass warms up
        t0 = time.perf_counter()
        model(inputs_embeds=embeds, use_cache=False).logits.float().logsumexp(-1).mean().backward()
        update = time.perf_counter() - t0
    total += update / (rows * PROBE_UPDATE_LEN) * workload.update_tokens
    return total


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
