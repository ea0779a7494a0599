"""How often does the warm-started designer write a valid environment, and where do the others
fail? Designs a batch per skill as train.py's first iteration does and counts validation stages.

    python bench/designer_validity.py                              # 16 designs, cpu-smoke
    python bench/designer_validity.py --designs 32 -- --warm-start-steps 48 --warm-start-designs 4
    python bench/designer_validity.py -- --preset cpu --design-levels false   # the prompt without levels

The policy is loaded and warm-started as train.py does (from the warm-start cache, built first
when it does not hold this warm start); the memory is seeded with the preset's example tier and
the designs are validated exactly as in training (`design_environments`, duplicates included).
Everything after `--` goes to train.py's flag parser (the preset defaults to cpu-smoke).
`--json FILE` writes the counts. `--samples FILE` writes each design (stage, reasons, reply) as a
JSON line after every batch, and a second run with the same file CONTINUES it up to `--designs`:
each batch draws its skills, documents and samples from (seed, first slot), so a run stopped and
continued writes what one uninterrupted run writes, and a long measurement spans sittings:

    python bench/designer_validity.py --designs 700 --batch 16 --samples bench/validity/levels.jsonl -- --preset cpu
    python bench/designer_validity.py --designs 700 --batch 16 --samples bench/validity/plain.jsonl -- --preset cpu --design-levels false
    python bench/designer_validity.py --compare bench/validity/levels.jsonl bench/validity/plain.jsonl

`--compare A B` prints each file's valid fraction and the ratio A/B with its 95% interval
(`ratio_interval`): "A cuts validity by at most a third" holds when the interval's low end is
above 2/3. About 700 designs a prompt see that at a valid fraction near 0.1.
"""
import argparse
import collections
import dataclasses
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
from spade_mini.designer import Corpus, Memory, design_environments, extract_code, skills_for  # noqa: E402
from spade_mini.envs import MEMORY_ONLY, TIERS  # noqa: E402
from spade_mini.evaluation.intervals import interval, paired_delta, ratio_interval  # noqa: E402
from spade_mini.policy import load_policy  # noqa: E402
from spade_mini.run.planning import fit_plan  # noqa: E402
from spade_mini.gate import Archive, describe  # noqa: E402
from spade_mini.reward.invalidity import INVALID_STAGES  # noqa: E402
from spade_mini.settings import design_settings, gate_settings  # noqa: E402

LADDER = (*INVALID_STAGES, "valid")  # every stage a design can end at, lowest first


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8, help="designs per generate call")
    parser.add_argument("--samples", type=Path)
    parser.add_argument("--prompt-layout", choices=("classic", "shared"), default="classic",
                        help="shared: the contract and example open every prompt (their keys and values computed once a call)")
    parser.add_argument("--json", type=Path, help="also write the counts by stage here (bench/model_menu.py reads it)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"),
                        help="no designing: the valid fraction of samples file A against B, with the ratio's interval")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    done = read_samples(args.samples) if args.samples and args.samples.exists() else []
    cfg = main_config(extra if "--preset" in extra else ["--preset", "cpu-smoke", *extra],
                      prog="bench/designer_validity.py")
    if len(done) >= args.designs:  # nothing to design: the counts of what the file holds
        print(f"{args.samples} already holds {len(done)} designs (--designs {args.designs}): nothing to design")
        return report(done, cfg, args)
    torch.manual_seed(cfg.seed)
    policy = load_policy(cfg)
    fit_plan(policy, cfg)
    corpus = None if cfg.no_corpus else Corpus.load(cfg.corpus, cfg.corpus_max_words)
    rows = warmstart.warm_start(policy, cfg, corpus) if cfg.warm_start_steps > 0 else []
    if rows:
        print(f"warm start: {len(rows)} steps, last designer NLL {rows[-1]['designer_nll']:.3f}, "
              f"agent NLL {rows[-1]['agent_nll']:.3f}")
    shown = TIERS[cfg.examples][0] + MEMORY_ONLY[cfg.examples]  # what a run's memory starts with
    memory = Memory.seeded(shown, shapes={e.name: describe(e.source, gate_settings(cfg)) for e in shown})
    archive = Archive.bundled()  # every admitted design joins it, as in a run: a later copy of one is refused
    for r in (r for r in done if r["stage"] == "valid"):
        archive.add(r.get("id", "an earlier design"), extract_code(r["reply"]))
    skills = skills_for(cfg.setting, cfg.skills or None)
    t0, rows = time.time(), list(done)
    one_pass = dataclasses.replace(design_settings(cfg), until_valid=0, retries=0,
                                   shared_first=args.prompt_layout == "shared")  # the run's gate, one attempt a slot
    if done:
        print(f"continuing {args.samples}: {len(done)} designs already written", flush=True)
    for start in range(len(done), args.designs, args.batch):
        rng = random.Random(f"{cfg.seed}-{start}")  # each batch its own draws: a continued run matches
        torch.manual_seed(cfg.seed * 100_003 + start)
        batch = [skills[(start + i) % len(skills)] for i in range(min(args.batch, args.designs - start))]
        t_batch = time.time()
        new = design_environments(policy, batch, corpus, memory, rng, one_pass, iteration=0, first_slot=start,
                                  archive=archive)
        each = (time.time() - t_batch) / len(new)  # a design's share of its batch: generation and the gate
        rows += [{"stage": d.stage, "finished": d.completion.finished, "seconds": round(each, 1)} for d in new]
        if args.samples:
            with args.samples.open("a", encoding="utf-8") as f:
                for d in new:
                    f.write(json.dumps({"id": d.id, "skill": d.skill.key, "stage": d.stage, "reasons": d.reasons,
                                        "finished": d.completion.finished, "reply": d.completion.text,
                                        "shape": d.validation.shape if d.validation else {},
                                        "seconds": round(each, 1), "layout": args.prompt_layout}) + "\n")
        print(f"designed {len(rows)}/{args.designs} ({time.time() - t0:.0f} s)", flush=True)
    return report(rows, cfg, args)


def report(rows: list[dict], cfg, args) -> int:
    """The stages of every design the file holds (a continued file: all its sittings) and their
    seconds, each design's share of its batch summed."""
    stages = collections.Counter(r["stage"] for r in rows)
    cut = sum(not r.get("finished", True) for r in rows)
    print(f"\n| stage | designs |\n|---|---|")
    for stage in LADDER:
        if stages[stage]:
            print(f"| {stage} | {stages[stage]} |")
    print(f"\nvalid {stages['valid']}/{len(rows)}, cut at {cfg.design_max_new_tokens} tokens: {cut}")
    if args.json:
        args.json.write_text(json.dumps({"model": cfg.model, "designs": len(rows), "cut": cut,
                                         "seconds": round(sum(r.get("seconds", 0.0) for r in rows)),
                                         "budget": cfg.design_max_new_tokens,
                                         "layout": args.prompt_layout, "batch": args.batch,
                                         "stages": {stage: stages[stage] for stage in LADDER}}))
    return 0


def read_samples(path: Path) -> list[dict]:
    """The designs a samples file holds; a line cut short by a kill is dropped (its batch is redone)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def compare(a: Path, b: Path) -> int:
    counts = []
    for path in (a, b):
        rows = read_samples(path)
        valid = sum(r["stage"] == "valid" for r in rows)
        counts.append((valid, len(rows)))
        low, high = interval([float(r["stage"] == "valid") for r in rows])[1:3]
        print(f"{path}: valid {valid}/{len(rows)} = {valid / max(1, len(rows)):.3f} [{low:.3f}, {high:.3f}]")
    ratio, low, high = ratio_interval(*counts[0], *counts[1])
    verdict = "holds" if low > 2 / 3 else "is not shown"
    print(f"ratio A/B {ratio:.2f} [{low:.2f}, {high:.2f}]: 'A cuts validity by at most a third' {verdict}")
    paired(read_samples(a), read_samples(b))
    return 0


def paired(a: list[dict], b: list[dict]) -> None:
    """Two files written with the same seed and batch draw the same skill, document and examples
    for each slot, so their first n designs pair by slot. At a valid fraction near 0.02 a few
    hundred pairs cannot tell two prompts apart; how far validation got can: for each stage, the
    fraction of designs that got past it in each file, and B - A paired by slot (McNemar)."""
    n = min(len(a), len(b))
    if n == 0 or any(x["skill"] != y["skill"] for x, y in zip(a[:n], b[:n])):
        print("the files do not pair by slot (other seeds or batch sizes): no paired comparison")
        return
    print(f"paired by slot, the first {n} designs of each (B - A, agresti-min 95% interval, McNemar p):")
    for stage in ("syntax", "reset", "episode", "solution", "duplicate"):  # past duplicate: valid
        past = lambda rows: [float(LADDER.index(r["stage"]) > LADDER.index(stage)) for r in rows[:n]]  # noqa: E731
        pa, pb = past(a), past(b)
        d = paired_delta(pa, pb)
        name = "valid" if stage == "duplicate" else f"past {stage}"
        print(f"  {name:14s} A {sum(pa) / n:.3f}  B {sum(pb) / n:.3f}  B - A {d.delta:+.3f} "
              f"[{d.low:+.3f}, {d.high:+.3f}]  p {d.p:.2g}")


if __name__ == "__main__":
    raise SystemExit(main())
