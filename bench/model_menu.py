"""Numbers to choose a built-in model by: speed per dtype, one iteration by phase, memory, designer
validity and tier solve rates, each measured through the project's own code at the cpu preset.

    python bench/model_menu.py                                   # every built-in model
    python bench/model_menu.py --models qwen-coder-0.5b --steps speed,rates
    python bench/model_menu.py --table-only                      # print the table from what is there

Per model, each step runs as its own process and writes its result into --out (a step whose file
is there is skipped, so a stopped run continues where it stopped):

    speed      bench/bench_model.py at float32 and bfloat16: tokens per second at batch 1 and 8
               through `generate` and `continue_chats`, and that process's peak resident memory
    iteration  train.py --preset cpu --model M --iterations 1: seconds per phase, peak memory
    validity   bench/designer_validity.py --designs 32: where the designs stopped in validation
    rates      bench/starter_rates.py --episodes 16: the tier's solve rates without and with hints

The table is markdown; the collected results are also written as JSON (--summary). Flags after
`--` go to every train.py-style command (e.g. `-- --turn-max-new-tokens 32`).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spade_mini.policy import MODELS  # noqa: E402

STEPS = ("speed", "iteration", "validity", "rates")
DTYPES = ("float32", "bfloat16")


def run(cmd: list[str], log: Path) -> bool:
    with open(log, "w") as out:
        code = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        print(f"  failed ({code}): see {log}", flush=True)
    return code == 0


def step(model: str, name: str, out: Path, extra: list[str], args) -> None:
    py = sys.executable
    preset = ["--preset", args.preset, "--model", model, *extra]
    if name == "speed":
        for dtype in DTYPES:
            target = out / f"{model}-speed-{dtype}.json"
            if target.is_file():
                continue
            log = out / f"{model}-speed-{dtype}.log"
            if run([py, "bench/bench_model.py", "--model", model, "--dtype", dtype], log):
                target.write_text(log.read_text().strip().splitlines()[-1])
    elif name == "iteration":
        target = out / f"{model}-iteration.json"
        run_dir = out / "runs"
        if not target.is_file() and run([py, "train.py", *preset, "--iterations", "1", "--eval-every", "0",
                                         "--run-dir", str(run_dir), "--name", f"{model}-iteration"],
                                        out / f"{model}-iteration.log"):
            metrics = (run_dir / f"{model}-iteration" / "metrics.jsonl").read_text().splitlines()
            target.write_text(metrics[-1])
    elif name == "validity":
        target = out / f"{model}-validity.json"
        if not target.is_file():
            run([py, "bench/designer_validity.py", "--designs", str(args.designs), "--json", str(target),
                 "--samples", str(out / f"{model}-designs.jsonl"), "--", *preset], out / f"{model}-validity.log")
    elif name == "rates":
        target = out / f"{model}-rates.json"
        if not target.is_file():
            run([py, "bench/starter_rates.py", "--set", "starter", "--episodes", str(args.episodes), "--json",
                 str(target), "--", *preset], out / f"{model}-rates.log")


def read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def collect(models: list[str], out: Path) -> dict:
    return {m: {"speed": {d: read(out / f"{m}-speed-{d}.json") for d in DTYPES},
                "iteration": read(out / f"{m}-iteration.json"), "validity": read(out / f"{m}-validity.json"),
                "rates": read(out / f"{m}-rates.json")} for m in models}


def table(results: dict) -> str:
    lines = ["| model | dtype | generate b1 / b8 tok/s | continue_chats b1 / b8 tok/s | peak GiB (speed) |",
             "|---|---|---|---|---|"]
    for model, r in results.items():
        for dtype, s in r["speed"].items():
            if s:
                lines.append(f"| {model} | {dtype} | {s['generate_b1']:.1f} / {s['generate_b8']:.1f} "
                             f"| {s['continue_chats_b1']:.1f} / {s['continue_chats_b8']:.1f} | {s['peak_gib']:.1f} |")
    lines += ["", "| model | iteration s (design / play / update) | peak GiB | valid / designs | stages | "
              "cut at budget | no hint | hint | in 0.10-0.60 | hints help |", "|---|---|---|---|---|---|---|---|---|---|"]
    for model, r in results.items():
        it, v, rates = r["iteration"], r["validity"], r["rates"]
        it_text = (f"{it['time_total_s']:.0f} ({it['time_design_s']:.0f} / {it['time_play_s']:.0f} / "
                   f"{it['time_update_s']:.0f})" if it else "-")
        peak = f"{it['peak_memory_mb'] / 1024:.1f}" if it else "-"
        if v:
            stages = ", ".join(f"{k} {n}" for k, n in v["stages"].items() if n and k != "valid")
            valid, cut = f"{v['stages']['valid']} / {v['designs']}", f"{v['cut']} (of {v['budget']})"
        else:
            stages = valid = cut = "-"
        if rates:
            rows = rates["rows"]
            mean = lambda key: sum(x[key] for x in rows) / len(rows)  # noqa: E731
            band = sum(0.1 <= x["no_hint"] <= 0.6 for x in rows)
            helps = sum(x["hint"] > x["no_hint"] for x in rows)
            rate_text = f"{mean('no_hint'):.2f} | {mean('hint'):.2f} | {band}/{len(rows)} | {helps}/{len(rows)}"
        else:
            rate_text = "- | - | - | -"
        lines.append(f"| {model} | {it_text} | {peak} | {valid} | {stages} | {cut} | {rate_text} |")
    return "\n".join(lines)


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--designs", type=int, default=32)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "model_menu")
    parser.add_argument("--summary", type=Path, default=None, help="also write the collected results here (JSON)")
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if unknown := [m for m in models if m not in MODELS]:
        parser.error(f"unknown model {unknown[0]!r}; choose from {', '.join(MODELS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for model in models:
            for name in [s for s in args.steps.split(",") if s]:
                print(f"{model}: {name}", flush=True)
                step(model, name, args.out, extra, args)
    results = collect(models, args.out)
    if args.summary:
        args.summary.write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
