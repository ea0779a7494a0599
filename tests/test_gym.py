"""spade_mini as a gymnasium user sees it: registered ids, gymnasium's seeding, spaces that hold
every observation and action, and a run's environments exported, registered and played."""
import json
import os
import random
import shutil
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import spade_mini
from spade_mini.adapters import export
from spade_mini.designer.prompts import MAX_TURNS
from spade_mini.envs import EXAMPLES, HELDOUT
from spade_mini.adapters.registration import bundled_id, read_suite, turn_cap
from spade_mini.sandbox import SandboxedEnv, SandboxLimits, validate_env
from spade_mini.sandbox.spaces import CHARSET_SIZE, REPLACEMENT, into_space, text_space

BUNDLED_IDS = [bundled_id(e) for e in EXAMPLES + HELDOUT]

SEED_ECHO = '''
import random
class EchoEnv:
    def reset(self, seed=None):
        self.n = random.Random(seed).randint(0, 10**9)
        return f"seed={seed!r} n={self.n}", {}
    def step(self, action):
        return f"got {action}", 0.0, True, False, {}
'''

# What a designer may well write: units, arrows, accents; and what no Text space can hold as is.
UNICODE_ENV = '''
import random
class ThermostatEnv:
    """Reach the target temperature."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.now, self.goal = rng.randint(15, 25), rng.randint(26, 32)
        return (f"Heizung: {self.now} °C → {self.goal} °C. Answer the difference like \\\\boxed{3} 🔥"
                "\\ud800", {"note": "\\udfff"})
    def step(self, action):
        won = action.strip() == "\\\\boxed{%d}" % (self.goal - self.now)
        return (f"you sent {action}", float(won), True, False, {})
    def solution(self):
        return ["\\\\boxed{%d}" % (self.goal - self.now)]
'''


@pytest.mark.parametrize("env_id", BUNDLED_IDS)
def test_every_registered_id_makes_and_passes_check_env(env_id):
    env = gym.make(env_id)
    try:
        assert isinstance(env.unwrapped, SandboxedEnv)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no gymnasium warning either
            check_env(env.unwrapped)
        first = [env.reset(seed=123)[0]] + [env.reset()[0] for _ in range(2)]
    finally:
        env.close()
    with gym.make(env_id) as again:  # a fresh instance repeats seed 123 and the stream after it
        assert [again.reset(seed=123)[0]] + [again.reset()[0] for _ in range(2)] == first


@pytest.mark.parametrize("mode, vector_kwargs", [("sync", {}), ("async", {"shared_memory": False})])
def test_registered_ids_vectorise(mode, vector_kwargs):
    envs = gym.make_vec("spade_mini/GuessNumber-v0", num_envs=2, vectorization_mode=mode,
                        vector_kwargs=vector_kwargs)
    try:
        obs, _ = envs.reset(seed=0)
        assert len(obs) == 2 and all(o in envs.single_observation_space for o in obs)
        assert all(o.startswith("Guess my number") for o in obs)  # text, not shared-memory padding
        obs, reward, terminated, truncated, _ = envs.step(["\\boxed{32}", "\\boxed{x}"])
        assert "than 32" in obs[0] and "whole number" in obs[1] and list(reward) == [0.0, 0.0]
    finally:
        envs.close()


def test_ids_namespaces_and_turn_caps():
    registered = {k for k in gym.registry if k.startswith("spade_mini")}
    assert registered >= set(BUNDLED_IDS)
    assert {bundled_id(e) for e in EXAMPLES} == {k for k in registered if k.startswith("spade_mini/")}
    assert {bundled_id(e) for e in HELDOUT} == {k for k in registered
                                                if k.startswith("spade_mini_heldout/")}
    assert gym.spec("spade_mini/GuessNumber-v0").kwargs == {"name": "guess_number"}
    for e in EXAMPLES + HELDOUT:
        assert gym.spec(bundled_id(e)).max_episode_steps == turn_cap(e.source) == MAX_TURNS
    assert turn_cap("MAX_TURNS = 9\nclass AEnv:\n    pass\n") == 9
    assert turn_cap("MAX_TURNS = 900\nclass AEnv:\n    pass\n") == MAX_TURNS  # never past the contract
    assert turn_cap("class AEnv(ToolUseEnv):\n    max_turns = 5\n") == 5
    assert turn_cap("class AEnv:\n    pass\n") == turn_cap("not python (") == MAX_TURNS


def python(code: str) -> subprocess.CompletedProcess:
    """`code` run by a fresh interpreter (nothing imported or registered yet)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})


def test_import_registers_without_torch_or_a_child_process():
    code = ("import os, sys, spade_mini, gymnasium as gym\n"
            "kids = [open(f'/proc/self/task/{t}/children').read().split() for t in os.listdir('/proc/self/task')]\n"
            "print('torch' in sys.modules, sum(map(len, kids)), 'spade_mini/Nim-v0' in gym.registry)")
    out = python(code)
    assert out.stdout.split() == ["False", "0", "True"], out.stderr
    code = ("import gymnasium as gym\n"  # gymnasium's module:id form imports spade_mini itself
            "env = gym.make('spade_mini:spade_mini/Nim-v0')\n"
            "print(type(env.unwrapped).__name__, env.reset(seed=0)[0] in env.observation_space)\n"
            "env.close()")
    out = python(code)
    assert out.stdout.split() == ["SandboxedEnv", "True"], out.stderr


def test_reset_without_a_seed_continues_the_stream_of_the_last_seed():
    a, b = SandboxedEnv(SEED_ECHO), SandboxedEnv(SEED_ECHO)
    try:
        stream = [a.reset(seed=5)[0]] + [a.reset()[0] for _ in range(3)]
        assert [b.reset(seed=5)[0]] + [b.reset()[0] for _ in range(3)] == stream
        assert stream[0].startswith("seed=5 ") and len(set(stream)) == 4
        assert all("seed=None" not in obs for obs in stream)  # the child always gets a seed
        assert [b.reset(seed=6)[0], b.reset()[0]] != stream[:2]
        assert a.reset(seed=5)[0] == stream[0] and a.reset()[0] == stream[1]  # reseeding restarts it
    finally:
        a.close()
        b.close()
    c, d = SandboxedEnv(SEED_ECHO), SandboxedEnv(SEED_ECHO)  # never seeded: from entropy
    try:
        assert c.reset()[0] != d.reset()[0]
    finally:
        c.close()
        d.close()


def test_non_ascii_environment_validates_and_stays_inside_its_spaces():
    assert validate_env(UNICODE_ENV).ok
    with SandboxedEnv(UNICODE_ENV, limits=SandboxLimits(max_action_chars=40)) as env:
        obs, info = env.reset(seed=1)
        assert obs in env.observation_space
        assert "°C → " in obs and "Heizung" in obs  # kept exactly
        assert obs.endswith(f"{REPLACEMENT}{REPLACEMENT}")  # the emoji and the lone surrogate
        assert info == {"note": REPLACEMENT}
        assert env.notes == ["1 characters outside the observation space replaced"]
        sent = "\\boxed{7} ✓ 🎯" + "x" * 100
        assert sent not in env.action_space
        echoed = env.step(sent)[0].removeprefix("you sent ")
        assert echoed == into_space(sent, 40)[0] and len(echoed) == 40
        assert echoed in env.action_space and echoed.startswith("\\boxed{7} ✓ " + REPLACEMENT)
        check_env(env, skip_render_check=True)


def test_text_spaces_share_their_tables_but_not_their_generator():
    a, b = text_space(50), text_space(50)
    assert len(a.character_set) == CHARSET_SIZE and a.character_set is b.character_set
    assert "é→€中" in a and "\U0001F3AF" not in a and "\ud800" not in a and "x" * 51 not in a
    a.seed(1)
    first = a.sample()
    b.seed(2)
    a.seed(1)
    assert a.sample() == first and first in a
    assert "U+0000-U+FFFF" in repr(a) and len(repr(a)) < 100


# ---- export -------------------------------------------------------------------------------------

GUESS = EXAMPLES[0].source  # a valid environment, as a design would be
RENAMED = GUESS.replace("GuessNumberEnv", "PickEnv").replace("self.secret", "self.hidden")
TOOLS = next(e for e in EXAMPLES if e.setting == "tool_use").source


def design_row(env_id, skill, valid, regret, setting="games"):
    return {"iteration": int(env_id[2:6]), "kind": "design", "id": env_id, "skill": skill,
            "setting": setting, "valid": valid, "reasons": [] if valid else ["no"],
            "regret": regret, "reward": regret, "no_hint_solve_rate": 0.25,
            "hint_solve_rate": 0.25 + (regret or 0), "note": None}


@pytest.fixture()
def run_dir(tmp_path):
    """A run folder as train.py writes it: envs/<id>.py under their headers, samples.jsonl."""
    from spade_mini.run import RunDir
    run = RunDir(tmp_path / "runs", "hand")
    designs = [("it0000-00", GUESS, "logical_deduction", True, 0.5),
               ("it0000-01", "class BrokenEnv(:\n", "logical_deduction", False, None),
               ("it0001-00", RENAMED, "logical_deduction", True, 0.75),  # a copy: left out
               ("it0001-01", TOOLS, "api_orchestration", True, 0.0)]
    rows = []
    for env_id, source, skill, valid, regret in designs:
        setting = "tool_use" if "ToolUseEnv" in source else "games"
        rows.append(design_row(env_id, skill, valid, regret, setting))
        run.write_env(env_id, source, {"skill": skill, "valid": valid, "reasons": "a\nb",
                                       "regret": regret, "designer_reward": regret})
    run.append("samples.jsonl", rows + [{"kind": "episode", "env": "it0000-00"}])
    (run.path / "config.json").write_text(json.dumps({"max_turns": 6}))
    return run.path


def test_export_keeps_valid_distinct_environments_with_their_stats(run_dir, tmp_path, capsys):
    out = tmp_path / "suite"
    assert export.main([str(run_dir), "--out", str(out)]) == 0
    assert "exported 2 of 3 valid environments" in capsys.readouterr().out
    manifest, envs = read_suite(out)
    assert [e["design"] for e in envs] == ["it0000-00", "it0001-01"]
    guess, tools = envs
    assert guess["duplicates"] == ["it0001-00"] and guess["name"] == "GuessNumber-it0000-00"
    assert (guess["iteration"], guess["skill"], guess["setting"], guess["regret"]) == (0, "logical_deduction", "games", 0.5)
    assert (guess["no_hint_solve_rate"], guess["hint_solve_rate"], guess["max_episode_steps"]) == (0.25, 0.75, MAX_TURNS)
    assert tools["setting"] == "tool_use" and tools["iteration"] == 1
    assert (out / "it0000-00.py").read_text() == GUESS  # the source exactly, header gone
    assert manifest["run"] == "hand" and manifest["turns_played_in_run"] == 6

    assert export.main([str(run_dir), "--out", str(out), "--min-regret", "0.6"]) == 0
    assert [e["design"] for e in read_suite(out)[1]] == ["it0001-00"]  # the copy passes alone
    assert sorted(p.name for p in out.iterdir()) == ["it0001-00.py", "manifest.json"]
    assert export.main([str(run_dir), "--out", str(out), "--skills", "api_orchestration"]) == 0
    assert [e["design"] for e in read_suite(out)[1]] == ["it0001-01"]


def test_export_carries_each_environments_pool_statistics_from_the_newest_checkpoint(run_dir, tmp_path):
    from spade_mini.pool import Pool, PoolEnv
    pool = Pool((0.1, 0.9), 6, 4, 1, 8)
    pool.envs = [PoolEnv("it0000-00", "logical_deduction", "games", GUESS, 0, returns=[1.0, 0.0, 0.0, 0.0],
                         level=2, levels=4, plays=30)]
    pool.life = [pool.life_row(PoolEnv("it0001-01", "api_orchestration", "tool_use", TOOLS, 1, plays=8),
                               3, "learned")]
    for n, p in ((2, pool), (1, Pool((0.1, 0.9), 6, 4, 1, 8))):  # the newest checkpoint counts
        (run_dir / f"checkpoint-{n}").mkdir()
        (run_dir / f"checkpoint-{n}" / "state.pt").write_bytes(b"")
        (run_dir / f"checkpoint-{n}" / "pool.json").write_text(json.dumps(p.to_dict()))
    out = tmp_path / "suite"
    export.export_run(run_dir, out)
    guess, tools = read_suite(out)[1]
    assert guess["pool"] == {"level": 2, "levels": 4, "rate": 0.25, "plays": 30, "why": None}
    assert tools["pool"] == {"level": 0, "levels": 1, "rate": None, "plays": 8, "why": "learned"}
    for n in (1, 2):  # a run without a checkpoint: no pool statistics
        shutil.rmtree(run_dir / f"checkpoint-{n}")
    export.export_run(run_dir, out)
    assert read_suite(out)[1][0]["pool"] is None


def test_exported_suite_registers_and_plays_through_gym_make(run_dir, tmp_path):
    out = tmp_path / "suite"
    export.export_run(run_dir, out)
    ids = spade_mini.register_suite(out)
    assert ids == ["spade_mini_suite_hand/GuessNumber-it0000-00-v0",
                   "spade_mini_suite_hand/InventoryOrder-it0001-01-v0"]
    rng = random.Random(0)
    for env_id in ids:
        with gym.make(env_id) as env:
            assert env.spec.max_episode_steps == MAX_TURNS
            check_env(env.unwrapped)
            obs, info = env.reset(seed=3)
            for turn in range(MAX_TURNS):  # uninformed actions, never the solution
                action = (f"\\boxed{{{rng.randint(1, 64)}}}" if "tools" not in info
                          else f"<answer>{rng.randint(0, 500)}</answer>")
                obs, reward, terminated, truncated, _ = env.step(action)
                assert obs in env.observation_space and reward in (0.0, 1.0)
                if terminated or truncated:
                    break
            assert terminated or truncated


def test_export_errors_are_one_sentence(run_dir, tmp_path, capsys):
    cases = [([str(tmp_path / "nope"), "--out", str(tmp_path / "s")], "not a run folder"),
             ([str(run_dir), "--out", str(tmp_path / "s"), "--min-regret", "high"], "invalid float"),
             ([str(run_dir), "--out", str(tmp_path / "s"), "--skills", "juggling"], "unknown skill"),
             ([str(run_dir)], "--out"),
             ([str(run_dir), "--out", str(run_dir)], "neither empty nor an exported suite")]
    for argv, says in cases:
        assert export.main(argv) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err


def test_a_suite_from_elsewhere_is_checked(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"run": "x", "environments": [{"name": "A", "file": "../outside.py"}]}))
    with pytest.raises(ValueError, match="valid name and a source file"):
        spade_mini.register_suite(tmp_path)
    with pytest.raises(FileNotFoundError, match="spade_mini.adapters.export"):
        spade_mini.register_suite(tmp_path / "none")
