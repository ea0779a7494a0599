"""Step 1, the pool's fillers (spade_mini/fill.py): a run seeded with a user's own environments.
The folder docs/writing-environments.md shows (docs/examples/my_envs) holds two environments and
one broken on purpose: the broken one is refused at start with its stage named, the others are
in the pool and played from the first iteration."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from spade_mini.config import Config
from spade_mini.fill import own_examples
from spade_mini.settings import gate_settings

ROOT = Path(__file__).resolve().parents[1]
MINE = ROOT / "docs" / "examples" / "my_envs"


def test_own_examples_pass_the_runs_gate_and_a_refusal_names_its_stage(tmp_path):
    said = []
    kept = own_examples(str(MINE), ["mathematical_reasoning", "language_understanding"],
                        gate_settings(Config.from_preset("cpu")), say=said.append)
    assert sorted(e.name for e in kept) == ["spell_back", "times_table"]
    assert {e.skill for e in kept} == {"mathematical_reasoning", "language_understanding"}
    refused = [line for line in said if "refused" in line]
    assert len(refused) == 1 and "broken_count.py at stage `solution`" in refused[0]
    # a skill the run does not have is refused too; a folder with nothing that passes is one sentence
    only_maths = own_examples(str(MINE), ["mathematical_reasoning"], gate_settings(Config()), say=said.append)
    assert [e.name for e in only_maths] == ["times_table"] and any("spell_back.py at stage `skill`" in s for s in said)
    (tmp_path / "bad.py").write_text("# skill: optimization\nclass NoEnv:\n    pass\n")
    with pytest.raises(ValueError, match="no environment in --examples-dir .* passed the gate"):
        own_examples(str(tmp_path), ["optimization"], gate_settings(Config()), say=said.append)
    with pytest.raises(ValueError, match="is not a folder"):
        own_examples(str(tmp_path / "missing"), ["optimization"], gate_settings(Config()))


def test_a_run_seeded_from_a_folder_plays_its_environments_from_the_first_iteration(tmp_path):
    out = subprocess.run([sys.executable, "train.py", "--preset", "cpu-smoke", "--model", "tiny",
                          "--examples-dir", str(MINE), "--iterations", "1", "--designs-per-iteration", "2",
                          "--plays-per-design", "4", "--design-max-new-tokens", "8", "--warm-start-steps", "0",
                          "--turn-max-new-tokens", "16", "--run-dir", str(tmp_path), "--name", "mine"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "examples: refused broken_count.py at stage `solution`" in out.stdout
    assert f"examples: 2 of {MINE} passed the gate: spell_back, times_table" in out.stdout
    rows = [json.loads(line) for line in (tmp_path / "mine" / "samples.jsonl").read_text().splitlines()]
    played = {r["env"] for r in rows if r["kind"] == "episode" and r["iteration"] == 0}
    assert {"example-spell_back", "example-times_table"} <= played  # played in iteration 0 ...
    (row,) = [json.loads(line) for line in (tmp_path / "mine" / "metrics.jsonl").read_text().splitlines()]
    assert row["pool_examples"] == 2 and row["designs"] == 2  # ... beside the designer's attempts
    memory = [json.loads(line) for line in (tmp_path / "mine" / "memory.jsonl").read_text().splitlines()]
    assert {r["id"] for r in memory if r["iteration"] < 0} == {"example-spell_back", "example-times_table"}
