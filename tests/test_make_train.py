"""The real model path: what `make train` runs, for one iteration (its own file, so that the
suite's slowest test runs beside the others: `--dist loadfile` gives a worker a whole file)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _embedded_iteration(tmp_path, name, *extra) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "train.py", "--preset", "cpu-smoke", "--iterations", "1",
           "--run-dir", str(tmp_path), "--name", name, *extra]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in rows if r.get("iteration") == 0 and "valid_fraction" in r)


def test_make_train_designs_plays_and_updates_on_the_embedded_model(tmp_path):
    """cpu-smoke on SmolLM2-135M, exactly as `make train` runs it (its warm start comes from the
    shared cache, built here on a fresh machine: about 4 minutes), for one iteration. The
    designer: every slot holds a design that went through validation with its stage and reasons.
    The agent (the preset's pool starts with the starter examples): every episode is played,
    turns end with EOS, and the update is taken with a non-zero agent loss (--designer-only-steps
    keeps the designer's step when no agent group is informative). Whether a design is valid, or
    the agent learns, is not asserted: the learning curve's questions (README)."""
    row = _embedded_iteration(tmp_path, "one", "--designer-only-steps")
    assert row["designs"] == 4 and row["update_skipped"] is None and row["trained_tokens"] > 0, row
    for line in (tmp_path / "one" / "samples.jsonl").read_text().splitlines():
        sample = json.loads(line)
        if sample["kind"] == "design":
            assert sample["valid"] or sample["reasons"], sample
    assert row["no_hint_episodes"] >= 32 and row["crashed_episodes"] == 0, row  # 4 examples x 8 seeds
    assert row["eos_fraction"] >= 0.8 and row["agent_loss"] != 0.0, row
