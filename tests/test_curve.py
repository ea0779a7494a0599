"""The learning curve of --eval-every and bench/learning_curve.py: held-out items that no part of
training sees, each distinct item once, the same items and seeds at every point, paired
comparisons that refuse anything else and leave out what cannot change, a summary that a later
sitting continues from alone, and the warm-started policy kept as a checkpoint of its own."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from spade_mini.config import Config
from spade_mini.designer import Memory, fingerprint
from spade_mini.envs import ALL_EXAMPLES, TIERS, HandEnv
from spade_mini.evaluation import curve
from spade_mini.evaluation.fixed_set import curve_items, distinct_items, first_observations
from spade_mini.evaluation.intervals import detectable_effect

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


@pytest.mark.parametrize("tier", sorted(TIERS))
def test_the_curve_plays_nothing_training_sees(tier):
    cfg = Config(examples=tier, setting="mix", eval_seeds=3)
    items = curve_items(cfg)
    assert items, "the tier must hold held-out environments to evaluate"
    examples, _ = TIERS[tier]
    memory = Memory.seeded(examples)  # what the designer is shown; also the fixed pool and the warm start
    seen_names = {e.name for e in ALL_EXAMPLES} | {r.id for r in memory.records}
    seen_prints = {fingerprint(e.source) for e in ALL_EXAMPLES} | {fingerprint(r.source) for r in memory.records}
    for name, source, _, _ in items:
        assert name not in seen_names and source not in {e.source for e in ALL_EXAMPLES}
        assert fingerprint(source) not in seen_prints, f"{name} is a renamed copy of a training environment"
    # the same items and seeds every time, whatever else the config says
    assert curve_items(Config(examples=tier, setting="mix", eval_seeds=3, seed=7, iterations=99)) == items
    assert len({(n, s) for n, _, s, _ in items}) == len(items)
    shown = {(n, first_observations(src, (s,))[0]) for n, src, s, _ in items}
    assert len(shown) == len(items), "two items of one environment show the same first observation"
    assert sum(c for *_, c in items) == 3 * len({n for n, *_ in items})  # every seed stands behind one item


COARSE = HandEnv("coarse", "games", "pattern_recognition", "", """class CoarseEnv:
    def reset(self, seed=None):
        self.n = seed % 3
        return f"Say {self.n}.", {}

    def step(self, action):
        return "", float(action == str(self.n)), True, False, {}
""")


def test_seeds_with_one_first_observation_are_one_item():
    items = distinct_items([COARSE], list(range(10)))
    assert [(seed, count) for _, _, seed, count in items] == [(0, 4), (1, 3), (2, 3)]


def outcomes(spec: dict[str, str]) -> dict[str, float]:
    """{"env": "0110"} -> {"env/0": 0, "env/1": 1, ...}"""
    return {f"{env}/{i}": float(c) for env, bits in spec.items() for i, c in enumerate(bits)}


def test_a_point_leaves_out_saturated_environments_and_reports_its_detectable_change():
    # 10 environments of 10 items, base rate 0.5, plus one solved on every item by both models
    start = outcomes({**{f"e{k}": "1111100000" for k in range(10)}, "easy": "1" * 20})
    later = outcomes({**{f"e{k}": "1111110000" for k in range(10)}, "easy": "1" * 20})
    exclude = curve.saturated([start, later])
    assert exclude == ["easy"]
    p = curve.point(2, start, later, exclude)
    assert (p["distinct"], p["n"], p["clusters"], p["base"]) == (120, 100, 10, 0.5)
    # 100 paired items from 0.5 (intervals.py's hand computation): a rise of 0.196 is detectable
    assert p["mde"] == detectable_effect(100, 0.5) == pytest.approx(0.196)
    assert p["delta"] == pytest.approx(0.1) and p["p"] == pytest.approx(2 / 2 ** 10)
    assert p["solve_rate"] == pytest.approx(80 / 120)


def test_pairing_refuses_points_that_played_other_items(tmp_path):
    from curve_summary import evaluations, record, run_summary
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"iteration": -1, "env": "a", "seed": 1, "solved": False}, {"iteration": -1, "env": "b", "seed": 1, "solved": True},
            {"iteration": 1, "env": "a", "seed": 1, "solved": True}, {"iteration": 1, "env": "b", "seed": 2, "solved": True}]
    (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    start = {"evals": evaluations(run)[-1], "transfer": {}}
    with pytest.raises(ValueError, match="same items"):
        run_summary(record(run, 2), start, [])
    rows[-1]["seed"] = 1
    (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (point_0, point_1) = run_summary(record(run, 2), start, [])["points"]
    assert (point_0["delta"], point_1["delta"], point_1["solve_rate"]) == (0.0, 0.5, 1.0)


def test_the_summary_alone_rebuilds_every_run():
    """What a later sitting on another machine has: the committed summary, no run directories."""
    from curve_summary import summarize, unpack_raw
    start = {"evals": outcomes({"a": "0101", "b": "1111", "c": "0000"}),
             "transfer": {"no_example": {"strict": outcomes({"x": "01"}), "lenient": outcomes({"x": "11"})}}}
    records = {f"d-{arm}-s{seed}": {
        "finished": seed == 0, "iterations": [{"iteration": 0, "time_total_s": 5.0}, {"iteration": 1, "time_total_s": None}],
        "evals": {0: outcomes({"a": "0111", "b": "1111", "c": "0000"}), 1: outcomes({"a": "1111", "b": "1111", "c": "0100"})},
        "transfer": {1: {"no_example": {"strict": outcomes({"x": "11"}), "lenient": outcomes({"x": "11"})}}}}
        for arm in ("spade", "fixed") for seed in (0, 1)}
    life = [{"id": "it0000-01", "admitted": 0, "left": 1, "why": "learned", "level": 2, "levels": 4,
             "moves": [[0, 0, 1], [1, 1, 2]], "plays": 24, "skill": "counting"}]
    records["d-spade-s0"]["life"] = life  # the pool's life table travels with the summary
    summary = summarize({"seeds": [0, 1]}, start, records)
    assert summary["evidence"]["saturated"] == ["b"] and summary["evidence"]["never_solved"] == []
    assert unpack_raw(json.loads(json.dumps(summary))["raw"]) == (start, records)
    run = summary["runs"]["d-spade-s0"]
    assert run["life"] == life and summary["runs"]["d-fixed-s0"]["life"] == []
    assert run["start_per_env"] == {"a": 0.5, "b": 1.0, "c": 0.0} and run["final_per_env"] == {"a": 1.0, "b": 1.0, "c": 0.25}
    assert [p["seconds"] for p in run["points"]] == [0.0, 5.0, 5.0]
    assert run["points"][-1]["n"] == 8 and run["transfer"]["no_example"]["strict"]["delta"] == 0.5
    arm = summary["arms"]["spade"]
    assert (arm["runs"], arm["finished"], arm["delta"]["seeds"]) == (2, 1, 2)
    assert arm["transfer"]["no_example"]["lenient"]["delta"]["mean"] == 0.0


def test_arm_against_arm_pairs_the_same_items_per_seed_and_pools_the_suites():
    """Two seeds both arms finished (a third with one arm only is left out): per seed, each suite
    and the suites pooled compare the base arm's last outcomes with the arm's on the same items,
    McNemar and clustered by environment; over seeds, the mean delta."""
    from curve_summary import MARGIN, against

    def run(finished, a, b):
        return {"finished": finished, "iterations": [], "evals": {},
                "transfer": {-1: {}, 5: {"s1": {"strict": outcomes(a)}, "s2": {"strict": outcomes(b)}}}}
    records = {"d-fixed-s0": run(True, {"e": "0000", "f": "0011"}, {"g": "01"}),
               "d-both-s0": run(True, {"e": "0111", "f": "0011"}, {"g": "11"}),
               "d-fixed-s1": run(True, {"e": "0000", "f": "0000"}, {"g": "00"}),
               "d-both-s1": run(True, {"e": "0000", "f": "0001"}, {"g": "00"}),
               "d-both-s2": run(True, {"e": "1111", "f": "1111"}, {"g": "11"}),
               "d-fixed-s3": run(False, {"e": "1111", "f": "1111"}, {"g": "11"})}
    got = against(records)
    assert sorted(got["seeds"]) == ["0", "1"]
    s0 = got["seeds"]["0"]
    assert (s0["s1"]["n"], s0["s1"]["delta"], s0["s2"]["delta"]) == (8, 3 / 8, 1 / 2)
    assert s0["pooled"]["n"] == 10 and s0["pooled"]["delta"] == pytest.approx(4 / 10)
    assert s0["pooled"]["clusters"] == 3 and 0 < s0["s1"]["p"] <= 1
    assert got["over_seeds"]["pooled"]["mean"] == pytest.approx((4 / 10 + 1 / 10) / 2)
    assert got["non_inferior"] == all(r["pooled"]["cluster_low"] > -MARGIN for r in got["seeds"].values())
    left_out = against(records, exclude={"s1": ["f"]})["seeds"]["0"]
    assert left_out["s1"]["n"] == 4 and left_out["pooled"]["n"] == 6
    assert against(records, arm="spade")["non_inferior"] is None  # no seed with both arms
    from curve_summary import outside_evidence
    start = {"s1": {"strict": outcomes({"e": "0" * 20, "f": "0" * 19 + "1", "h": "0011"})}, "s2": {"strict": {}}}
    assert outside_evidence(start) == {"s1": ["e"], "s2": []}  # f starts at 0.05: inside, on the edge
    start["reasoning_gym"] = {"strict": outcomes({"g": "0001", "h": "0000"})}  # registered as no evidence
    assert outside_evidence(start)["reasoning_gym"] == ["g", "h"]


def test_a_run_is_frozen_at_its_start_and_refuses_to_resume_on_other_code(tmp_path):
    """learning_curve.freeze writes the code's commit and tree, the command and the CPU into the run
    folder; the summary carries them (and rebuilds them from its raw part); a resume on other code
    is one sentence."""
    from curve_summary import FROZEN, code_version, record, summarize, unpack_raw
    from learning_curve import freeze
    run = tmp_path / "d-both-s0"
    assert freeze(run, ["python", "train.py", "--pool-fill", "both"]) is None
    frozen = json.loads((run / FROZEN).read_text())
    assert frozen["code"] == code_version()["code"] and frozen["command"] == ["train.py", "--pool-fill", "both"]
    assert frozen["commit"] and frozen["cpu"]
    assert freeze(run, ["python", "train.py"]) is None  # the same code: it may resume
    rec = record(run, 2)
    assert rec["frozen"] == frozen
    start = {"evals": outcomes({"a": "01"}), "transfer": {}}
    rec["evals"] = {1: outcomes({"a": "11"})}
    summary = summarize({"seeds": [0]}, start, {"d-both-s0": rec})
    assert summary["runs"]["d-both-s0"]["frozen"] == frozen
    assert unpack_raw(json.loads(json.dumps(summary))["raw"])[1]["d-both-s0"]["frozen"] == frozen
    (run / FROZEN).write_text(json.dumps({**frozen, "code": "another:tree"}))
    refused = freeze(run, ["python", "train.py"])
    assert refused and "nothing changes mid-arm" in refused and frozen["commit"][:10] in refused


def test_train_writes_the_curve_and_the_warm_started_policy(tmp_path):
    """A tiny starter-tier run with a one-step warm start: the warm-started weights are a
    checkpoint of their own (before iteration 0), every point of the curve, the warm start's
    included, played exactly the same distinct held-out items, and the transfer suites were
    played at the start and the last point only."""
    cmd = [sys.executable, "train.py", "--preset", "cpu-smoke", "--model", "tiny", "--pool-fill", "examples",
           "--iterations", "2", "--eval-every", "1", "--eval-seeds", "2", "--warm-start-steps", "1",
           "--designs-per-iteration", "2", "--plays-per-design", "2", "--turn-max-new-tokens", "4",
           "--transfer-items", "1", "--run-dir", str(tmp_path), "--name", "curve"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / "curve"
    assert (run / "warm_start" / "trainable.safetensors").is_file()
    rows = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    by_it: dict[int, list] = {}
    for r in rows:
        by_it.setdefault(r["iteration"], []).append((r["env"], r["seed"]))
    assert sorted(by_it) == [-1, 0, 1]
    cfg = Config(examples="starter", eval_seeds=2)
    expected = [(name, seed) for name, _, seed, _ in curve_items(cfg)]
    assert all(items == expected for items in by_it.values())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["eval_episodes"] for m in metrics] == [len(expected)] * 3
    played = {}
    for r in map(json.loads, (run / "transfer.jsonl").read_text().splitlines()):
        played.setdefault(r["iteration"], set()).add(r["suite"])
    assert played == {-1: {"heldout", "no_example", "reasoning_gym"}, 1: {"heldout", "no_example", "reasoning_gym"}}
    assert "transfer_no_example_lenient" in metrics[0] and "transfer_heldout_lenient" not in metrics[0]
    assert "transfer_no_example_strict" not in metrics[1]


def test_a_stopped_curve_continues_instead_of_starting_again(tmp_path):
    """bench/learning_curve.py evaluates the starting policy once, for every arm; a run asked for
    more iterations than it did resumes from its checkpoint and keeps the evaluations it has; a
    finished run and the start evaluation are never redone, even where only the summary is left."""
    from curve_summary import evaluations
    tiny = ["--model", "tiny", "--eval-seeds", "1", "--designs-per-iteration", "2", "--plays-per-design", "2",
            "--turn-max-new-tokens", "4", "--warm-start-steps", "0"]

    saved = tmp_path / "summary.json"  # what a sitting commits

    def curve(iterations: int, *flags: str) -> str:
        cmd = [sys.executable, str(ROOT / "bench" / "learning_curve.py"), "--preset", "cpu-smoke", "--arms", "fixed",
               "--iterations", str(iterations), "--eval-every", "1", "--run-dir", str(tmp_path), "--name", "c",
               "--summary", str(saved), *flags, "--", *tiny]
        out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        return out.stdout

    curve(1)
    start, arm = tmp_path / "c-start", tmp_path / "c-fixed-s0"
    assert sorted(evaluations(start)) == [-1] and sorted(evaluations(arm)) == [0]  # the start is evaluated once
    first = {f: (arm / f).read_text() for f in ("eval.jsonl", "metrics.jsonl")}
    start_eval = (start / "eval.jsonl").read_text()

    curve(2)  # one more iteration: resumed from checkpoint-0, iteration 0's evaluation kept as it was
    assert "resumed" in (tmp_path / "c-fixed-s0.log").read_text()
    assert (start / "eval.jsonl").read_text() == start_eval
    for f, text in first.items():
        assert (arm / f).read_text().startswith(text)
    assert sorted(evaluations(arm)) == [0, 1]
    assert [p["iteration"] for p in json.loads(saved.read_text())["runs"]["c-fixed-s0"]["points"]] == [-1, 0, 1]

    done = {f: (arm / f).stat().st_mtime_ns for f in ("eval.jsonl", "metrics.jsonl")}
    curve(2)  # finished: nothing runs again
    assert {f: (arm / f).stat().st_mtime_ns for f in done} == done
    summary = json.loads((tmp_path / "c-summary.json").read_text())
    assert summary["evidence"]["distinct"] == len(evaluations(start)[-1]) and summary["arms"]["fixed"]["finished"] == 1

    # another machine: the committed summary, no run directories; nothing is played again
    log = (tmp_path / "c-fixed-s0.log").read_text()
    for folder in (start, arm):
        folder.rename(tmp_path / f"elsewhere-{folder.name}")
    curve(2)
    assert not start.exists() and not arm.exists() and (tmp_path / "c-fixed-s0.log").read_text() == log
    again = json.loads(saved.read_text())
    assert again["runs"] == summary["runs"] and again["arms"] == summary["arms"]
    # another arm asked for later (the seeded pool of seed 0 only) keeps the runs the summary holds
    curve(2, "--arms", "both", "--plot-only")
    assert json.loads(saved.read_text())["runs"] == summary["runs"]


def test_a_curve_without_its_transfer_suite_stops_before_training_with_the_install_command(tmp_path, monkeypatch):
    """make demo names reasoning-gym among its transfer suites: without the package it must not
    train for an hour and then skip the suite; it stops first, naming the command."""
    import importlib.util

    import learning_curve
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "reasoning_gym" else real(name, *a))
    message = learning_curve.missing_suites("cpu", [])
    assert message and "pip install reasoning-gym" in message and "--transfer-items 0" in message
    assert learning_curve.missing_suites("cpu", ["--transfer-items", "0"]) is None  # no transfer suites asked
    assert learning_curve.missing_suites("cpu-smoke", ["--transfer-items=2"]) is not None
    monkeypatch.setattr(sys, "argv", ["learning_curve.py", "--run-dir", str(tmp_path / "runs"), "--name", "x"])

    def no_training(*args, **kwargs):
        raise AssertionError("a train.py process was started")
    monkeypatch.setattr(learning_curve, "train", no_training)
    assert learning_curve.main() == 2 and not (tmp_path / "runs").exists()  # nothing started
    monkeypatch.undo()
    if importlib.util.find_spec("reasoning_gym") is not None:  # make test installs it
        assert learning_curve.missing_suites("cpu", []) is None
