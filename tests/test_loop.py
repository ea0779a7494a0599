"""The full SPADE loop: one iteration with a scripted designer and the tiny model, and train.py
writing a run directory that `--resume` continues exactly."""
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scripted import ScriptedDesigner, ScriptedPlayer, parts

from spade_mini.config import Config
from spade_mini.designer import skills_for
from spade_mini.designer.prompts import GAME_EXAMPLE, SYSTEM
from spade_mini.loop import State, one_iteration
from spade_mini.reinforce import make_optimizer

ROOT = Path(__file__).resolve().parents[1]


def test_one_iteration_scores_both_roles_and_the_agents_step_is_the_agents(tiny_policy, tmp_path):
    """On the tiny model no agent sample is informative (every return is 0), so only the designer
    has a signal: with one shared adapter that update is skipped and the weights stay; with
    --designer-only-steps the same iteration steps on the designer's samples (both roles in one
    update: tests/test_wiring.py)."""
    from spade_mini.reinforce import DESIGNER_ONLY
    novel = GAME_EXAMPLE.replace("randint(20, 40 - 5 * level)", "randint(15, 35 - 5 * level)")  # a copy is a duplicate
    valid = f"```python\n{novel}\n```"
    invalid = "```python\nclass BrokenEnv:\n    def reset(self, seed=None):\n        return 42\n```"
    for designer_only in (False, True):
        # the valid design is the prompt's example with another range: a re-skin the novelty gate
        # refuses (tests/test_gate.py), so it is off here
        cfg = Config(model="tiny", designs_per_iteration=2, plays_per_design=2, max_turns=5,
                     turn_max_new_tokens=8, hint_source="env", lr=1e-3, designer_only_steps=designer_only,
                     novelty=False)
        policy = ScriptedDesigner(tiny_policy, [valid, invalid])
        before = {n: p.detach().clone() for n, p in tiny_policy.model.named_parameters() if p.requires_grad}
        state = State(policy, make_optimizer(tiny_policy.model, cfg.lr), skills_for("games"), None, None,
                      random.Random(0))
        row, designs, playables, episodes, scores = parts(one_iteration(state, cfg))

        assert [d.valid for d in designs] == [True, False]
        assert designs[1].reasons  # the broken design says why
        # K=2 paired seeds x 2 arms; every return is 0, so the pool admits nothing, and the
        # iteration's other 2 no-hint episodes (N x K = 4, what every arm plays) replay the new design
        assert {p.id for p in playables} == {designs[0].id} and len(episodes) == 6
        seeds = {arm: [e.job.seed for e in episodes[:4] if e.job.arm == arm] for arm in ("no_hint", "hint")}
        assert seeds["no_hint"] == seeds["hint"]  # paired seeds
        assert row["no_hint_episodes"] == 4 and row["unspent_episodes"] == 0 and row["pool_size"] == 0
        assert row["valid_fraction"] == 0.5 and row["designs"] == 2
        # designer rewards: the valid design's own; the invalid one (reset returns no tuple) is
        # graded at "reset": -1 + (4 + 1) / 16 under the default blend reward
        # (docs/the-learning-signal.md)
        assert designs[1].stage == "reset" and designs[1].reward == pytest.approx(-1 + 5 / 16)
        assert designs[0].reward == scores[designs[0].id].reward
        assert row["designer_reward"] == pytest.approx((designs[0].reward + designs[1].reward) / 2)
        for key in ("no_hint_return", "hint_return", "regret", "tokens_generated", "tokens_per_s",
                    "time_design_s", "time_play_s", "time_update_s", "peak_memory_mb"):
            assert row[key] is not None, key
        assert row["informative_episodes"] == 0 and row["agent_loss"] == 0.0
        after = dict(tiny_policy.model.named_parameters())
        moved = any(not (before[n] == after[n]).all() for n in before)
        if designer_only:
            assert row["trained_tokens"] > 0 and row["update_skipped"] is None and moved
            assert row["designer_loss"] != 0.0 and row["designer_grad_norm"] > 0
            assert row["agent_grad_norm"] is None  # the agent had no live sample
        else:
            assert row["update_skipped"] == DESIGNER_ONLY and row["trained_tokens"] == 0 and not moved
        assert state.iteration == 1


def train_command(tmp_path, name, *extra) -> list[str]:
    """train.py on the tiny model and the fixed pool: about a second per iteration."""
    return [sys.executable, "train.py", "--model", "tiny", "--pool-fill", "examples", "--designs-per-iteration", "2",
            "--plays-per-design", "2", "--max-turns", "2", "--turn-max-new-tokens", "6",
            "--temperature", "1.0", "--run-dir", str(tmp_path), "--name", name, "--save-every", "1",
            "--preset", "cpu-smoke", *extra]


def _train(tmp_path, name, *extra):
    out = subprocess.run(train_command(tmp_path, name, *extra), cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    sandbox_lines = [ln for ln in out.stdout.splitlines() if ln.startswith("sandbox: ")]
    assert len(sandbox_lines) == 1 and "rlimits" in sandbox_lines[0]  # the active layers, once
    return tmp_path / name


def _comparable(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("time_", "tokens_per_s", "peak_"))} for r in rows]


def test_train_writes_run_and_resume_matches_uninterrupted(tmp_path):
    whole = _train(tmp_path, "whole", "--iterations", "2")
    for item in ("config.json", "metrics.jsonl", "samples.jsonl", "memory.jsonl", "checkpoint-1"):
        assert (whole / item).exists(), item
    assert (whole / "checkpoint-1" / "trainable.safetensors").is_file()

    first = _train(tmp_path, "split", "--iterations", "1")
    assert [r["iteration"] for r in _comparable(first)] == [0]
    # only the run's name: the rest comes from the run's own config.json
    out = subprocess.run([sys.executable, "train.py", "--run-dir", str(tmp_path), "--name", "split",
                          "--iterations", "2", "--resume"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    resumed = tmp_path / "split"
    assert json.loads((resumed / "config.json").read_text())["pool_fill"] == "examples"
    assert _comparable(resumed) == _comparable(whole)
    episodes = lambda run: [(r["env"], r["seed"], r["transcript"]) for r in map(  # noqa: E731
        json.loads, (run / "samples.jsonl").read_text().splitlines()) if r["kind"] == "episode"]
    assert episodes(resumed) == episodes(whole)


def test_two_runs_with_one_seed_are_identical(tmp_path):
    from safetensors.torch import load_file
    a = _train(tmp_path, "a", "--iterations", "2", "--seed", "3")
    b = _train(tmp_path, "b", "--iterations", "2", "--seed", "3")
    assert _comparable(a) == _comparable(b)
    wa, wb = (load_file(run / "checkpoint-1" / "trainable.safetensors") for run in (a, b))
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)


def test_resume_without_checkpoint_is_one_sentence(tmp_path):
    cmd = [sys.executable, "train.py", "--model", "tiny", "--run-dir", str(tmp_path), "--name", "none",
           "--resume"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "no checkpoint" in out.stderr and "Traceback" not in out.stderr


# --- scoring the plays: crashes, failed resets, hint-less environments ----------------------------

GOLDEN = json.loads((ROOT / "tests" / "golden" / "reinforce_cases.json").read_text())


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["play_scoring"], ids=lambda c: c["name"])
def test_score_playables_golden(case):
    from spade_mini.agent import Episode, Job
    from spade_mini.agent import Playable
    from spade_mini.reward import LearningPotential, ScoreSettings, score_playables
    episodes = []
    for e in case["episodes"]:
        ep = Episode(job=Job("", e["seed"], e["arm"], None, "env"))
        ep.ret, ep.hint_shown, ep.crashed = e["ret"], e["hint_shown"], e["crashed"]
        episodes.append(ep)
    scores, trained = score_playables([Playable("env", "skill", "games", "")], episodes,
                                      ScoreSettings(case["designer_reward"]), LearningPotential())
    score = scores["env"]
    assert (score.regret is None) if case["regret"] is None else score.regret == pytest.approx(case["regret"])
    assert score.no_hint_solve_rate == pytest.approx(case["no_hint_solve_rate"])
    assert (score.failure is not None) == case["failure"]
    assert sorted(e.job.seed for e in trained) == case["trained_seeds"]
    assert all(e.job.arm == "no_hint" and e.crashed is None for e in trained)


CRASHY = '''import random, re

class CrashyEnv:
    """Guess a digit; any action that is not boxed raises."""
    def reset(self, seed=None):
        self.turn, self.secret = 0, random.Random(seed).randint(0, 9)
        return "Say a digit, e.g. \\\\boxed{3}.", {}

    def step(self, action):
        self.turn += 1
        if action and not action.startswith(("\\\\boxed{", "<tool_call>")):
            raise ValueError("plain text")  # the validator's probes never send plain text
        if action.strip() == "\\\\boxed{%d}" % self.secret:
            return "Yes.", 1.0, True, False, {}
        return "No.", 0.0, self.turn >= 3, False, {}

    def hint(self):
        return "Answer with digits inside the box."

    def solution(self):
        return ["\\\\boxed{%d}" % self.secret]
'''


def passes_without_hint(tiny_policy, replies, no_hint_reply="I pass.") -> ScriptedPlayer:
    """Designer replies as prepared; the agent answers in the box when it was given a hint, and
    `no_hint_reply` when not (finished turns either way)."""
    return ScriptedPlayer(tiny_policy, lambda chat: "\\boxed{3}" if "HINT:" in chat[0]["content"] else no_hint_reply,
                          replies)


def test_a_crash_in_step_counts_against_the_design_not_as_regret(tiny_policy):
    """The crash of an environment once scored -1 in the no-hint arm only (the hinted agent
    answers in the box) and so earned it the highest regret, 1."""
    from spade_mini.sandbox import validate_env
    assert validate_env(CRASHY).ok  # the probe actions are all boxed numbers or ignored
    cfg = Config(model="tiny", designs_per_iteration=1, plays_per_design=2, max_turns=2,
                 turn_max_new_tokens=10, hint_source="env", invalid_reward=-1.0)
    policy = passes_without_hint(tiny_policy, [f"```python\n{CRASHY}\n```"])
    state = State(policy, make_optimizer(tiny_policy.model, 1e-3), skills_for("games"), None, None,
                  random.Random(0))
    row, designs, playables, episodes, scores = parts(one_iteration(state, cfg))
    assert designs[0].validation.ok  # it passed validation ...
    assert all(e.crashed == "step" for e in episodes if e.job.arm == "no_hint")
    assert all(e.crashed is None for e in episodes if e.job.arm == "hint")
    score = scores[designs[0].id]
    assert score.failure and "crashed in play" in score.failure and score.regret is None
    # ... and is invalid after play, at the last stage of the graded table
    assert not designs[0].valid and designs[0].stage == "play"
    assert designs[0].reward == pytest.approx(-1 + 14 / 16)  # "play", under the default blend reward
    assert row["crashed_episodes"] >= 1 and row["regret"] is None


def test_a_design_without_hint_plays_no_hint_arm_and_earns_no_regret(tiny_policy):
    head, tail = GAME_EXAMPLE.split("    def hint(self):")
    source = head + tail[tail.index("    def solution(self):"):]  # the example without its hint()
    cfg = Config(model="tiny", designs_per_iteration=1, plays_per_design=2, max_turns=5,
                 turn_max_new_tokens=10, hint_source="env", novelty=False)  # the prompt's example, re-skinned
    policy = ScriptedDesigner(tiny_policy, [f"```python\n{source}```"])
    state = State(policy, make_optimizer(tiny_policy.model, 1e-3), skills_for("games"), None, None,
                  random.Random(0))
    row, designs, playables, episodes, scores = parts(one_iteration(state, cfg))
    assert designs[0].valid and not designs[0].validation.has_hint
    assert {e.job.arm for e in episodes} == {"no_hint"} and len(episodes) == 2
    score = scores[designs[0].id]
    assert score.regret is None and score.note == "no hint: regret not measured"
    assert score.reward == 0.0 and row["unhinted_environments"] == 1


def test_a_run_saved_before_the_package_had_folders_resumes(tmp_path):
    """tests/golden/old_layout_run: iteration 0 of a tiny fixed-pool run, written when the
    package was one flat folder (its checkpoint pickles LearningPotential by the old module path
    and keeps the torch stream twice) and the fixed pool was a rotation (--fixed-pool, since
    replaced by --pool-fill examples). It resumes as the run its config describes, the examples'
    pool with no hint arm, and the restored random streams decide what it draws: two resumes of
    the same checkpoint play the same environments and seeds. (The rotation's own draws,
    expected.json's episodes, can no longer be played: the rotation is gone.)"""
    import shutil

    import torch

    from spade_mini.reward import LearningPotential
    from spade_mini.run import RunDir

    golden = ROOT / "tests" / "golden" / "old_layout_run"
    expected = json.loads((golden / "expected.json").read_text())
    played = []
    for name in ("old", "again"):
        shutil.copytree(golden, tmp_path / name, ignore=shutil.ignore_patterns("expected.json"))
        assert "extra" in torch.load(tmp_path / name / "checkpoint-0" / "state.pt", weights_only=False)
        out = subprocess.run([sys.executable, "train.py", "--run-dir", str(tmp_path), "--name", name,
                              "--iterations", "2", "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "resumed" in out.stdout
        rows = [json.loads(line) for line in (tmp_path / name / "samples.jsonl").read_text().splitlines()]
        played.append([[r["env"], r["seed"], r["arm"]] for r in rows if r["kind"] == "episode" and r["iteration"] == 1])
    assert played[0] == played[1] and played[0]
    assert all(env.startswith("example-") and arm == "no_hint" for env, _, arm in played[0])

    # the checkpoint it writes now holds plain data, and reads back the same way
    state = torch.load(tmp_path / "old" / "checkpoint-1" / "state.pt", weights_only=False)
    assert "extra" not in state and "torch_rng" not in state
    assert set(state["potential"]) == {"gamma_fast", "gamma_slow", "fast", "slow"}
    assert RunDir(tmp_path, "old").latest_checkpoint().name == "checkpoint-1"

    # what the old checkpoint held comes back as the objects of the new layout
    from spade_mini.run.rundir import _old_layout_state
    potential, streams = _old_layout_state(torch.load(golden / "checkpoint-0" / "state.pt", weights_only=False))
    assert isinstance(potential, LearningPotential)
    assert (potential.fast, potential.slow) == (expected["fast"], expected["slow"])
    assert len(streams) == expected["streams"]


LEAKY = '''import random

class TwoDigitEnv:
    """Name the two-digit number one more than the one shown."""
    def reset(self, seed=None):
        self.secret = random.Random(seed).randint(10, 99)
        return "Name the number one more than %d inside \\\\boxed{}." % (self.secret - 1), {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%d}" % self.secret
        return ("Yes." if won else "No."), float(won), True, False, {}

    def hint(self):
        return "The number is %d." % self.secret

    def solution(self):
        return ["\\\\boxed{%d}" % self.secret]
'''


def hint_copier(tiny_policy, replies) -> ScriptedPlayer:
    """An agent double that copies the first number of its hint into the box, and passes without one."""
    def act(chat):
        found = re.search(r"HINT: \D*(\d+)", chat[0]["content"])
        return f"\\boxed{{{found.group(1)}}}" if found else "\\boxed{0}"
    return ScriptedPlayer(tiny_policy, act, replies)


@pytest.mark.parametrize("designer_reward", ["regret", "blend"])
def test_a_hint_that_states_the_answer_earns_no_regret(tiny_policy, designer_reward):
    """Through the training code: without the hint check the copier would win every hint-arm
    episode (regret 1, the top designer reward); with it the design is refused at the gate
    (stage `hint`) and earns less than the same design without any hint (a valid one)."""
    from spade_mini.sandbox import validate_env
    assert validate_env(LEAKY).ok  # validation alone does not read what a hint says
    from spade_mini.agent import Job, PlaySettings, play_episodes
    from spade_mini.sandbox import solve
    (solved,) = solve(LEAKY, [5], max_actions=2)
    (won,) = play_episodes(hint_copier(tiny_policy, []), [Job(LEAKY, 5, "hint", solved.hint, "x")],
                           PlaySettings(max_turns=2, max_new_tokens=4))
    assert won.ret == 1.0  # the hint alone wins: the regret the hint check refuses to pay
    cfg = Config(model="tiny", designs_per_iteration=1, plays_per_design=4, max_turns=2,
                 turn_max_new_tokens=10, hint_source="env", designer_reward=designer_reward)
    designs = []
    for source in (LEAKY, LEAKY.replace('return "The number is %d." % self.secret', 'return ""')):
        policy = hint_copier(tiny_policy, [f"```python\n{source}\n```"])
        state = State(policy, make_optimizer(tiny_policy.model, 1e-3), skills_for("games"), None, None,
                      random.Random(0))
        designs += parts(one_iteration(state, cfg))[1]
    leaky, plain = designs
    assert leaky.stage == "hint" and "gives the answer away" in leaky.reasons[0], leaky.reasons
    assert plain.valid and leaky.reward < plain.reward