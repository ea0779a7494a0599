"""Export a run's generated environments as a suite that other libraries and models can train on.

    python -m spade_mini.adapters.export runs/<name> --out suite/ [--min-regret X] [--skills a,b]

writes every VALID environment of the run (`envs/<id>.py`, the stats from its header and from
its `samples.jsonl` row) into `suite/`: one `<id>.py` per environment, the source exactly as
the designer wrote it, and `manifest.json` with each one's name, file, design id, iteration,
skill, setting, class, `max_episode_steps`, solve rates with and without the hint, regret,
designer reward and fingerprint, and `pool`: where the run's newest checkpoint has an active
pool that held it, its level, levels, recent no-hint rate, plays, and why it left (null: still
in the pool); `spade_mini.adapters.trl_env` reads these to weight and level a TRL dataset. Copies up to
names, comments and docstrings (`fingerprint`, gate/exact.py) are exported once, the earliest, with the ids of the others in its
`duplicates`. `--min-regret` keeps the environments whose regret was measured and is at least X;
`--skills` keeps those of the given skill keys; `--revalidate` runs today's `validate_env` on
each one again and leaves out those that now fail (validation may have grown stricter since the
run, e.g. refusing an environment that rewards an invalid action). Then

    import gymnasium as gym, spade_mini
    ids = spade_mini.register_suite("suite/")       # spade_mini_suite_<run>/<Name>-<id>-v0
    env = gym.make(ids[0])                            # sandboxed, like every spade_mini env

and `python eval.py --suite-dir suite/` plays them as the `generated` suite.
Omitted: anything but the run's own validation by default (the sources run sandboxed anyway).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from spade_mini.designer import SKILLS, fingerprint
from spade_mini.envs import MAX_TURNS
from spade_mini.adapters.registration import MANIFEST, env_class, is_tool_use, parsed, read_suite, turn_cap
from spade_mini.run import RunDir, load_pool, read_env_file
from spade_mini.sandbox import validate_env

FORMAT = 1


def _number(value) -> float | None:
    """A stat from a samples row (a number or null) or a header ("0.5", "None")."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return float(value) if isinstance(value, str) and value not in ("None", "-") else None
    except ValueError:
        return None


def design_rows(run: Path) -> dict[str, dict]:
    """id -> the run's `kind: design` row in samples.jsonl (a later row of an id wins)."""
    rows = {}
    path = run / "samples.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a half-written last line of a live run
        if isinstance(row, dict) and row.get("kind") == "design" and isinstance(row.get("id"), str):
            rows[row["id"]] = row
    return rows


def pool_stats(run: Path) -> dict[str, dict]:
    """id -> its row of the active pool's life table in the run's newest intact checkpoint
    (level, levels, rate, plays, why it left); empty without a pool."""
    newest = RunDir(run.parent, run.name).latest_checkpoint() if (run / "envs").is_dir() else None
    pool = load_pool(newest) if newest is not None else None
    rows = pool.life_table() if pool is not None else []
    return {r["id"]: {k: r[k] for k in ("level", "levels", "rate", "plays", "why")} for r in rows}


def environment(design: str, stats: dict, source: str, row: dict) -> dict:
    """The manifest entry of one `envs/<id>.py` of a run: its header `stats`, its `source`
    and its samples.jsonl `row` (the row's typed values win)."""
    found = env_class(parsed(source))
    cls = found.name if found else ""
    iteration = row.get("iteration")
    if not isinstance(iteration, int):
        number = re.match(r"it(\d+)", design)
        iteration = int(number.group(1)) if number else None
    stem = re.sub(r"[^A-Za-z0-9_]", "_", cls.removesuffix("Env")) or "Env"
    return {"name": f"{stem}-{design}", "file": f"{design}.py", "design": design,
            "iteration": iteration, "skill": row.get("skill", stats.get("skill", "")),
            "setting": row.get("setting") or ("tool_use" if is_tool_use(found) else "games"),
            "class_name": cls, "max_episode_steps": turn_cap(source),
            "no_hint_solve_rate": _number(row.get("no_hint_solve_rate", stats.get("no_hint_solve_rate"))),
            "hint_solve_rate": _number(row.get("hint_solve_rate", stats.get("hint_solve_rate"))),
            "regret": _number(row.get("regret", stats.get("regret"))),
            "designer_reward": _number(row.get("reward", stats.get("designer_reward"))),
            "note": row.get("note") or stats.get("note", "-")}


def export_run(run: Path, out: Path, min_regret: float | None = None,
               skills: list[str] | None = None, revalidate: bool = False) -> dict:
    """Write the suite of `run` into `out`; return its manifest (with `counts`)."""
    rows, pooled = design_rows(run), pool_stats(run)
    counts = {"valid": 0, "exported": 0, "duplicates": 0, "below_min_regret": 0, "other_skill": 0,
              "invalid_now": 0}
    kept: dict[str, tuple[dict, str]] = {}  # fingerprint -> (entry, source), earliest first
    for path in sorted((run / "envs").glob("*.py")):  # it<iteration>-<slot>: earliest first
        stats, source = read_env_file(path)
        row = rows.get(path.stem, {})
        if row.get("valid", stats.get("valid") == "True") is not True:
            continue
        counts["valid"] += 1
        entry = {**environment(path.stem, stats, source, row), "pool": pooled.get(path.stem)}
        if skills and entry["skill"] not in skills:
            counts["other_skill"] += 1
        elif min_regret is not None and (entry["regret"] is None or entry["regret"] < min_regret):
            counts["below_min_regret"] += 1
        elif (fp := fingerprint(source)) in kept:
            kept[fp][0]["duplicates"].append(entry["design"])
            counts["duplicates"] += 1
        elif fp is not None:
            kept[fp] = ({**entry, "fingerprint": fp, "duplicates": []}, source)
    kept_in_order = list(kept.values())
    if revalidate:
        kept_in_order = [(e, src) for e, src in kept_in_order
                         if validate_env(src, max_turns=MAX_TURNS).ok]
        counts["invalid_now"] = len(kept) - len(kept_in_order)
    counts["exported"] = len(kept_in_order)
    config = run / "config.json"
    played = json.loads(config.read_text()).get("max_turns") if config.is_file() else None
    manifest = {"format": FORMAT, "run": run.resolve().name, "run_dir": str(run.resolve()),
                "filters": {"min_regret": min_regret, "skills": skills or None},
                "turns_played_in_run": played, "counts": counts,
                "environments": [entry for entry, _ in kept_in_order]}
    prepare(out)
    for entry, source in kept_in_order:
        (out / entry["file"]).write_text(source, encoding="utf-8")
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def prepare(out: Path) -> None:
    """Make `out` ready: new or empty, or an earlier suite (whose files are removed)."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is a file; pass a folder for --out.")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MANIFEST).is_file():
            raise FileExistsError(f"{out} is neither empty nor an exported suite; pass a new "
                                  "or empty folder to --out.")
        for entry in read_suite(out)[1]:
            Path(entry["path"]).unlink()
    out.mkdir(parents=True, exist_ok=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one sentence instead of the usage block
        self.exit(2, f"error: {message} (see python -m spade_mini.adapters.export --help).\n")


def main(argv=None) -> int:
    p = _Parser(prog="python -m spade_mini.adapters.export", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a run folder written by train.py (runs/<name>)")
    p.add_argument("--out", required=True, help="the suite folder to write (new, empty, or a suite)")
    p.add_argument("--min-regret", type=float, help="keep environments whose regret is at least this")
    p.add_argument("--skills", help="comma-separated skill keys to keep (default: all)")
    p.add_argument("--revalidate", action="store_true",
                   help="validate each environment again and leave out those that now fail")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # a bad flag (one line already printed), or --help
        return exc.code
    run = Path(args.run)
    if not (run / "envs").is_dir():
        print(f"error: {run} is not a run folder with an envs/ folder; pass runs/<name> as "
              "written by train.py.", file=sys.stderr)
        return 2
    known = {s.key for group in SKILLS.values() for s in group}
    skills = [s.strip() for s in (args.skills or "").split(",") if s.strip()]
    if set(skills) - known:
        print(f"error: unknown skill(s) {', '.join(sorted(set(skills) - known))}; choose from "
              f"{', '.join(sorted(known))}.", file=sys.stderr)
        return 2
    try:
        manifest = export_run(run, Path(args.out), args.min_regret, skills, args.revalidate)
    except (OSError, ValueError) as exc:  # --out unusable, or an earlier manifest that is broken
        print(f"error: {exc}", file=sys.stderr)
        return 2
    c = manifest["counts"]
    print(f"exported {c['exported']} of {c['valid']} valid environments of {run} to {args.out} "
          f"({c['duplicates']} duplicates, {c['below_min_regret']} below --min-regret, "
          f"{c['other_skill']} of other skills, {c['invalid_now']} invalid now left out); "
          f"manifest: {Path(args.out) / MANIFEST}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
