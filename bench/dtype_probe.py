"""What `--dtype auto`'s probe estimates on this CPU, part by part, to hold against a design
iteration the run measures (metrics.jsonl's time_design_s, time_play_s, time_update_s).

    python bench/dtype_probe.py                    # the cpu preset's model and workload
    python bench/dtype_probe.py -- --preset cpu --designs-per-iteration 4

For each dtype it runs the probe of spade_mini/policy/dtypes.py (the run's architecture and
widths, random weights, 1 and 3 layers, extrapolated to the real depth) and prints its estimate
and each part: every generation phase's prompt passes and decode steps, and the update.
Everything after `--` goes to train.py's flag parser.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from spade_mini.cli import main_config  # noqa: E402
from spade_mini.policy.dtypes import Workload, probe_parts  # noqa: E402
from spade_mini.policy.models import checkpoint  # noqa: E402


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
        found = probe_parts(model_config, dtype, workload)
        print(f"\n{dtype}: the probe's estimate {sum(found.values()):.1f} s")
        for name, seconds in found.items():
            print(f"  {name}: {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
