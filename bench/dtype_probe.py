"""What `--dtype auto`'s probe estimates on this CPU, part by part, to hold against a design
iteration the run measures (metrics.jsonl's time_design_s, time_play_s, time_update_s).

    python bench/dtype_probe.py                    # the cpu preset's model and workload
    python bench/dtype_probe.py -- --preset cpu --designs-per-iteration 4
    python bench/dtype_probe.py --against runs/NAME    # and the ratio to that run's design iterations

For each dtype the rule may choose on this CPU (bfloat16 only where it has bf16 units: elsewhere
bf16 is emulated, a pass takes minutes, and the rule takes float32 unprobed) it runs the probe
of spade_mini/policy/dtypes.py (the run's architecture and widths, random weights, 1 and 3
layers, extrapolated to the real depth) and prints its estimate
and each part: every generation phase's prompt passes and decode steps, and the update.
`--against RUN` then reads RUN/metrics.jsonl and prints, for each iteration where the designer
ran, its measured seconds (design, hint, play and update) and estimate / measured for each dtype
(the run says at its start which dtype it chose: its "dtype auto:" line). The probe's goal is
within 1.5x. Give the same flags after `--` that the run had, so the workload is the run's.
Everything after `--` goes to train.py's flag parser.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from spade_mini.cli import main_config  # noqa: E402
from spade_mini.policy.dtypes import Workload, cpu_has_bf16, cpu_name, probe_parts  # noqa: E402
from spade_mini.policy.models import checkpoint  # noqa: E402

WITHIN = 1.5  # the probe's goal: its estimate within this factor of a measured design iteration


def design_iterations(run: Path) -> list[tuple[int, float]]:
    """(iteration, measured seconds of design, hint, play and update) for each iteration of the run
    where the designer ran; one sentence naming the fix when the run cannot answer."""
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        raise SystemExit(f"{run} has no metrics.jsonl: pass a run directory train.py wrote (`make train` writes "
                         f"runs/<name>).")
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    found = [(row["iteration"], sum(row[f"time_{part}_s"] for part in ("design", "hint", "play", "update")))
             for row in rows if row.get("designs")]
    if not found:
        raise SystemExit(f"{metrics} has no iteration where the designer ran: run one first (`make train` designs "
                         f"in its iteration 0).")
    return found


def main() -> int:
    from transformers import AutoConfig
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, metavar="RUN", help="a run directory: estimate / measured per design iteration")
    args = parser.parse_args(argv)
    measured = design_iterations(args.against) if args.against else []  # a bad path fails before the probe's minutes
    cfg = main_config(extra if "--preset" in extra else ["--preset", "cpu", *extra], prog="bench/dtype_probe.py")
    if cfg.model == "tiny":
        raise SystemExit("bench/dtype_probe.py measures a real model's widths: pass a built-in --model, not tiny.")
    model_config = AutoConfig.from_pretrained(checkpoint(cfg.model, cfg.cache_dir))
    workload = Workload.of(cfg)
    print(f"{cfg.model} on {cpu_name()}, {torch.get_num_threads()} threads; workload {workload}")
    estimates, dtypes = {}, (torch.bfloat16, torch.float32)
    if not cpu_has_bf16():  # bf16 is emulated here, minutes a pass: the rule takes float32 unprobed
        print("no bf16 units (amx_bf16, avx512_bf16) on this CPU: --dtype auto takes float32 without a probe, "
              "so only float32 is timed")
        dtypes = (torch.float32,)
    for dtype in dtypes:
        found = probe_parts(model_config, dtype, workload)
        estimates[str(dtype).removeprefix("torch.")] = total = sum(found.values())
        print(f"\n{dtype}: the probe's estimate {total:.1f} s")
        for name, seconds in found.items():
            print(f"  {name}: {seconds:.1f} s")
    if measured:
        print(f"\nagainst {args.against}: design iterations "
              + ", ".join(f"{iteration}: {seconds:.1f} s" for iteration, seconds in measured))
        for name, estimate in estimates.items():
            ratios = [estimate / seconds for _, seconds in measured]
            inside = all(1 / WITHIN <= ratio <= WITHIN for ratio in ratios)
            print(f"  {name}: estimate / measured {min(ratios):.2f}-{max(ratios):.2f}x "
                  f"({'within' if inside else 'NOT within'} {WITHIN}x of every one)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
