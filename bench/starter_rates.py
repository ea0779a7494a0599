"""Solve rates of the starter environments, without and with their hint, for the warm-started
embedded model at the cpu-smoke settings: are they at the edge of what it can do?

    python bench/starter_rates.py                          # STARTER and STARTER_HELDOUT, 16 + 16 each
    python bench/starter_rates.py --set starter --episodes 32
    python bench/starter_rates.py -- --warm-start-steps 0   # the model without a warm start

The policy is loaded and warm-started as train.py does (from the warm-start cache, which is built
first when it does not hold this warm start), then every environment is played by
`spade_mini.agent.play_episodes` with the config's turn cap, token budgets, sampling and agent
prompt, on the same seeds in both arms; the hint arm gets the environment's own hint(). Everything
after `--` goes to train.py's flag parser (the preset defaults to cpu-smoke). The table is
markdown; `--transcripts FILE` also writes every episode as a JSON line, `--json FILE` the rates.
"""
import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from spade_mini import warmstart  # noqa: E402
from spade_mini.agent import Job, play_episodes  # noqa: E402
from spade_mini.settings import play_settings  # noqa: E402
from spade_mini.cli import main_config  # noqa: E402
from spade_mini.designer import Corpus  # noqa: E402
from spade_mini.envs import EXAMPLES, STARTER, STARTER_HELDOUT  # noqa: E402
from spade_mini.policy import load_policy  # noqa: E402
from spade_mini.run.planning import fit_plan  # noqa: E402

SETS = {"starter": STARTER, "heldout": STARTER_HELDOUT, "all": STARTER + STARTER_HELDOUT,
        "examples": [e for e in EXAMPLES if e.setting == "games"]}
ARMS = ("no_hint", "hint")


def rate_table(rows: list[dict]) -> str:
    lines = ["| set | environment | skill | no hint | hint | hint - no hint | turns cut |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['set']} | {r['name']} | {r['skill']} | {r['no_hint']:.2f} | {r['hint']:.2f} "
                     f"| {r['hint'] - r['no_hint']:+.2f} | {r['cut']} |")
    for group in dict.fromkeys(r["set"] for r in rows):
        part = [r for r in rows if r["set"] == group]
        mean = lambda key: sum(r[key] for r in part) / len(part)  # noqa: E731
        band = sum(0.1 <= r["no_hint"] <= 0.6 for r in part)
        lines.append(f"| {group} | **mean** ({band}/{len(part)} in 0.10-0.60) | | {mean('no_hint'):.2f} "
                     f"| {mean('hint'):.2f} | {mean('hint') - mean('no_hint'):+.2f} | |")
    return "\n".join(lines)


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="all")
    parser.add_argument("--only", default="", help="comma-separated environment names")
    parser.add_argument("--episodes", type=int, default=16, help="seeds per environment, played in both arms")
    parser.add_argument("--batch", type=int, default=64, help="episodes per play_episodes call")
    parser.add_argument("--transcripts", type=Path)
    parser.add_argument("--json", type=Path, help="also write the rates here (bench/model_menu.py reads it)")
    args = parser.parse_args(argv)
    cfg = main_config(extra if "--preset" in extra else ["--preset", "cpu-smoke", *extra],
                      prog="bench/starter_rates.py")

    names = {e.name: group for group in ("starter", "heldout") for e in SETS[group]}
    envs = [e for e in SETS[args.set] if not args.only or e.name in args.only.split(",")]
    torch.manual_seed(cfg.seed)
    policy = load_policy(cfg)
    fit_plan(policy, cfg)
    if cfg.warm_start_steps > 0:
        corpus = None if cfg.no_corpus else Corpus.load(cfg.corpus, cfg.corpus_max_words)
        warmstart.warm_start(policy, cfg, corpus)
        print(f"warm start: {warmstart.cache_folder(cfg)} ({cfg.examples} tier)")
    jobs = [Job(e.source, seed, arm, None, e.name) for e in envs for seed in range(args.episodes) for arm in ARMS]
    t0, episodes = time.time(), []
    torch.manual_seed(cfg.seed)
    for start in range(0, len(jobs), args.batch):
        episodes += play_episodes(policy, jobs[start:start + args.batch], play_settings(cfg))
        print(f"played {len(episodes)}/{len(jobs)} episodes ({time.time() - t0:.0f} s)", flush=True)

    rows = []
    for e in envs:
        mine = {arm: [ep for ep in episodes if ep.job.design_id == e.name and ep.job.arm == arm] for arm in ARMS}
        rate = {arm: sum(ep.ret > 0 for ep in eps) / len(eps) for arm, eps in mine.items()}
        cut = sum(ep.end_reason == "no_eos" for eps in mine.values() for ep in eps)
        rows.append({"set": names.get(e.name, args.set), "name": e.name, "skill": e.skill, **rate, "cut": cut})
    if args.transcripts:
        with args.transcripts.open("w") as f:
            for ep in episodes:
                f.write(json.dumps({"env": ep.job.design_id, "seed": ep.job.seed, "arm": ep.job.arm,
                                    "ret": ep.ret, "end": ep.end_reason, "messages": ep.messages}) + "\n")
    print(f"\n{len(envs)} environments x {args.episodes} seeds x {len(ARMS)} arms, {cfg.preset} settings "
          f"(temperature {cfg.temperature}, {cfg.turn_max_new_tokens} tokens a turn, {cfg.max_turns} turns), "
          f"{time.time() - t0:.0f} s of play\n")
    print(rate_table(rows))
    if args.json:
        args.json.write_text(json.dumps({"model": cfg.model, "episodes": args.episodes, "seconds": round(time.time() - t0),
                                         "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
