"""Design environments with the policy and write them to a folder, without any training.

    python design.py --out designs [--setting tool_use] [--design-batch 8] [train.py flags]

One batched designer call (grounded on the corpus, shown the memory seeded with the hand-written
examples) writes `--design-batch` environments (else `--designs-per-iteration`); each is validated in the sandbox and saved
as <out>/<id>.py under a header comment with its validation result. The last line printed is a
summary: the valid fraction and the median prompt and completion token counts.
"""
import argparse
import dataclasses
import random
import statistics
import sys
from pathlib import Path

from spade_mini.cli import main_config
from spade_mini.shape import Shape
from spade_mini.designer import (Corpus, CorpusError, Design, Memory, SkillError, design_environments,
                                 skill_schedule, skills_for)


def write_designs(designs: list[Design], out_dir: str | Path) -> str:
    """Write each design to <out_dir>/<id>.py and return the one-line summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for d in designs:
        header = [f"# {d.id}: {d.skill.setting}/{d.skill.key}, document {d.document_id}, "
                  f"attempt {d.attempt}", f"# valid: {d.valid}"]
        # one comment line per reason: a reason quotes the environment (its exception message),
        # and a line break in it would make the rest of the line a statement of this file
        header += [f"# reason: {' '.join(reason.splitlines())}" for reason in d.reasons]
        # a reply without code is kept, commented out, so one can read what the model wrote
        body = d.source if d.source is not None else "".join(
            f"# | {line}\n" for line in d.completion.text.splitlines())
        (out / f"{d.id}.py").write_text("\n".join(header) + "\n\n" + body, encoding="utf-8")
    valid = sum(d.valid for d in designs)
    prompt = statistics.median(d.prompt_tokens for d in designs) if designs else 0
    completion = statistics.median(len(d.completion.completion_ids) for d in designs) if designs else 0
    return (f"{valid}/{len(designs)} valid ({valid / max(1, len(designs)):.0%}); median prompt "
            f"{prompt:.0f} tokens, median completion {completion:.0f} tokens; written to {out}")


def main(argv: list[str] | None = None) -> None:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--out", default="designs", help="folder for the generated environments")
    args, rest = pre.parse_known_args(sys.argv[1:] if argv is None else argv)
    cfg = main_config(rest, prog="design.py", description=__doc__.splitlines()[0])
    try:
        skills = skill_schedule(skills_for(cfg.setting, cfg.skills or None), 0, Shape.of(cfg).slots)
        corpus = None if cfg.no_corpus else Corpus.load(cfg.corpus, cfg.corpus_max_words)
    except (SkillError, CorpusError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2)
    memory = None
    if not cfg.no_memory:
        from spade_mini.envs import TIERS
        memory = Memory.seeded(TIERS[cfg.examples][0], max_records=cfg.memory_size)
    from spade_mini.policy import load_policy  # torch loads only after the arguments are checked
    from spade_mini.run.planning import fit_plan
    from spade_mini.settings import design_settings
    from spade_mini.warmstart import warm_start
    policy = load_policy(cfg)
    fit_plan(policy, cfg)  # the memory plan, on a CPU by need
    if cfg.warm_start_steps > 0:  # the same (cached) warm start as train.py's
        warm_start(policy, cfg, corpus)
    one_pass = dataclasses.replace(design_settings(cfg), until_valid=0, retries=0)  # the run's gate, one attempt a slot
    designs = design_environments(policy, skills, corpus, memory, random.Random(cfg.seed), one_pass, iteration=0)
    print(write_designs(designs, args.out))


if __name__ == "__main__":
    main()
