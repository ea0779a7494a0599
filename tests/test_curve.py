"""The learning curve of --eval-every and bench/learning_curve.py: held-out items that no part of
training sees, the same items and seeds at every point, paired comparisons that refuse anything
else, and the warm-started policy kept as a checkpoint of its own."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from spade_mini.config import Config
from spade_mini.designer import Memory, fingerprint
from spade_mini.envs import ALL_EXAMPLES, TIERS
from spade_mini.evaluation.fixed_set import curve_items

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
    for name, source, _ in items:
        assert name not in seen_names and source not in {e.source for e in ALL_EXAMPLES}
        assert fingerprint(source) not in seen_prints, f"{name} is a renamed copy of a training environment"
    # the same items and seeds every time, whatever else the config says
    assert curve_items(Config(examples=tier, setting="mix", eval_seeds=3, seed=7, iterations=99)) == items
    assert len({(n, s) for n, _, s in items}) == len(items)


def test_pairing_refuses_points_that_played_other_items(tmp_path):
    from learning_curve import arm_summary
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"iteration": -1, "env": "a", "seed": 1, "solved": False}, {"iteration": -1, "env": "b", "seed": 1, "solved": True},
            {"iteration": 1, "env": "a", "seed": 1, "solved": True}, {"iteration": 1, "env": "b", "seed": 2, "solved": True}]
    (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match="same items"):
        arm_summary(run)
    rows[-1]["seed"] = 1
    (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (point_0, point_1) = arm_summary(run)["points"]
    assert (point_0["delta"], point_1["delta"], point_1["solve_rate"]) == (0.0, 0.5, 1.0)


def test_train_writes_the_curve_and_the_warm_started_policy(tmp_path):
    """A tiny starter-tier run with a one-step warm start: the warm-started weights are a
    checkpoint of their own (before iteration 0), and every point of the curve, the warm start's
    included, played exactly the same held-out items."""
    cmd = [sys.executable, "train.py", "--preset", "cpu-smoke", "--model", "tiny", "--fixed-pool",
           "--iterations", "2", "--eval-every", "1", "--eval-seeds", "2", "--warm-start-steps", "1",
           "--designs-per-iteration", "2", "--plays-per-design", "2", "--turn-max-new-tokens", "4",
           "--run-dir", str(tmp_path), "--name", "curve"]
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
    expected = [(name, seed) for name, _, seed in curve_items(cfg)]
    assert all(items == expected for items in by_it.values())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["eval_episodes"] for m in metrics] == [len(expected)] * 3


def test_a_stopped_curve_continues_instead_of_starting_again(tmp_path):
    """bench/learning_curve.py evaluates the starting policy once, for every arm; a run asked for
    more iterations than it did resumes from its checkpoint and keeps the evaluations it has; a
    finished run and the start evaluation are never redone."""
    from learning_curve import arm_summary, evaluations
    tiny = ["--model", "tiny", "--eval-seeds", "1", "--designs-per-iteration", "2", "--plays-per-design", "2",
            "--turn-max-new-tokens", "4", "--warm-start-steps", "0"]

    def curve(iterations: int) -> str:
        cmd = [sys.executable, str(ROOT / "bench" / "learning_curve.py"), "--preset", "cpu-smoke", "--arms", "fixed",
               "--iterations", str(iterations), "--eval-every", "1", "--run-dir", str(tmp_path), "--name", "c", "--", *tiny]
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
    assert [r["iteration"] for r in arm_summary(arm, evaluations(start)[-1])["points"]] == [-1, 0, 1]

    done = {f: (arm / f).stat().st_mtime_ns for f in ("eval.jsonl", "metrics.jsonl")}
    curve(2)  # finished: nothing runs again
    assert {f: (arm / f).stat().st_mtime_ns for f in done} == done
    summary = json.loads((tmp_path / "c-summary.json").read_text())
    assert summary["arms"]["fixed"]["pairs"] == len(evaluations(start)[-1])
