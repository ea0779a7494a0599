"""The summary of bench/learning_curve.py, from run directories or from an earlier summary.

A run directory gives `record`: per evaluated iteration each distinct item's outcome
(eval.jsonl), the transfer suites' strict and lenient outcomes (transfer.jsonl), and the kept
columns of metrics.jsonl. `summarize` pairs every point with the starting policy
(spade_mini/evaluation/curve.py), leaves out the environments that the start and every point
solve on every item, and builds the per-arm table. `raw` packs every outcome (one character
an item), so `load_previous` can rebuild the records of runs whose directories are elsewhere:
a later sitting continues from the committed summary alone.
"""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spade_mini.evaluation import curve  # noqa: E402
from spade_mini.reward.bands import EVIDENCE_BAND, within  # noqa: E402

# Every arm shares the active pool with levels; they differ only in what fills it (--pool-fill).
# "plain" (round four's fixed rotation, no levels) is read from the summary, no longer run.
ARMS = {"spade": ["--pool-fill", "designs"], "fixed": ["--pool-fill", "examples"], "both": ["--pool-fill", "both"]}
ORDER = (*ARMS, "plain")  # how the table lists arms
VERSION = 2  # the summary's schema: item outcomes packed per point (curve.pack)
KEPT = ("iteration", "valid_fraction", "valid_designs", "designs", "regret", "no_hint_return", "hint_return",
        "informative_episodes", "no_hint_episodes", "pool_size", "pool_level_mean", "pool_level_max",
        "pool_raised", "pool_lowered", "pool_skills", "agent_loss", "designer_loss",
        "memory_designs", "memory_in_band", "drift_kl", "time_total_s")


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def run_name(name: str, arm: str, seed: int) -> str:
    return f"{name}-{arm}-s{seed}"


def arm_seed(key: str) -> tuple[str, str]:
    """The arm and seed of a run name made by run_name."""
    *_, arm, seed = key.split("-")
    return arm, seed[1:]


def evaluations(run: Path) -> dict[int, dict[str, float]]:
    """Per evaluated iteration, each distinct item's outcome ("<env>/<seed>" -> 0 or 1)."""
    by_it: dict[int, dict[str, float]] = {}
    for r in rows(run / "eval.jsonl"):
        by_it.setdefault(r["iteration"], {})[f"{r['env']}/{r['seed']}"] = float(r["solved"])
    return by_it


def transfers(run: Path) -> dict[int, dict[str, dict[str, dict]]]:
    """Per iteration with transfer suites: suite -> {"strict": outcomes, "lenient": outcomes}."""
    out: dict = {}
    for r in rows(run / "transfer.jsonl"):
        scores = out.setdefault(r["iteration"], {}).setdefault(r["suite"], {"strict": {}, "lenient": {}})
        for score in scores:
            if r[score] is not None:
                scores[score][f"{r['env']}/{r['seed']}"] = float(r[score])
    return out


def finished(run: Path, iterations: int) -> bool:
    """Whether a run did all its iterations and evaluated the last one."""
    return any(r["iteration"] == iterations - 1 and "eval_solve_rate" in r for r in rows(run / "metrics.jsonl"))


def record(run: Path, iterations: int) -> dict:
    """What a run directory holds for the summary (unpacked outcomes), and the active pool's life
    table: each environment it held, admitted when, its levels and moves, plays, why it left."""
    from spade_mini.evaluation.plots import life_table
    metrics = [{k: r.get(k) for k in KEPT} for r in rows(run / "metrics.jsonl") if r["iteration"] >= 0]
    frozen = json.loads((run / FROZEN).read_text()) if (run / FROZEN).is_file() else {}
    return {"finished": finished(run, iterations), "evals": evaluations(run), "transfer": transfers(run),
            "iterations": metrics, "life": life_table(run), **({"frozen": frozen} if frozen else {})}


FROZEN = "frozen.json"  # in a run folder: what the run was started with (learning_curve.freeze)


def code_version() -> dict:
    """The commit and the tree of the code a run trains with (spade_mini/ and train.py): a commit
    that changes only docs or benches keeps the tree, so a run may resume across it."""
    git = lambda *a: subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
    return {"commit": git("rev-parse", "HEAD"), "code": git("rev-parse", "HEAD:spade_mini") + ":" +
            git("rev-parse", "HEAD:train.py"), "dirty": bool(git("status", "--porcelain", "spade_mini", "train.py"))}


def seconds_at(iterations: list[dict], it: int) -> float:
    """Training seconds (time_total_s, evaluations excluded) up to and including iteration `it`."""
    return sum(r.get("time_total_s") or 0.0 for r in iterations if r["iteration"] <= it)


def compare_transfer(start: dict, last: dict) -> dict:
    """Per suite and score (strict, lenient), the last point against the start."""
    return {suite: {score: curve.compare(start[suite][score], got[score])
                    for score, outcomes in got.items() if outcomes and start.get(suite, {}).get(score)}
            for suite, got in last.items() if suite in start}


def run_summary(rec: dict, start: dict, exclude: list[str]) -> dict:
    evals = {-1: start["evals"], **{it: o for it, o in rec["evals"].items() if it >= 0}}
    points = []
    for it, outcomes in sorted(evals.items()):
        if sorted(outcomes) != sorted(start["evals"]):
            raise ValueError(f"iteration {it} did not play the same items as the starting policy")
        points.append({**curve.point(it, start["evals"], outcomes, exclude),
                       "seconds": seconds_at(rec["iterations"], it)})
    last_t = max((it for it in rec["transfer"] if it >= 0), default=None)
    last = evals[max(evals)]
    def per_env(outcomes: dict) -> dict[str, float]:
        by: dict[str, list[float]] = {}
        for key, solved in outcomes.items():
            by.setdefault(curve.env_of(key), []).append(solved)
        return {env: sum(v) / len(v) for env, v in sorted(by.items())}
    return {"finished": rec["finished"], "points": points, "iterations": rec["iterations"],
            "transfer": {"iteration": last_t, **compare_transfer(start["transfer"], rec["transfer"][last_t])}
            if last_t is not None else {},
            "start_per_env": per_env(start["evals"]), "final_per_env": per_env(last),
            "life": rec.get("life", []), "frozen": rec.get("frozen", {})}


def arm_table(runs: dict[str, dict]) -> dict:
    """Per arm over its seeds: start, last point and paired delta (and each transfer suite's),
    each the mean over seeds with a 95% t interval."""
    out = {}
    for arm in sorted({arm_seed(k)[0] for k in runs}, key=ORDER.index):
        mine = [s for k, s in runs.items() if arm_seed(k)[0] == arm]
        lasts = [s["points"][-1] for s in mine]
        row = {"runs": len(mine), "finished": sum(s["finished"] for s in mine),
               **{f: curve.over_seeds([p[f] for p in lasts]) for f in ("base", "other", "delta")},
               "seeds_p_below_0.05": sum(p["p"] < 0.05 for p in lasts), "transfer": {}}
        for s in mine:
            for suite, scores in s["transfer"].items():
                if suite != "iteration":
                    for score, c in scores.items():
                        row["transfer"].setdefault(suite, {}).setdefault(score, []).append(c)
        row["transfer"] = {suite: {score: {f: curve.over_seeds([c[f] for c in cs]) for f in ("base", "other", "delta")}
                                   for score, cs in scores.items()} for suite, scores in row["transfer"].items()}
        out[arm] = row
    return out


MARGIN = 0.03  # the non-inferiority margin registered in docs/learning-curves.md ("both" against "fixed")


def last_transfer(rec: dict) -> dict:
    """A run's transfer outcomes at its last point (suite -> score -> outcomes), {} before one."""
    its = [it for it in rec["transfer"] if it >= 0]
    return rec["transfer"][max(its)] if its else {}


# Registered before round five's first run (docs/learning-curves.md): reasoning-gym keeps round
# four's items for comparison and is no evidence (no family qualified on the selection's seeds at
# the agent's reply budget, bench/rg_select.json), whatever its start rate on the curve's seeds.
NO_EVIDENCE = ("reasoning_gym",)


def outside_evidence(start_transfer: dict, score: str = "strict") -> dict[str, list[str]]:
    """Per transfer suite, the environments whose start rate lies outside EVIDENCE_BAND (every
    one of a NO_EVIDENCE suite)."""
    out = {}
    for suite, scores in start_transfer.items():
        by: dict[str, list[float]] = {}
        for key, solved in scores.get(score, {}).items():
            by.setdefault(curve.env_of(key), []).append(solved)
        out[suite] = sorted(env for env, v in by.items()
                            if suite in NO_EVIDENCE or not within(sum(v) / len(v), EVIDENCE_BAND))
    return out


def against(records: dict[str, dict], arm: str = "both", base: str = "fixed", score: str = "strict",
            exclude: dict[str, list[str]] | None = None) -> dict:
    """Arm against arm on the same items at their last points: for each seed both arms finished,
    each transfer suite and the suites pooled (items "<suite>/<env>/<seed>"), `curve.compare`
    of the base arm's outcomes with the arm's (McNemar p on the items, and the interval clustered
    by environment, the registered primary test); over those seeds, each delta's mean with its t
    interval. `exclude[suite]`: environments left out of the evidence. `non_inferior`: the pooled
    clustered low end above -MARGIN in every seed (None without a seed)."""
    exclude = exclude or {}
    runs = {arm_seed(k): r for k, r in records.items() if r["finished"]}
    seeds = sorted(s for a, s in runs if a == arm and (base, s) in runs)
    per_seed = {}
    for seed in seeds:
        mine, theirs = last_transfer(runs[(arm, seed)]), last_transfer(runs[(base, seed)])
        suites = sorted(set(mine) & set(theirs))
        row = {suite: curve.compare(theirs[suite][score], mine[suite][score], exclude.get(suite, ())) for suite in suites}
        pooled = [{f"{suite}/{k}": v for suite in suites for k, v in side[suite][score].items()} for side in (theirs, mine)]
        row["pooled"] = curve.compare(*pooled, [f"{suite}/{env}" for suite in suites for env in exclude.get(suite, ())])
        per_seed[seed] = row
    names = sorted({suite for row in per_seed.values() for suite in row})
    return {"arm": arm, "base": base, "score": score, "seeds": per_seed,
            "over_seeds": {suite: curve.over_seeds([row[suite]["delta"] for row in per_seed.values() if suite in row])
                           for suite in names},
            "non_inferior": all(row["pooled"]["cluster_low"] > -MARGIN for row in per_seed.values()) if per_seed else None}


def summarize(settings: dict, start: dict, records: dict[str, dict]) -> dict:
    """The whole summary: evidence, every run's points and transfer, the arm table, and the raw
    outcomes (packed) that let another machine continue from this file alone."""
    sets = [start["evals"]] + [o for r in records.values() for it, o in r["evals"].items() if it >= 0]
    exclude = curve.saturated(sets)
    runs = {key: run_summary(rec, start, exclude) for key, rec in records.items() if rec["evals"]}
    keys = sorted(start["evals"])
    return {"version": VERSION, "settings": settings,
            "evidence": {"distinct": len(keys), "saturated": exclude, "never_solved": curve.never_solved(sets),
                         "items": sum(curve.env_of(k) not in exclude for k in keys)},
            "runs": runs, "arms": arm_table(runs),
            "against": {f"{arm} vs fixed": against(records, arm, exclude=outside_evidence(start["transfer"]))
                        for arm in ("both", "spade")},
            "raw": pack_raw(start, records)}


def pack_raw(start: dict, records: dict[str, dict]) -> dict:
    keys = sorted(start["evals"])
    tkeys = {s: sorted(set(o["strict"]) | set(o["lenient"])) for s, o in start["transfer"].items()}

    def packed(transfer):
        return {it: {s: {score: curve.pack(o, tkeys[s]) for score, o in scores.items()}
                     for s, scores in suites.items() if s in tkeys} for it, suites in transfer.items()}
    return {"items": keys, "transfer_items": tkeys,
            "start": {"evals": curve.pack(start["evals"], keys), "transfer": packed({-1: start["transfer"]})[-1]},
            "runs": {k: {"finished": r["finished"], "iterations": r["iterations"],
                         "evals": {it: curve.pack(o, keys) for it, o in r["evals"].items()},
                         "transfer": packed(r["transfer"]),
                         **{k: r[k] for k in ("life", "frozen") if k in r}}
                     for k, r in records.items()}}


def unpack_raw(raw: dict) -> tuple[dict, dict[str, dict]]:
    """pack_raw's inverse: the start and the run records."""
    keys, tkeys = raw["items"], raw["transfer_items"]

    def transfer(t):
        return {int(it): {s: {score: curve.unpack(p, tkeys[s]) for score, p in scores.items()}
                          for s, scores in suites.items()} for it, suites in t.items()}
    start = {"evals": curve.unpack(raw["start"]["evals"], keys), "transfer": transfer({-1: raw["start"]["transfer"]})[-1]}
    runs = {k: {"finished": r["finished"], "iterations": r["iterations"], "transfer": transfer(r["transfer"]),
                "evals": {int(it): curve.unpack(p, keys) for it, p in r["evals"].items()},
                **{k: r[k] for k in ("life", "frozen") if k in r}} for k, r in raw["runs"].items()}
    return start, runs


def load_previous(path: Path | None, settings: dict) -> tuple[dict | None, dict[str, dict]]:
    """The start and run records of an earlier summary with the same settings (seeds aside)."""
    if path is None or not path.is_file():
        return None, {}
    old = json.loads(path.read_text())
    same = {k: v for k, v in old.get("settings", {}).items() if k != "seeds"} == \
           {k: v for k, v in settings.items() if k != "seeds"}
    if old.get("version") != VERSION or not same:
        print(f"{path}: another schema or other settings; its runs are not continued from it")
        return None, {}
    return unpack_raw(old["raw"])
