"""Config: every field has a docstring and a flag; bad input gives one clear sentence."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from spade_mini.cli import field_docs, parse_args
from spade_mini.config import PRESETS, Config, ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_every_field_has_a_docstring():
    docs = field_docs()
    for f in dataclasses.fields(Config):
        assert docs.get(f.name, "").strip(), f"field {f.name} has no docstring"


def test_flags_override_preset_and_types_are_converted():
    cfg = parse_args(["--preset", "cpu-smoke", "--lr", "3e-4", "--iterations", "7",
                      "--no-corpus", "--skills", "pattern_recognition,optimization",
                      "--drop-invalid", "false"])
    assert cfg.preset == "cpu-smoke"
    assert cfg.lr == pytest.approx(3e-4) and cfg.iterations == 7
    assert cfg.no_corpus is True and cfg.drop_invalid is False
    assert cfg.skills == ["pattern_recognition", "optimization"]
    assert cfg.plays_per_design == PRESETS["cpu-smoke"]["plays_per_design"]


def test_config_file_then_flags(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"iterations": 9, "lr": 0.5}))
    cfg = parse_args(["--preset", "gpu", "--config", str(path), "--lr", "0.25"])
    assert cfg.iterations == 9 and cfg.lr == 0.25 and cfg.model == PRESETS["gpu"]["model"]
    yml = tmp_path / "c.yaml"
    yml.write_text("designs_per_iteration: 3\nno_memory: true\n")
    cfg = parse_args(["--preset", "cpu-smoke", "--config", str(yml)])
    assert cfg.designs_per_iteration == 3 and cfg.no_memory is True


@pytest.mark.parametrize("argv, words", [
    (["--lr", "fast"], "--lr expects float"),
    (["--iterations", "2.5"], "--iterations expects int"),
    (["--lrr", "1"], "Did you mean --lr?"),
    (["--preset", "huge"], "unknown preset"),
    (["--setting", "chess"], "--setting must be one of"),
    (["--config", "missing.json"], "does not exist"),
    (["--full-finetune", "--quantize", "4bit"], "add --quantize none"),
])
def test_bad_input_is_one_clear_sentence(argv, words):
    with pytest.raises(ConfigError) as e:
        parse_args(argv)
    message = str(e.value)
    assert words in message and "\n" not in message


def test_unknown_key_in_config_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"iteratons": 3}))
    with pytest.raises(ConfigError, match="Did you mean --iterations"):
        parse_args(["--config", str(path)])


def test_auto_preset_is_printed_and_help_lists_every_field():
    out = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = field_docs()
    for f in dataclasses.fields(Config):
        assert "--" + f.name.replace("_", "-") in out.stdout
        assert docs[f.name].split()[0] in out.stdout


def test_bad_flag_exits_2_with_one_line():
    out = subprocess.run([sys.executable, "train.py", "--lr", "x"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--lr expects float" in out.stderr


def test_a_config_json_of_an_older_run_resumes_as_the_run_it_describes():
    """--fixed-pool, --plain-fixed-pool and --pool-examples-when-empty are gone; a run saved with
    them resumes with the pool fill it meant (silently dropped, --fixed-pool would run SPADE)."""
    from spade_mini.cli import parse_args
    base = Config(model="tiny").to_dict()
    for key in ("pool_fill", "pool_keep"):
        base.pop(key)
    fixed = parse_args(["--resume"], base={**base, "fixed_pool": True, "pool_max_age": 4})
    assert (fixed.pool_fill, fixed.pool_keep) == ("examples", True)
    plain = parse_args(["--resume"], base={**base, "fixed_pool": True, "plain_fixed_pool": True, "pool_max_age": 0})
    assert (plain.pool_fill, plain.pool_keep, plain.pool_max_age) == ("examples", False, 4)
    smoke = parse_args(["--resume"], base={**base, "pool_examples_when_empty": True, "pool_max_age": 4})
    assert smoke.pool_fill == "both"
    assert parse_args(["--resume"], base={**base, "pool_max_age": 4}).pool_fill == "designs"
    with pytest.raises(ConfigError, match="one of designs, examples, both"):
        Config(pool_fill="fixed")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from curve_summary import ARMS
    assert {arm: flags[-1] for arm, flags in ARMS.items()} == {"spade": "designs", "fixed": "examples", "both": "both"}


