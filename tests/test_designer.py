"""The designer: skills, prompts, code extraction, hints, and a design flow through the sandbox."""
import random
import re
import statistics
import pytest
from scripted import ScriptedDesigner

from spade_mini.designer import (NO_CLASS, SKILLS, DesignSettings, Corpus, Document, EnvRecord, Memory, SkillError,
                                  design_environments, design_record, extract_code, generate_hints, prompts,
                                  skill_schedule, skills_for)
from spade_mini.designer.prompts import GAME_EXAMPLE, TOOL_EXAMPLE, designer_prompt, hint_prompt, with_hint
from spade_mini.policy import decoding

GAME_KEYS = ["pattern_recognition", "logical_deduction", "strategic_planning",
             "mathematical_reasoning", "spatial_reasoning", "causal_inference", "memory_recall",
             "optimization", "language_understanding"]
TOOL_KEYS = ["api_orchestration", "data_retrieval", "state_modification", "error_recovery",
             "tool_selection", "multi_step_workflows"]


def test_skills_per_setting_and_mix():
    assert [s.key for s in skills_for("games")] == GAME_KEYS
    assert [s.key for s in skills_for("tool_use")] == TOOL_KEYS
    assert all(s.description and s.setting == "tool_use" for s in SKILLS["tool_use"])
    mix = skills_for("mix")
    assert len(mix) == 15 and [s.setting for s in mix[:4]] == ["games", "tool_use"] * 2
    assert [s.key for s in skills_for("games", ["optimization", "memory_recall"])] == [
        "optimization", "memory_recall"]
    assert [s.key for s in skills_for("mix", ["error_recovery", "optimization"])] == [
        "error_recovery", "optimization"]
    with pytest.raises(SkillError, match="choose from"):
        skills_for("games", ["api_orchestration"])
    with pytest.raises(SkillError, match="games, tool_use or mix"):
        skills_for("chess")


def test_skill_schedule_is_round_robin():
    skills = skills_for("games")[:4]
    keys = lambda it, n, group=1: [s.key for s in skill_schedule(skills, it, n, group)]
    assert keys(0, 3) == GAME_KEYS[:3]
    assert keys(1, 3) == [GAME_KEYS[3], GAME_KEYS[0], GAME_KEYS[1]]
    assert keys(0, 6) == GAME_KEYS[:4] + GAME_KEYS[:2]
    assert keys(1, 4, group=2) == [GAME_KEYS[2]] * 2 + [GAME_KEYS[3]] * 2
    assert keys(5, 3) == keys(5, 3)


@pytest.mark.parametrize("setting", ["games", "tool_use"])
def test_prompt_contents_with_and_without_corpus_and_memory(setting):
    skill = skills_for(setting)[1]
    bare = designer_prompt(skill, None, "")
    assert [m["role"] for m in bare] == ["system", "user"]
    user = bare[1]["content"]
    assert skill.name in user and skill.description in user
    assert "REFERENCE_DOCUMENT" not in user and "REFERENCE_ENVIRONMENTS" not in user
    assert "random.Random" in user and "25 turns" in user and "never reveal the answer" in user
    assert user.count("```python") == 2  # the example, and the request for the reply
    if setting == "games":
        assert "\\boxed{" in user and "ToolUseEnv" not in user
    else:
        assert "from tooluse import ToolUseEnv" in user and "<tool_call>" in user
    assert len(" ".join(m["content"] for m in bare).split()) < 400  # read by a 135M model

    document = Document("Ferns reproduce with spores.", "bundled", "science-99")
    memory = Memory()
    memory.add(EnvRecord("e1", 1, setting, skill.key, "Spore counting", "class SporeEnv:\n    pass",
                         True, [], 0.5, 0.9, 0.4))
    block = memory.render(memory.select(skill.key, random.Random(0)))
    full = designer_prompt(skill, document, block)[1]["content"]
    assert "<REFERENCE_DOCUMENT>\nFerns reproduce with spores.\n</REFERENCE_DOCUMENT>" in full
    assert "never mention it" in full
    assert "Spore counting" in full and "DIFFERENT" in full
    assert full.index("REFERENCE_DOCUMENT") < full.index("REFERENCE_ENVIRONMENTS") < full.index("NEW")
    # the memory's reference is a whole environment: the fixed example is left out then
    assert "A short complete example" not in full and "A short complete example" in user


@pytest.mark.parametrize("setting", ["games", "tool_use"])
def test_the_shared_first_prompt_opens_every_row_alike_and_leaves_nothing_out(setting, tiny_policy):
    """A design call's rows differ in skill, document and references: with `shared_first` they
    open with the same contract and example (one prefix whose keys and values the call computes
    once), and each row still holds everything the classic prompt holds, the example included."""
    rng, memory = random.Random(0), Memory()
    for i, skill in enumerate(skills_for(setting)):
        memory.add(EnvRecord(f"e{i}", 1, setting, skill.key, f"Theme {i}", f"class T{i}Env:\n    pass",
                             True, [], 0.5, 0.9, 0.4))
    rows = []
    for i, skill in enumerate(skills_for(setting)[:4]):
        document = Document(f"Document number {i} about ferns.", "bundled", f"science-{i}")
        block = memory.render(memory.select(skill.key, rng))
        shared = designer_prompt(skill, document, block, turn_tokens=48, shared_first=True)[1]["content"]
        classic = designer_prompt(skill, document, block, turn_tokens=48)[1]["content"]
        for part in (skill.name, skill.description, document.text, block, "48 tokens", "levels = 4"):
            assert part in shared and part in classic
        assert "A short complete example" in shared and "A short complete example" not in classic
        assert shared.index("A short complete example") < shared.index(document.text) < shared.index(block)
        rows.append(tiny_policy.prompt_ids([{"role": "user", "content": shared}]))
    example = tiny_policy.count_tokens(GAME_EXAMPLE if setting == "games" else TOOL_EXAMPLE)
    assert min(decoding.shared_prefixes(rows)) > example + 200  # the contract, the rules and the example


@pytest.mark.parametrize("text, expected", [
    ("Sure!\n```python\nclass AEnv:\n    pass\n```\nHope it helps.", "class AEnv:\n    pass\n"),
    ("```py\nclass BEnv: pass\n```", "class BEnv: pass\n"),
    ("```Python\nx = 1\n```\nthen\n```python\nclass CEnv: pass\n```", "class CEnv: pass\n"),
    ("Here:\n```python\nimport random\nclass DEnv:\n    def reset(self", "import random\nclass DEnv:\n    def reset(self\n"),
    ("```\nclass EEnv: pass\n```", "class EEnv: pass\n"),
    ("import re\n\nclass FEnv:\n    pass", "import re\n\nclass FEnv:\n    pass\n"),
    ("I cannot write that.", None),
    ("def helper():\n    return 1", None),
])
def test_extract_code_on_messy_replies(text, expected):
    assert extract_code(text) == expected


def test_hint_prompt_and_batched_hints(tiny_policy):
    games = hint_prompt("class GEnv: pass", "games")
    tools = hint_prompt("class TEnv: pass", "tool_use")
    assert "class GEnv: pass" in games[1]["content"] and "\\boxed" in games[0]["content"]
    assert "placeholders" in tools[0]["content"] and "never state the exact answer" in games[0]["content"].lower()
    assert with_hint("Obs.", "Halve it.") == "Obs.\n\nHINT: Halve it."
    policy = ScriptedDesigner(tiny_policy, ["Hint: Halve the range.", "  Call lookup first.  "])
    hints = generate_hints(policy, ["class AEnv: pass", "class BEnv: pass"], ["games", "tool_use"],
                           max_new_tokens=40)
    assert hints == ["Halve the range.", "Call lookup first."]
    assert len(policy.calls) == 1 and policy.calls[0][1:] == (40, 0.3)
    assert generate_hints(policy, [], [], 40) == [] and len(policy.calls) == 1


def win_target_sum(obs):
    target = int(re.search(r"target (\d+)", obs).group(1))
    moves = []
    while target > 0:
        moves.append(min(9, target))
        target -= moves[-1]
    return [f"\\boxed{{{m}}}" for m in moves]


def test_prompt_examples_are_valid_and_winnable():
    from spade_mini.sandbox import SandboxedEnv, validate_env
    for example in (prompts.GAME_EXAMPLE, prompts.TOOL_EXAMPLE):
        assert validate_env(example).ok
    with SandboxedEnv(prompts.GAME_EXAMPLE) as env:
        obs, _ = env.reset(seed=4)
        for action in win_target_sum(obs):
            obs, reward, terminated, _, _ = env.step(action)
        assert (reward, terminated) == (1.0, True)


VALID = ("Here is my game.\n```python\nimport random\n\nclass LastDigitEnv:\n"
         '    """Say the last digit of a number."""\n'
         "    def reset(self, seed=None):\n        self.n = random.Random(seed).randint(10, 99)\n"
         "        return 'What is the last digit of %d? Answer inside \\\\boxed{}.' % self.n, {}\n\n"
         "    def step(self, action):\n        good = action.strip() == '\\\\boxed{%d}' % (self.n % 10)\n"
         "        return 'Done.', 1.0 if good else 0.0, True, False, {}\n\n"
         "    def solution(self):\n        return ['\\\\boxed{%d}' % (self.n % 10)]\n```\n")
CRASHES = ("```python\nclass CrashEnv:\n    def reset(self, seed=None):\n        return 'hi', {}\n"
           "    def step(self, action):\n        raise KeyError('oops')\n```")
PROSE = "I would design a maze game where the agent walks around."


def test_valid_and_invalid_designs_flow_through_validation(tiny_policy):
    policy = ScriptedDesigner(tiny_policy, [VALID, CRASHES, PROSE])
    skills = skills_for("games")[:3]
    designs = design_environments(policy, skills, Corpus.load(None), Memory(), random.Random(0), DesignSettings(max_new_tokens=300, temperature=0.6), iteration=3)
    assert len(policy.calls) == 1 and len(policy.calls[0][0]) == 3  # one batched call
    assert policy.calls[0][1:] == (300, 0.6)
    good, crash, prose = designs
    assert good.valid and good.reasons == [] and good.validation.class_name == "LastDigitEnv"
    assert good.source.startswith("import random") and "REFERENCE_DOCUMENT" in good.prompt[1]["content"]
    assert not crash.valid and crash.validation is not None
    assert any("KeyError" in r for r in crash.reasons)
    assert not prose.valid and prose.source is None and prose.validation is None
    assert prose.reasons == [NO_CLASS]
    assert [d.id for d in designs] == ["it0003-00", "it0003-01", "it0003-02"]
    assert [d.skill for d in designs] == skills
    assert [d.prompt_tokens for d in designs] == [len(tiny_policy.prompt_ids(d.prompt)) for d in designs]
    assert all(d.attempt == 1 and d.document_id for d in designs)
    record = design_record(good, 0.5, 1.0, 0.5)
    assert (record.title, record.skill, record.valid, record.regret) == (
        "Say the last digit of a number.", skills[0].key, True, 0.5)
    assert design_record(prose).source == "" and not design_record(prose).valid


def test_retries_regenerate_only_invalid_slots_keep_every_attempt_and_report_cut_offs(tiny_policy):
    other = VALID.replace("randint(10, 99)", "randint(100, 999)")  # the same again is a duplicate
    policy = ScriptedDesigner(tiny_policy, [VALID, PROSE, other])
    designs = design_environments(policy, skills_for("games")[:2], None, None, random.Random(1), DesignSettings(max_new_tokens=64, temperature=0.6, retries=2), iteration=0)
    assert [len(chats) for chats, _, _ in policy.calls] == [2, 1]
    # every attempt is kept, the slot's invalid first try too (a designer sample and a memory record)
    assert [d.valid for d in designs] == [True, False, True] and [d.attempt for d in designs] == [1, 1, 2]
    assert [d.id for d in designs] == ["it0000-00", "it0000-01", "it0000-01-a2"]
    assert [d.stage for d in designs] == ["valid", "no_code", "valid"]
    assert all(d.document_id is None for d in designs)
    assert "REFERENCE_DOCUMENT" not in designs[0].prompt[1]["content"]

    cut = ScriptedDesigner(tiny_policy, ["```python\nclass HalfEnv:\n    def reset(self"], cut=True)
    (design,) = design_environments(cut, skills_for("tool_use")[:1], None, None, random.Random(2), DesignSettings(max_new_tokens=64, temperature=0.6), iteration=1)
    assert not design.valid and any("syntax error" in r for r in design.reasons)
    assert design.reasons[-1] == "reply cut off at 64 new tokens"


def test_design_script_writes_one_file_per_design(tiny_policy, tmp_path):
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("design", Path(__file__).parents[1] / "design.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    policy = ScriptedDesigner(tiny_policy, [VALID, PROSE])
    designs = design_environments(policy, skills_for("games")[:2], None, None, random.Random(0), DesignSettings(max_new_tokens=64, temperature=0.6), iteration=0)
    summary = script.write_designs(designs, tmp_path / "out")
    prompt = statistics.median(d.prompt_tokens for d in designs)
    completion = statistics.median(len(d.completion.completion_ids) for d in designs)
    assert summary.startswith(f"1/2 valid (50%); median prompt {prompt:.0f} tokens, median completion {completion:.0f} tokens")
    good = (tmp_path / "out" / "it0000-00.py").read_text()
    bad = (tmp_path / "out" / "it0000-01.py").read_text()
    assert "# valid: True" in good and "class LastDigitEnv" in good
    assert f"# reason: {NO_CLASS}" in bad and "# | I would design a maze game" in bad


def _golden(section):
    import json
    from pathlib import Path
    return json.loads((Path(__file__).parent / "golden" / "reinforce_cases.json").read_text())[section]


# The table in docs/the-learning-signal.md: 15 levels evenly spaced strictly inside (invalid_reward, lowest valid):
#   regret (debiased, lowest valid -0.5): -1 + (level + 1) * 0.5 / 16
#   every other reward (lowest valid 0):  -1 + (level + 1) / 16
README_TABLE = {"no_code": 0, "syntax": 1, "structure": 2, "load": 3, "reset": 4, "step": 5, "episode": 6,
                "solution": 7, "decided": 8, "instances": 9, "given_away": 10, "hint": 11, "question": 12,
                "play": 13, "duplicate": 14}


@pytest.mark.golden
def test_one_reply_per_stage_reaches_its_stage_and_reward(tiny_policy):
    from spade_mini.reward import apply_invalid_policy
    cases = _golden("validity_stages")
    replies = [c["source"] if c["stage"] == "no_code" else
               "```python\n" + (prompts.GAME_EXAMPLE if c["source"] == "__EXAMPLE__" else c["source"])
               + "\n```" for c in cases]
    policy = ScriptedDesigner(tiny_policy, replies)
    designs = design_environments(policy, skills_for("games")[:1] * len(cases), None, None, random.Random(0), DesignSettings(max_new_tokens=64, temperature=0.6), iteration=0)
    assert [d.stage for d in designs] == [c["stage"] for c in cases], [d.reasons for d in designs]
    for floor, spacing in ((-0.5, 0.5 / 16), (0.0, 1 / 16)):
        rewards = apply_invalid_policy([(d.stage, 0.25, True) for d in designs], "graded", -1.0, floor)
        for d, r in zip(designs, rewards):
            want = 0.25 if d.stage == "valid" else -1 + (README_TABLE[d.stage] + 1) * spacing
            assert r == pytest.approx(want), d.stage


def test_a_valid_copy_of_an_example_earns_more_than_any_broken_design(tiny_policy):
    """The warm start teaches the designer the examples themselves; self-play must not then pay
    a copy (refused as a duplicate) less than code that does not even run."""
    from spade_mini.envs import STARTER
    from spade_mini.reward import apply_invalid_policy, lowest_valid_reward
    broken = ["no code at all", "```python\nclass AEnv(:\n```", "```python\nimport os\nclass AEnv:\n    pass\n```",
              "```python\nclass AEnv:\n    def __init__(self):\n        1 / 0\n```", CRASHES,
              "```python\n" + STARTER[0].without_solution + "```"]
    replies = [f"```python\n{STARTER[0].source}```"] + broken
    designs = design_environments(ScriptedDesigner(tiny_policy, replies), skills_for("games")[:1] * len(replies), None, None, random.Random(0), DesignSettings(max_new_tokens=64, temperature=0.6), iteration=0)
    assert designs[0].stage == "duplicate" and all(d.stage not in ("valid", "duplicate") for d in designs[1:])
    for kind in ("regret", "blend"):
        floor = lowest_valid_reward(kind)
        copy, *rest = apply_invalid_policy([(d.stage, 0.0, True) for d in designs], "graded", -1.0, floor)
        assert copy > max(rest) and copy < floor


def test_the_design_cost_bench_counts_admitted_environments_per_regeneration(tmp_path):
    """bench/design_cost.py reads a run: seconds of design and update per admitted environment,
    and per regeneration the attempts, valid ones and admitted ones (an example is not a design)."""
    import json
    import sys
    from pathlib import Path

    from spade_mini.pool import Pool
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from design_cost import measure
    run = tmp_path / "r"
    (run / "checkpoint-1").mkdir(parents=True)
    pool = Pool()
    for env_id, origin in (("it0000-00", "design"), ("it0001-01-a2", "design"), ("example-x", "example")):
        pool.admit(env_id, env_id, "games", "src", [1.0, 0.0], iteration=0, origin=origin)
    (run / "checkpoint-1" / "pool.json").write_text(json.dumps(pool.to_dict()))
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(
        {"iteration": i, "time_design_s": 100.0, "time_update_s": 50.0, "time_total_s": 200.0}) for i in (0, 1)))
    designs = [("it0000-00", 0, True), ("it0000-01", 0, False), ("it0001-01", 1, False),
               ("it0001-01-a2", 1, True), ("it0001-02", 1, True)]
    (run / "samples.jsonl").write_text("\n".join(json.dumps(
        {"kind": "design", "id": i, "iteration": it, "valid": v}) for i, it, v in designs))
    got = measure(run)
    assert got["admitted"] == 2 and got["design_and_update_s"] == 300.0 and got["seconds_per_admitted"] == 150.0
    assert [(r["attempts"], r["valid"], r["admitted"]) for r in got["regenerations"]] == [(2, 1, 1), (3, 2, 1)]


def test_the_validity_bench_continues_a_stopped_measurement_exactly(tmp_path, monkeypatch, capsys):
    """bench/designer_validity.py --samples FILE: a measurement of hundreds of designs spans
    sittings, so a run stopped after its first batch and run again continues it, and writes what
    one uninterrupted run writes, all but each design's seconds (each batch draws from its seed and
    first slot); --compare reads
    two such files (the tiny model samples, so its replies differ from row to row)."""
    import json
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import designer_validity

    def bench(*args):
        monkeypatch.setattr(sys, "argv", ["designer_validity.py", *args, "--", "--model", "tiny", "--quantize",
                                          "none", "--warm-start-steps", "0", "--design-max-new-tokens", "24"])
        assert designer_validity.main() == 0

    whole, pieces = tmp_path / "whole.jsonl", tmp_path / "pieces.jsonl"
    bench("--designs", "4", "--batch", "2", "--samples", str(whole))
    bench("--designs", "2", "--batch", "2", "--samples", str(pieces))
    bench("--designs", "4", "--batch", "2", "--samples", str(pieces), "--json", str(tmp_path / "pieces.json"))
    def rows(path):
        return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in path.read_text().splitlines()]

    assert len({row["reply"] for row in rows(whole)}) == 4 and rows(pieces) == rows(whole)
    # the JSON counts every sitting's designs and their seconds, not only the last sitting's
    counts = json.loads((tmp_path / "pieces.json").read_text())
    seconds = sum(json.loads(line)["seconds"] for line in pieces.read_text().splitlines())
    assert counts["designs"] == 4 and sum(counts["stages"].values()) == 4 and counts["seconds"] == round(seconds)
    capsys.readouterr()
    bench("--compare", str(whole), str(pieces))
    out = capsys.readouterr().out
    assert "valid 0/4" in out and "paired by slot, the first 4 designs" in out
    assert [line.split(" A ")[0].strip() for line in out.splitlines() if " B - A " in line] == \
        ["past syntax", "past reset", "past episode", "past solution", "valid"]
    other = tmp_path / "other.jsonl"  # another seed's skills: the slots do not pair
    other.write_text("".join(json.dumps({**json.loads(line), "skill": "elsewhere"}) + "\n"
                             for line in whole.read_text().splitlines()))
    bench("--compare", str(whole), str(other))
    assert "do not pair by slot" in capsys.readouterr().out


def test_the_ratio_of_two_rates_has_katzs_log_interval():
    """spade_mini/evaluation/intervals.py ratio_interval, checked by hand: 10/100 against 20/100 is
    0.5 with ln-scale half-width 1.96 * sqrt(1/10 - 1/100 + 1/20 - 1/100); 0 of n stays finite."""
    import math

    from spade_mini.evaluation.intervals import ratio_interval
    ratio, low, high = ratio_interval(10, 100, 20, 100)
    half = 1.96 * math.sqrt(0.13)
    assert ratio == 0.5 and math.isclose(low, 0.5 * math.exp(-half)) and math.isclose(high, 0.5 * math.exp(half))
    ratio, low, high = ratio_interval(0, 50, 5, 50)
    assert 0 < low < ratio < high < float("inf")
    assert ratio_interval(80, 700, 80, 700)[1] > 2 / 3  # about 700 designs a prompt see a cut of a third
