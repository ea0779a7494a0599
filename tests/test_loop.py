"""The full SPADE loop: one iteration with a scripted designer and the tiny model, and train.py
writing a run directory that `--resume` continues exactly."""
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from spade_mini.config import Config
from spade_mini.designer import GAME_EXAMPLE, SYSTEM, skills_for
from spade_mini.loop import State, one_iteration
from spade_mini.model import Completion
from spade_mini.reinforce import make_optimizer

ROOT = Path(__file__).resolve().parents[1]


class ScriptedDesigner:
    """The tiny policy for every role, except that designer prompts get prepared replies."""

    def __init__(self, policy, replies):
        self.policy, self.replies = policy, list(replies)

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def generate(self, chats, max_new_tokens, temperature=None, tools=None):
        if chats and chats[0][0]["content"] == SYSTEM:
            out = []
            for chat in chats:
                text = self.replies.pop(0)
                ids = self.policy.tokenizer(text, add_special_tokens=False)["input_ids"]
                out.append(Completion(text, self.policy.prompt_ids(chat), ids + [self.policy.pad_id], True))
            return out
        return self.policy.generate(chats, max_new_tokens, temperature)


def test_one_iteration_trains_both_roles(tiny_policy, tmp_path):
    cfg = Config(model="tiny", designs_per_iteration=2, plays_per_design=2, max_turns=2,
                 turn_max_new_tokens=8, hint_source="env", lr=1e-3)
    valid = f"```python\n{GAME_EXAMPLE}\n```"
    invalid = "```python\nclass BrokenEnv:\n    def reset(self, seed=None):\n        return 42\n```"
    policy = ScriptedDesigner(tiny_policy, [valid, invalid])
    before = {n: p.detach().clone() for n, p in tiny_policy.model.named_parameters() if p.requires_grad}
    state = State(policy, make_optimizer(tiny_policy.model, cfg.lr), skills_for("games"), None, None,
                  random.Random(0))
    row, designs, playables, episodes, scores = one_iteration(state, cfg)

    assert [d.valid for d in designs] == [True, False]
    assert designs[1].reasons  # the broken design says why
    assert len(playables) == 1 and len(episodes) == 4  # K=2 paired seeds x 2 arms
    seeds = {arm: [e.job.seed for e in episodes if e.job.arm == arm] for arm in ("no_hint", "hint")}
    assert seeds["no_hint"] == seeds["hint"]  # paired seeds
    assert row["valid_fraction"] == 0.5 and row["designs"] == 2
    # designer rewards: max(0, regret) >= 0 for the valid design, -1 for the invalid one
    assert row["designer_reward"] == pytest.approx((max(0.0, scores[designs[0].id].regret) - 1.0) / 2)
    for key in ("no_hint_return", "hint_return", "regret", "agent_loss", "designer_loss",
                "tokens_generated", "tokens_per_s", "time_design_s", "time_play_s", "time_update_s",
                "peak_memory_mb"):
        assert row[key] is not None, key
    assert row["trained_tokens"] > 0 and row["update_skipped"] is None
    after = dict(tiny_policy.model.named_parameters())
    assert any(not (before[n] == after[n]).all() for n in before)  # the update moved LoRA weights
    assert state.iteration == 1


def _train(tmp_path, name, *extra):
    cmd = [sys.executable, "train.py", "--model", "tiny", "--fixed-pool", "--designs-per-iteration", "2",
           "--plays-per-design", "2", "--max-turns", "2", "--turn-max-new-tokens", "6",
           "--temperature", "1.0", "--run-dir", str(tmp_path), "--name", name, "--save-every", "1",
           "--preset", "cpu-smoke", *extra]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
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
    assert json.loads((resumed / "config.json").read_text())["fixed_pool"] is True
    assert _comparable(resumed) == _comparable(whole)
    episodes = lambda run: [(r["env"], r["seed"], r["transcript"]) for r in map(  # noqa: E731
        json.loads, (run / "samples.jsonl").read_text().splitlines()) if r["kind"] == "episode"]
    assert episodes(resumed) == episodes(whole)


def test_resume_without_checkpoint_is_one_sentence(tmp_path):
    cmd = [sys.executable, "train.py", "--model", "tiny", "--run-dir", str(tmp_path), "--name", "none",
           "--resume"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "no checkpoint" in out.stderr and "Traceback" not in out.stderr
