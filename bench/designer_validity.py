"""How often does the warm-started designer write a valid environment, and where do the others
fail? Designs a batch per skill as train.py's first iteration does and counts validation stages.

    python bench/designer_validity.py                              # 16 designs, cpu-smoke
    python bench/designer_validity.py --designs 32 -- --warm-start-steps 48 --warm-start-designs 4
    python bench/designer_validity.py -- --preset cpu --design-levels false   # the prompt without levels

The policy is loaded and warm-started as train.py does (from the warm-start cache, built first
when it does not hold this warm start); the memory is seeded with the preset's example tier and
the designs are validated exactly as in training (`design_environments`, duplicates included).
Everything after `--` goes to train.py's flag parser (the preset defaults to cpu-smoke).
`--samples FILE` writes each design's reply and reasons as a JSON line; `--json FILE` the counts.
"""
import argparse
import collections
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from spade_mini import warmstart  # noqa: E402
from spade_mini.cli import main_config  # noqa: E402
from spade_mini.designer import Corpus, Memory, design_environments, skills_for  # noqa: E402
from spade_mini.envs import STAGES, TIERS  # noqa: E402
from spade_mini.policy import load_policy  # noqa: E402
from spade_mini.run.planning import fit_plan  # noqa: E402
from spade_mini.sandbox import SandboxLimits  # noqa: E402

LADDER = ("no_code", *STAGES, "duplicate")


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8, help="designs per generate call")
    parser.add_argument("--samples", type=Path)
    parser.add_argument("--json", type=Path, help="also write the counts by stage here (bench/model_menu.py reads it)")
    args = parser.parse_args(argv)
    cfg = main_config(extra if "--preset" in extra else ["--preset", "cpu-smoke", *extra],
                      prog="bench/designer_validity.py")
    torch.manual_seed(cfg.seed)
    policy = load_policy(cfg)
    fit_plan(policy, cfg)
    corpus = None if cfg.no_corpus else Corpus.load(cfg.corpus, cfg.corpus_max_words)
    rows = warmstart.warm_start(policy, cfg, corpus) if cfg.warm_start_steps > 0 else []
    if rows:
        print(f"warm start: {len(rows)} steps, last designer NLL {rows[-1]['designer_nll']:.3f}, "
              f"agent NLL {rows[-1]['agent_nll']:.3f}")
    memory = Memory.seeded(TIERS[cfg.examples][0])
    skills = skills_for(cfg.setting, cfg.skills or None)
    rng, t0, designs = random.Random(cfg.seed), time.time(), []
    for start in range(0, args.designs, args.batch):
        batch = [skills[(start + i) % len(skills)] for i in range(min(args.batch, args.designs - start))]
        designs += design_environments(
            policy, batch, corpus, memory, rng, max_new_tokens=cfg.design_max_new_tokens,
            temperature=cfg.temperature, iteration=0, limits=SandboxLimits(), first_slot=start,
            references=cfg.memory_references, require_solution=cfg.require_solution,
            min_instances=cfg.plays_per_design, levels=cfg.design_levels)
        print(f"designed {len(designs)}/{args.designs} ({time.time() - t0:.0f} s)", flush=True)
    stages = collections.Counter(d.stage for d in designs)
    cut = sum(not d.completion.finished for d in designs)
    print(f"\n| stage | designs |\n|---|---|")
    for stage in LADDER:
        if stages[stage]:
            print(f"| {stage} | {stages[stage]} |")
    print(f"\nvalid {stages['valid']}/{len(designs)}, cut at {cfg.design_max_new_tokens} tokens: {cut}")
    if args.json:
        args.json.write_text(json.dumps({"model": cfg.model, "designs": len(designs), "cut": cut,
                                         "seconds": round(time.time() - t0), "budget": cfg.design_max_new_tokens,
                                         "stages": {stage: stages[stage] for stage in LADDER}}))
    if args.samples:
        with args.samples.open("w", encoding="utf-8") as f:
            for d in designs:
                f.write(json.dumps({"skill": d.skill.key, "stage": d.stage, "reasons": d.reasons,
                                    "reply": d.completion.text}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
