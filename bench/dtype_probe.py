"""What `--dtype auto`'s probe estimates on this CPU, part by part, to hold against an iteration
the run measures (metrics.jsonl's time_design_s, time_play_s, time_update_s).

    python bench/dtype_probe.py                    # the cpu preset's model and workload
    python bench/dtype_probe.py -- --preset cpu --designs-per-iteration 4

For each dtype it builds the probe's models (the run's architecture and widths, random weights,
1 and 3 layers, extrapolated to the real depth as spade_mini/policy/dtypes.py does) and prints:
each generation phase as the probe counts it (a decode of PROBE_NEW tokens after a
PROBE_PROMPT-token prompt, divided by PROBE_NEW and multiplied by the phase's new tokens, so the
prompt pass is counted once per PROBE_NEW tokens), the same phase split into its prompt pass once
and its decode steps, and the update. Everything after `--` goes to train.py's flag parser.
"""
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from spade_mini.cli import main_config  # noqa: E402
from spade_mini.policy.decoding import decode  # noqa: E402
from spade_mini.policy.dtypes import (PROBE_LAYERS, PROBE_NEW, PROBE_PROMPT, PROBE_UPDATE_LEN,  # noqa: E402
                                      Workload, probe_model)
from spade_mini.policy.logprobs import Sampling  # noqa: E402
from spade_mini.policy.models import checkpoint  # noqa: E402


def parts(model_config, dtype: torch.dtype, workload: Workload) -> dict[str, float]:
    """Seconds of each part at the model's depth, from models of PROBE_LAYERS layers."""
    measured: dict[str, list[float]] = {}
    vocab, sampling = model_config.vocab_size, Sampling(0.6, 20, 0.95)
    for layers in PROBE_LAYERS:
        model = probe_model(model_config, dtype, layers)
        for rows, new in workload.phases:
            prompts = torch.randint(3, vocab, (rows, PROBE_PROMPT)).tolist()
            decode(model, prompts[:1], 2, sampling, set(), 0)  # warm-up
            with torch.no_grad():
                start = time.perf_counter()
                decode(model, prompts, 1, sampling, set(), 0)
                first = time.perf_counter() - start
                start = time.perf_counter()
                decode(model, prompts, 1 + PROBE_NEW, sampling, set(), 0)
                step = (time.perf_counter() - start - first) / PROBE_NEW
            name = f"generate {rows} rows x {new} tokens"
            measured.setdefault(f"{name}, as the probe counts it", []).append((first + (PROBE_NEW - 1) * step) / PROBE_NEW * new)
            measured.setdefault(f"{name}: the prompt pass once", []).append(first - step)
            measured.setdefault(f"{name}: the decode steps", []).append(step * new)
        ids = torch.randint(3, vocab, (workload.update_rows, PROBE_UPDATE_LEN))
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        for _ in range(2):  # the first pass warms up
            start = time.perf_counter()
            model(inputs_embeds=embeds, use_cache=False).logits.float().logsumexp(-1).mean().backward()
            seconds = time.perf_counter() - start
        measured.setdefault(f"update of {workload.update_tokens} tokens", []).append(
            seconds / (workload.update_rows * PROBE_UPDATE_LEN) * workload.update_tokens)
        del model
    (la, lb), depth = PROBE_LAYERS, model_config.num_hidden_layers
    return {name: a + max(0.0, (b - a) / (lb - la)) * (depth - la) for name, (a, b) in measured.items()}


def main() -> int:
    from transformers import AutoConfig
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    cfg = main_config(extra if "--preset" in extra else ["--preset", "cpu", *extra], prog="bench/dtype_probe.py")
    if cfg.model == "tiny":
        raise SystemExit("bench/dtype_probe.py measures a real model's widths: pass a built-in --model, not tiny.")
    model_config = AutoConfig.from_pretrained(checkpoint(cfg.model, cfg.cache_dir))
    workload = Workload.of(cfg)
    print(f"{cfg.model}, {torch.get_num_threads()} threads; workload {workload}")
    for dtype in (torch.bfloat16, torch.float32):
        found = parts(model_config, dtype, workload)
        probed = sum(v for k, v in found.items() if "as the probe" in k or k.startswith("update"))
        print(f"\n{dtype}: the probe's estimate {probed:.1f} s")
        for name, seconds in found.items():
            print(f"  {name}: {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
