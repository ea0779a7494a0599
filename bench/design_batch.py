"""What a design costs at each size of a design call: seconds per design and per admitted one,
validity, and peak memory against the memory plan, every size in one process.

    python bench/design_batch.py --json bench/design_batch.json -- --preset cpu
    python bench/design_batch.py --sizes 2,4 --designs 4 -- --preset cpu-smoke   # a quick look

For each size (ascending, so each peak is its own: the resident peak only grows), the policy's
memory plan is made again for `--design-batch SIZE` (what train.py would plan), then `--designs`
designs are written in calls of SIZE rows, one attempt a slot, through the run's gate with an
archive that starts with the bundled environments and keeps every admitted design (as a run
does); the skills follow the preset's schedule. Sampling does not depend on the batch, so
validity is pooled over the sizes; the seconds are each size's own. Each design's reply goes to
`--samples` (one JSON line, `python bench/gate_rerun.py --files` re-gates them). The CPU is
named from `lscpu`, since these numbers belong to it.
"""
import argparse
import collections
import dataclasses
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from spade_mini.cli import main_config  # noqa: E402
from spade_mini.designer import Corpus, Memory, design_environments, skill_schedule, skills_for  # noqa: E402
from spade_mini.envs import MEMORY_ONLY, TIERS  # noqa: E402
from spade_mini.gate import Archive, describe  # noqa: E402
from spade_mini.policy import load_policy  # noqa: E402
from spade_mini.run.planning import fit_plan  # noqa: E402
from spade_mini.settings import design_settings, gate_settings  # noqa: E402

GIB = 2**30


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    flags = fields.get("Flags", "")
    units = [u for u in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if u in flags.split()]
    return f"{fields.get('Model name', '?').strip()} ({', '.join(units) or 'no AVX2'})"


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,16,32,64", help="rows a design call, comma separated")
    parser.add_argument("--designs", type=int, default=64, help="designs written at each size")
    parser.add_argument("--samples", type=Path, help="each design as a JSON line (appended)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    base = main_config(extra if "--preset" in extra else ["--preset", "cpu-smoke", *extra], prog="bench/design_batch.py")
    torch.manual_seed(base.seed)
    policy = load_policy(base)
    corpus = None if base.no_corpus else Corpus.load(base.corpus, base.corpus_max_words)
    shown = TIERS[base.examples][0] + MEMORY_ONLY[base.examples]
    memory = Memory.seeded(shown, shapes={e.name: describe(e.source, gate_settings(base)) for e in shown})
    archive, skills = Archive.bundled(), skills_for(base.setting, base.skills or None)
    rows, out = [], {"cpu": cpu_name(), "model": base.model, "designs_per_size": args.designs, "sizes": {}}
    for size in sizes:
        cfg = dataclasses.replace(base, design_batch=size, valid_designs=min(base.valid_designs, size))
        plan = fit_plan(policy, cfg)
        one_pass = dataclasses.replace(design_settings(cfg), until_valid=0, retries=0, cap=size)
        stages, t0 = collections.Counter(), time.time()
        for start in range(0, args.designs, size):
            rng = random.Random(f"{cfg.seed}-{size}-{start}")
            batch = skill_schedule(skills, start // size, min(size, args.designs - start), group=2)
            new = design_environments(policy, batch, corpus, memory, rng, one_pass, iteration=0, first_slot=start,
                                      archive=archive)
            stages.update(d.stage for d in new)
            rows += [{"size": size, "id": d.id, "skill": d.skill.key, "stage": d.stage, "reasons": d.reasons,
                      "finished": d.completion.finished, "reply": d.completion.text} for d in new]
        seconds = time.time() - t0
        out["sizes"][size] = {"seconds": round(seconds, 1), "seconds_per_design": round(seconds / args.designs, 2),
                              "valid": stages["valid"], "stages": dict(stages),
                              "seconds_per_admitted": round(seconds / stages["valid"], 1) if stages["valid"] else None,
                              "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                              "plan_gib": round(plan.total_bytes / GIB, 2)}
        print(f"size {size}: {out['sizes'][size]}", flush=True)
    valid = sum(s["valid"] for s in out["sizes"].values())
    out["pooled_valid"] = f"{valid}/{args.designs * len(sizes)}"
    cheapest = min(out["sizes"], key=lambda s: out["sizes"][s]["seconds_per_design"])
    out["cheapest_size"] = cheapest
    # what an hour of the designer's generation admits at the cheapest size (the gate refuses re-skins)
    out["admitted_per_designer_hour"] = round(valid / (args.designs * len(sizes)) * 3600
                                              / out["sizes"][cheapest]["seconds_per_design"], 2)
    print(f"\n{out['cpu']}; pooled valid {out['pooled_valid']}; cheapest per design: {cheapest} rows a call; "
          f"{out['admitted_per_designer_hour']} admitted an hour of generation")
    print("| rows a call | s / design | valid | s / admitted | peak RSS GiB | plan GiB |\n|---|---|---|---|---|---|")
    for size, s in out["sizes"].items():
        print(f"| {size} | {s['seconds_per_design']} | {s['valid']}/{args.designs} | {s['seconds_per_admitted']} | "
              f"{s['peak_rss_gib']} | {s['plan_gib']} |")
    if args.samples:
        with args.samples.open("a", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
