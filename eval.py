"""Evaluate the base model and training checkpoints on held-out suites, or plot a run.

    python eval.py --preset cpu-smoke
    python eval.py --preset cpu-smoke --checkpoints runs/x/checkpoint-* --budget-minutes 30
    python eval.py --checkpoints runs/x/checkpoint-3,runs/x/checkpoint-6 --suites heldout,bfcl
    python eval.py --suite-dir suite/ --suites heldout     # + a suite exported from a run
    python eval.py plot runs/x

Eval flags are listed below; every model and generation flag of train.py (Config) also works.
Sizes and tiers default per preset (spade_mini.evaluation.evaluate.EVAL_PRESETS). Every model is scored on
the same items and seeds; the table gives each checkpoint's paired delta to the base model and
each row's smallest detectable effect. A suite whose benchmark package is missing is skipped
with one line naming the install command (the others still run).
"""
import argparse
import glob
import re
import sys
import time
from pathlib import Path

from spade_mini.cli import main_config
from spade_mini.evaluation.evaluate import EVAL_PRESETS, GENERATED, SUITES, TIERS, EvalSettings, model_specs, run_all


def eval_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eval.py", add_help=False, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suites", default=",".join(SUITES), help="comma separated: " + ", ".join(SUITES))
    p.add_argument("--tiers", help="comma separated: " + ", ".join(TIERS) + " (default per preset)")
    p.add_argument("--suite-dir", help=f"a suite folder written by python -m spade_mini.adapters.export: adds "
                                       f"the suite `{GENERATED}`, its environments played like held-out ones")
    p.add_argument("--checkpoints", nargs="+", default=[],
                   help="runs/<name>/checkpoint-<i> folders (space or comma separated, globs allowed)")
    p.add_argument("--budget-minutes", type=float, help="size n per suite and tier to fit this wall time")
    p.add_argument("--no-base", action="store_true", help="skip the base model")
    p.add_argument("--out", default="eval", help="parent folder of results (eval/<name>/)")
    p.add_argument("--eval-seed", type=int, default=0, help="seed of environments and items")
    p.add_argument("--heldout-seeds", type=int, help="K episodes per held-out environment and arm")
    p.add_argument("--rg-items", type=int, help="reasoning_gym items (spread over six families)")
    p.add_argument("--humaneval-items", type=int, help="HumanEval problems (of 164)")
    p.add_argument("--bfcl-items", type=int, help="BFCL items per category (simple_python, multiple)")
    p.add_argument("--answer-max-new-tokens", type=int, help="token budget of reasoning_gym and bfcl replies")
    p.add_argument("--code-max-new-tokens", type=int, help="token budget of HumanEval replies")
    p.add_argument("--batch-size", type=int, help="chats per generate call in one-turn suites")
    p.add_argument("--sample", action="store_true", help="sample at --temperature instead of greedy decoding")
    return p


def checkpoint_list(args: list[str]) -> list[str]:
    """Folders from space- and comma-separated arguments, globs expanded, in iteration order."""
    found = []
    for arg in args:
        for part in (c.strip() for c in arg.split(",")):
            if part:
                # a pattern that matches nothing stays, so the folder check below names it
                found += (sorted(glob.glob(part)) or [part]) if glob.has_magic(part) else [part]

    def order(path: str):
        m = re.fullmatch(r"checkpoint-(\d+)", Path(path).name)
        return str(Path(path).parent), int(m.group(1)) if m else -1, path
    return sorted(dict.fromkeys(found), key=order)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["plot"]:
        from spade_mini.evaluation import plot_run
        if len(argv) != 2:
            print("usage: python eval.py plot RUN_DIR", file=sys.stderr)
            return 2
        for path in plot_run(argv[1]):
            print(path)
        return 0
    parser = eval_parser()
    if {"-h", "--help"} & set(argv):
        parser.print_help()
        print("\nModel and generation flags (shared with train.py):")
    args, rest = parser.parse_known_args(argv)
    cfg = main_config(rest, prog="eval.py")
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [s for s in suites if s not in SUITES + (GENERATED,)]
    if unknown:
        print(f"error: unknown suite(s) {', '.join(unknown)}; choose from {', '.join(SUITES + (GENERATED,))}.",
              file=sys.stderr)
        return 2
    if args.suite_dir is not None:
        from spade_mini.adapters.registration import read_suite
        try:
            read_suite(args.suite_dir)
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        suites += [GENERATED] * (GENERATED not in suites)
    elif GENERATED in suites:
        print(f"error: the suite {GENERATED} needs --suite-dir FOLDER (written by python -m spade_mini.adapters.export).",
              file=sys.stderr)
        return 2
    sizes = {**EVAL_PRESETS.get(cfg.preset, {})}
    for key in ("heldout_seeds", "rg_items", "humaneval_items", "bfcl_items", "answer_max_new_tokens",
                "code_max_new_tokens", "batch_size", "budget_minutes"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    if args.tiers is not None:
        sizes["tiers"] = [t.strip() for t in args.tiers.split(",") if t.strip()]
    if set(sizes.get("tiers", TIERS)) - set(TIERS) or not sizes.get("tiers", TIERS):
        print(f"error: --tiers takes a comma separated subset of {', '.join(TIERS)}.", file=sys.stderr)
        return 2
    if args.budget_minutes is not None and args.budget_minutes <= 0:
        print("error: --budget-minutes must be a positive number of minutes.", file=sys.stderr)
        return 2
    st = EvalSettings(suites=suites, seed=args.eval_seed, suite_dir=args.suite_dir,
                      temperature=cfg.temperature if args.sample else 0.0, **sizes)
    checkpoints = checkpoint_list(args.checkpoints)
    for c in checkpoints:  # fail before any model is loaded, not after the base model's suites
        if not (Path(c).parent / "config.json").is_file() or not Path(c).is_dir():
            print(f"error: {c} is not a checkpoint folder next to its run's config.json "
                  "(runs/<name>/checkpoint-<i>).", file=sys.stderr)
            return 2
    specs = model_specs(checkpoints, include_base=not args.no_base)
    if not specs:
        print("error: nothing to evaluate; drop --no-base or pass --checkpoints.", file=sys.stderr)
        return 2
    out_dir = Path(args.out) / (cfg.name or f"{cfg.preset}-{time.strftime('%Y%m%d-%H%M%S')}")
    t0 = time.time()
    run_all(cfg, st, specs, out_dir)
    print((out_dir / "results.md").read_text())
    figures = ", ".join(p.name for p in sorted(out_dir.glob("*.png")))
    print(f"wrote {out_dir}/results.json, results.md, {figures} in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
