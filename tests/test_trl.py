"""An exported suite as TRL's GRPOTrainer `environment_factory` (spade_mini/adapters/trl_env.py): the
factory alone (win, loss, refusals, levels, crashes, no leftovers), the dataset, the tokenizer,
and TRL's own trainer for two steps on two hand-written environments."""
import json
import os
import re
import tempfile

import pytest

from hostile import strays
from scripted import parity_source
from spade_mini.adapters import trl_env
from spade_mini.envs import EXAMPLES
from spade_mini.pool import MIN_WEIGHT
from spade_mini.adapters.registration import read_suite
from spade_mini.adapters.trl_env import SuiteEnv, suite_rows, turn_limit

SUM = '''import random

class SumEnv:
    """Add two numbers."""
    def reset(self, seed=None, options=None):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(10, 99), rng.randint(10, 99)
        return "What is %d + %d? Answer in \\\\boxed{}." % (self.a, self.b), {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%d}" % (self.a + self.b)
        return ("Right." if won else "Wrong."), float(won), True, False, {}
'''
STALL = '''class StallEnv:
    """Never ends by itself."""
    max_turns = 3
    def reset(self, seed=None, options=None):
        return "Say anything.", {}
    def step(self, action):
        return "Go on.", 0.0, False, False, {}
'''
CRASH = STALL.replace('return "Go on.", 0.0, False, False, {}', 'raise RuntimeError("boom")')
NOSTART = "class BadEnv:\n    def reset(self, seed=None, options=None):\n        return 1 / 0\n"
DIGIT = parity_source(1000, levels=True)  # LastDigitEnv: 4 levels, level n adds n * 10**7


def write_suite(folder, sources: dict, pool: dict | None = None):
    entries = []
    for name, source in sources.items():
        (folder / f"{name}.py").write_text(source)
        entries.append({"name": name, "file": f"{name}.py", "setting": "games",
                        "no_hint_solve_rate": None, "pool": (pool or {}).get(name)})
    (folder / "manifest.json").write_text(json.dumps({"run": "hand", "environments": entries}))
    return folder


@pytest.fixture()
def suite(tmp_path):
    return write_suite(tmp_path, {"Digit": DIGIT, "Sum": SUM, "Stall": STALL, "Crash": CRASH,
                                  "Bad": NOSTART, "Guess": EXAMPLES[0].source},
                       pool={"Digit": {"level": 3, "levels": 4, "rate": 0.5}})


@pytest.fixture()
def tags(monkeypatch):
    """The tag of every sandboxed child a SuiteEnv starts (to look for strays)."""
    made = []

    class Recorded(trl_env.SandboxedEnv):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self.tag)
    monkeypatch.setattr(trl_env, "SandboxedEnv", Recorded)
    return made


def number(text):
    return int(re.search(r"last digit of (\d+)", text).group(1))


# ---- the factory alone ------------------------------------------------------------------------

def test_a_win_and_a_loss_score_the_episodes_return_and_a_call_after_the_end_is_refused(suite, tags):
    record = []
    env = SuiteEnv(suite, record=record)
    first = env.reset(env_id="Digit", seed=5, level=0, prompt=[])
    assert "act" in first and "Observation: What is the last digit of" in first
    n = number(first)
    reply = env.act(str(n % 10))  # a bare answer is boxed as the agent's would be
    assert reply.startswith("Right.") and "you won" in reply and "Do not call act again" in reply
    with pytest.raises(RuntimeError, match="already over"):
        env.act("3")
    assert env.get_reward() == 1.0
    env.reset(env_id="Digit", seed=5, level=0)
    assert "did not win" in env.act(f"\\boxed{{{(n + 1) % 10}}}")
    assert env.get_reward() == 0.0
    env.reset(env_id="Digit", seed=5, level=0)
    assert env.get_reward() == -1.0  # left unfinished: never more than a loss
    assert [(r["env_id"], r["seed"], r["return"], r["turns"], r["end"][:8]) for r in record] == [
        ("Digit", 5, 1.0, 1, "it ended"), ("Digit", 5, 0.0, 1, "it ended"), ("Digit", 5, -1.0, 0, "unfinish")]
    assert record[0]["observation"] == record[1]["observation"]  # a seed is one start state
    assert all(strays(t) == [] for t in tags) and len(tags) == 3  # each child ends when scored


def test_a_level_is_passed_through_and_the_pools_level_is_the_default(suite):
    env = SuiteEnv(suite)
    for level in range(4):
        n = number(env.reset(env_id="Digit", seed=1, level=level))
        assert 1000 + level * 10**7 <= n <= 1000 + level * 10**7 + 999
    assert number(env.reset(env_id="Digit", seed=1)) >= 1000 + 3 * 10**7  # the pool left it at 3
    with pytest.raises(ValueError, match="levels 0 to 3"):
        env.reset(env_id="Digit", seed=1, level=4)
    with pytest.raises(RuntimeError, match="no episode was started"):
        env.act("1")  # the refused reset left no half-made episode behind
    with pytest.raises(ValueError, match="not in this suite.*manifest"):
        env.reset(env_id="Nope", seed=1)
    env.get_reward()


def test_a_crash_or_a_failed_start_is_told_to_the_model_and_scored_and_the_turn_cap_ends_play(suite, tags):
    env = SuiteEnv(suite)
    env.reset(env_id="Crash", seed=0)
    with pytest.raises(RuntimeError, match="environment crashed.*boom.*episode is over"):
        env.act("x")
    with pytest.raises(RuntimeError, match="already over"):
        env.act("x")
    assert env.get_reward() == -1.0  # the contract's crash reward, as in training
    text = env.reset(env_id="Bad", seed=0)
    assert "failed to start" in text and "ZeroDivisionError" in text
    with pytest.raises(RuntimeError, match="already over"):
        env.act("x")
    assert env.get_reward() == 0.0
    assert "3 turn(s)" in env.reset(env_id="Stall", seed=0)
    assert env.act("a") == "Go on." and env.act("b") == "Go on."
    assert "no turns left after 3" in env.act("c")
    assert env.get_reward() == 0.0  # cut by the cap: nothing, as in training ("last")
    assert turn_limit(suite) == 25  # GuessNumber takes the contract's cap
    assert all(strays(t) == [] for t in tags)


def test_a_hundred_resets_leave_no_process_and_no_file(suite, tags, monkeypatch, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    fds = len(os.listdir("/proc/self/fd"))
    env = SuiteEnv(suite)
    for i in range(100):  # replaced episodes, some scored, some not
        env.reset(env_id=("Digit", "Sum", "Guess")[i % 3], seed=i)
        if i % 2:
            env.act("1")
            env.get_reward()
    env.get_reward()
    assert len(tags) == 100 and [t for t in tags if strays(t)] == []
    assert len(os.listdir("/proc/self/fd")) <= fds and list(scratch.iterdir()) == []
    env.reset(env_id="Guess", seed=0)  # an episode left open: closed at exit, or by close_environments
    assert strays(tags[-1])
    trl_env.close_environments()
    assert strays(tags[-1]) == []


def test_the_dataset_weights_environments_by_learnability_and_gives_each_row_a_seed(tmp_path):
    pool = {"Half": {"level": 2, "rate": 0.5}, "Easy": {"level": 0, "rate": 0.9},
            "Done": {"level": 1, "rate": 1.0}}
    folder = write_suite(tmp_path, {"Half": DIGIT, "Easy": DIGIT, "Done": DIGIT}, pool)
    rows = suite_rows(folder, rows=363, seed=3)
    counts = {k: sum(r["env_id"] == k for r in rows) for k in pool}
    assert counts == {"Half": 251, "Easy": 91, "Done": 21}  # 1 each + 360 as 0.25 : 0.09 : the floor 0.02
    assert MIN_WEIGHT == 0.02
    assert {r["env_id"]: r["level"] for r in rows} == {"Half": 2, "Easy": 0, "Done": 1}
    assert len({r["seed"] for r in rows}) == len(rows) and rows[0]["prompt"][0]["role"] == "user"
    assert [r["env_id"] for r in rows[:20]] != sorted(r["env_id"] for r in rows[:20])  # shuffled
    assert suite_rows(folder, rows=363, seed=3) == rows
    assert sorted(r["env_id"] for r in suite_rows(folder, rows=3)) == ["Done", "Easy", "Half"]
    with pytest.raises(ValueError, match="fewer than"):
        suite_rows(folder, rows=2)


def test_the_tokenizer_is_made_to_parse_tool_calls_or_refused():
    pytest.importorskip("trl")
    from transformers import AutoTokenizer
    from trl.chat_template_utils import supports_tool_calling

    from spade_mini.config import Config
    from spade_mini.policy import embedded_checkpoint
    from spade_mini.adapters.trl_env import prepare_tokenizer
    tok = AutoTokenizer.from_pretrained(embedded_checkpoint(Config().cache_dir))
    assert not supports_tool_calling(tok)  # SmolLM2's own template drops tool calls
    tok = prepare_tokenizer(tok)
    call = '<tool_call>\n{"name": "act", "arguments": {"answer": "7"}}\n</tool_call><|im_end|>'
    parsed = tok.parse_response(call, prefix="")
    assert parsed["tool_calls"][0]["function"] == {"name": "act", "arguments": {"answer": "7"}}
    plain = AutoTokenizer.from_pretrained(embedded_checkpoint(Config().cache_dir))
    plain.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    plain.get_vocab = dict  # a vocabulary without ChatML's markers
    with pytest.raises(ValueError, match="not ChatML"):
        prepare_tokenizer(plain)


# ---- TRL's trainer ------------------------------------------------------------------------------

class ScriptedGenerate:
    """Stands in for the tiny model's `generate` inside TRL. A first turn calls `act` with the
    right answer on rollouts 0 and 1 of each group of four and a wrong one on rollout 3; rollout 2
    answers in plain text (no tool call: its episode is never over). A turn after a tool reply
    ends with a plain message."""

    def __init__(self, tokenizer):
        self.tok, self.prompts, self.followups = tokenizer, [], []

    def __call__(self, input_ids, attention_mask=None, **_):
        import torch
        rows = []
        for i, (ids, mask) in enumerate(zip(input_ids, attention_mask)):
            text = self.tok.decode(ids[mask.bool()])
            if "<tool_response>" in text.rsplit("<|im_start|>user", 1)[-1]:
                self.followups.append(text)
                reply = "Done.<|im_end|>"
            else:
                self.prompts.append(text)
                obs = text.rsplit("Observation:", 1)[-1]
                digit, add = re.search(r"last digit of (\d+)", obs), re.search(r"(\d+) \+ (\d+)", obs)
                answer = (int(digit.group(1)) % 10 if digit else
                          int(add.group(1)) + int(add.group(2)) if add else 0)
                answer += i % 4 == 3  # one rollout in four is wrong
                reply = ('<tool_call>\n{"name": "act", "arguments": {"answer": "%s"}}\n</tool_call>'
                         "<|im_end|>" % answer) if i % 4 != 2 else "I pass.<|im_end|>"
            rows.append(self.tok(reply, add_special_tokens=False)["input_ids"])
        width = max(map(len, rows))
        pad = self.tok.convert_tokens_to_ids("<|im_end|>")
        tail = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, tail], dim=1)


def exported(tmp_path, sources: dict):
    """A run folder holding `sources` as valid designs, exported as a suite."""
    from spade_mini.adapters import export
    run = tmp_path / "runs" / "hand"
    (run / "envs").mkdir(parents=True)
    rows = []
    for i, source in enumerate(sources.values()):
        (run / "envs" / f"it0000-0{i}.py").write_text(source)
        rows.append(json.dumps({"kind": "design", "id": f"it0000-0{i}", "valid": True, "iteration": 0,
                                "no_hint_solve_rate": 0.5}))
    (run / "samples.jsonl").write_text("\n".join(rows) + "\n")
    export.export_run(run, tmp_path / "suite")
    return tmp_path / "suite"


def test_trls_grpo_trainer_trains_on_a_suite_through_the_sandbox(tags, tmp_path, monkeypatch):
    pytest.importorskip("trl")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from spade_mini.config import Config
    from spade_mini.policy import embedded_checkpoint
    from spade_mini.policy.load import tiny_model
    from spade_mini.adapters.trl_env import prepare_tokenizer

    suite = exported(tmp_path, {"Digit": DIGIT, "Sum": SUM, "Crash": CRASH})
    digit, add, crash = ("LastDigit-it0000-00", "Sum-it0000-01", "Stall-it0000-02")
    assert [e["name"] for e in read_suite(suite)[1]] == [digit, add, crash]
    tok = prepare_tokenizer(AutoTokenizer.from_pretrained(embedded_checkpoint(Config().cache_dir)))
    model = tiny_model(tok)
    model.generate = script = ScriptedGenerate(tok)
    rows = [{"env_id": digit, "seed": 11, "level": 1, "prompt": trl_env.EMPTY_PROMPT},
            {"env_id": add, "seed": 12, "level": 0, "prompt": trl_env.EMPTY_PROMPT},
            {"env_id": crash, "seed": 13, "level": 0, "prompt": trl_env.EMPTY_PROMPT}] * 2
    record, logged = [], []

    class Logs(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "rewards/SuiteEnv/mean" in logs:
                logged.append(logs["rewards/SuiteEnv/mean"])

    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=12,
                      num_generations=4, max_completion_length=200, max_tool_calling_iterations=2,
                      learning_rate=1e-4, beta=0.0, use_cpu=True, bf16=False, report_to="none",
                      save_strategy="no", logging_steps=1, shuffle_dataset=False, seed=0)
    trainer = GRPOTrainer(model=model, processing_class=tok, args=args,
                          train_dataset=Dataset.from_list(rows), callbacks=[Logs()],
                          environment_factory=lambda: SuiteEnv(suite, record=record))
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()

    assert trainer.state.global_step == 2 and len(record) == 24  # 2 steps x 3 rows x 4 rollouts
    seen = {(r["env_id"], r["seed"], r["level"]) for r in record}
    assert seen == {(digit, 11, 1), (add, 12, 0), (crash, 13, 0)}  # reset got each row's columns
    for g in range(0, 24, 4):  # a group: one row, one start state, the same first prompt
        group = record[g:g + 4]
        assert len({(r["env_id"], r["seed"], r["observation"]) for r in group}) == 1
        assert len(set(script.prompts[g:g + 4])) == 1 and group[0]["observation"] in script.prompts[g]
        returns = [(r["return"], r["turns"]) for r in group]
        if group[0]["env_id"] == crash:  # crashed (-1, the crash reward) or left unfinished (-1)
            assert returns == [(-1.0, 1), (-1.0, 1), (-1.0, 0), (-1.0, 1)], returns
            assert group[0]["end"].startswith("the environment crashed")
        else:
            assert returns == [(1.0, 1), (1.0, 1), (-1.0, 0), (0.0, 1)], returns
    crashed = [t for t in script.followups if "environment crashed" in t.rsplit("<tool_response>", 1)[-1]]
    assert len(crashed) == 6 and "boom" in crashed[0]  # the model was told, and the trainer went on
    assert logged == pytest.approx([sum(r["return"] for r in record[s:s + 12]) / 12 for s in (0, 12)])
    assert any(not p.equal(q) for p, q in zip(model.parameters(), before))  # it trained
    assert len(tags) == 24 and [t for t in tags if strays(t)] == []  # the unfinished ones too


def test_the_example_trains_the_tiny_model_on_a_run_folder(suite, tags, tmp_path, capsys):
    """The real path end to end: the tiny model generates inside TRL (it calls no tool)."""
    pytest.importorskip("trl")
    from spade_mini.adapters import export, trl_grpo
    run = tmp_path / "runs" / "hand"
    (run / "envs").mkdir(parents=True)
    (run / "envs" / "it0000-00.py").write_text(DIGIT)
    (run / "samples.jsonl").write_text(json.dumps({"kind": "design", "id": "it0000-00", "valid": True,
                                                   "iteration": 0, "no_hint_solve_rate": 0.5}) + "\n")
    assert trl_grpo.main([str(run), "--steps", "1", "--generations", "2", "--rows-per-step", "1",
                          "--max-completion-length", "8", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "exported 1 environments" in out and "step 1: mean return -1.000" in out  # it never plays
    assert "2 episodes over 1 environments: 0 won; ends: {'unfinished': 2}" in out
    assert (run / "trl-suite" / export.MANIFEST).is_file() and len(tags) == 2
    assert [t for t in tags if strays(t)] == []
