"""The curve's transfer suites (spade_mini/evaluation/transfer.py): the starters lose their worked
example and nothing else, strict and lenient scores differ exactly where a reply is right but
unboxed, the standard held-out environments fit the run's turn cap, and no suite reaches a
training tier, the memory or a designer prompt. The scripted player answers from the observation
(the tiny model counts its tokens)."""
import random
import re
from pathlib import Path

import pytest
from scripted import ScriptedPlayer

from spade_mini.config import Config
from spade_mini.designer import SKILLS, Memory, fingerprint
from spade_mini.designer.prompts import SYSTEM, designer_prompt
from spade_mini.envs import ALL_EXAMPLES, STARTER_HELDOUT, TIERS
from spade_mini.evaluation import benchmarks as bm
from spade_mini.evaluation import transfer as tr
from spade_mini.evaluation.fixed_set import EVAL_SEED, distinct_items
from spade_mini.sandbox import SandboxedEnv

ROOT = Path(__file__).resolve().parents[1]
ADD = next(e for e in STARTER_HELDOUT if e.name == "add_numbers")


def answering(tiny_policy, reply) -> ScriptedPlayer:
    """`reply(prompt text)` is its whole reply, always ended by EOS."""
    return ScriptedPlayer(tiny_policy, lambda chat: reply(chat[-1]["content"]))


def sum_asked(text: str) -> int:
    a, b = map(int, re.search(r"(\d+) plus (\d+)\?", text).groups())
    return a + b


@pytest.mark.parametrize("env", STARTER_HELDOUT, ids=lambda e: e.name)
def test_no_example_keeps_the_question_and_drops_the_worked_case(env):
    with SandboxedEnv(env.source) as full, SandboxedEnv(tr.no_example(env).source) as bare:
        for seed in range(EVAL_SEED, EVAL_SEED + 5):
            shown, asked = full.reset(seed=seed)[0], bare.reset(seed=seed)[0]
            assert shown.startswith("Example:") and "\\boxed" not in asked and "Example" not in asked
            assert shown.endswith(asked) and asked == shown.split("\nNow: ", 1)[1]


@pytest.mark.parametrize("reply, strict, lenient", [
    (lambda q: f"\\boxed{{{sum_asked(q)}}}", True, True),     # boxed and right
    (lambda q: f"{sum_asked(q)}.", False, True),              # right, not boxed
    (lambda q: f"\\boxed{{{sum_asked(q) + 1}}}", False, False),
    (lambda q: f"{sum_asked(q) + 1}", False, False),
])
def test_strict_and_lenient_side_by_side(tiny_policy, reply, strict, lenient):
    cfg = Config(max_turns=6, turn_max_new_tokens=8, transfer_items=3)
    items = distinct_items([tr.no_example(ADD)], [EVAL_SEED + k for k in range(3)])
    got = tr.played_rows(answering(tiny_policy, reply), cfg, "no_example", items)
    assert [(r["strict"], r["lenient"]) for r in got] == [(strict, lenient)] * len(items)


def test_reasoning_gym_strict_reads_the_box_and_lenient_the_bare_answer(tiny_policy):
    pytest.importorskip("reasoning_gym")
    cfg = Config(transfer_items=1, turn_max_new_tokens=8)
    answers = {it.chat[0]["content"]: it.data["entry"]["answer"]
               for it in bm.reasoning_gym_items(len(bm.RG_FAMILIES), EVAL_SEED, "easy")}
    boxed = tr.reasoning_gym_rows(answering(tiny_policy, lambda q: f"\\boxed{{{answers[q]}}}"), cfg)
    bare = tr.reasoning_gym_rows(answering(tiny_policy, lambda q: f"The answer is {answers[q]}"), cfg)
    assert len(boxed) == len(answers) and all(r["strict"] and r["lenient"] for r in boxed)
    assert not any(r["strict"] for r in bare) and sum(r["lenient"] for r in bare) >= len(bare) - 1


def test_reasoning_gym_keeps_round_fours_items_whatever_the_seeds_per_environment(monkeypatch):
    """--transfer-items 64 (the cpu preset) plays 64 seeds of each held-out environment, and
    reasoning-gym still its RG_PER_FAMILY items a family, round four's (no family is evidence)."""
    asked = []

    def items(n, seed, level):
        asked.append((n, seed, level))
        raise StopIteration

    monkeypatch.setattr(tr, "reasoning_gym_items", items)
    for n in (1, 64):
        with pytest.raises(StopIteration):
            tr.reasoning_gym_rows(None, Config(transfer_items=n))
    assert asked == [(len(bm.RG_FAMILIES), EVAL_SEED, "easy"), (tr.RG_PER_FAMILY * len(bm.RG_FAMILIES), EVAL_SEED, "easy")]
    assert tr.RG_PER_FAMILY == 8


def test_the_standard_held_out_suite_fits_the_turn_cap():
    seeds = [EVAL_SEED + k for k in range(4)]
    for cap in (2, 6):
        envs = tr.suite_envs(Config(max_turns=cap), seeds)["heldout"]
        assert envs and all(tr.solution_turns(e, seeds) <= cap for e in envs)
    assert len(tr.suite_envs(Config(max_turns=2), seeds)["heldout"]) < len(tr.suite_envs(Config(max_turns=25), seeds)["heldout"]) == 7


def test_transfer_suites_never_reach_a_training_tier_the_memory_or_a_designer_prompt():
    cfg = Config(max_turns=25, transfer_items=2)
    suites = tr.suite_envs(cfg, [EVAL_SEED, EVAL_SEED + 1])
    played = [e for envs in suites.values() for e in envs]
    classes = {re.search(r"^class (\w+Env)\b", e.source, re.M).group(1) for e in played}
    for examples, _ in TIERS.values():  # the training half of every tier
        memory = Memory.seeded(examples)
        seen = examples + ALL_EXAMPLES
        names = {e.name.removesuffix("_no_example") for e in played}
        assert not names & ({e.name for e in seen} | {r.id.removeprefix("example-") for r in memory.records})
        prints = {fingerprint(e.source) for e in seen} | {fingerprint(r.source) for r in memory.records}
        assert not {fingerprint(e.source) for e in played} & prints
        assert not {fingerprint(e.source.split("\n\n# ")[0] + "\n") for e in played} & prints
        for setting, skills in SKILLS.items():
            for skill in skills:
                shown = memory.render(memory.select(skill.key, random.Random(0), references=len(memory)))
                text = SYSTEM + "".join(m["content"] for m in designer_prompt(skill, None, shown))
                assert not [c for c in classes if c in text], skill.key
    training = [p for p in (ROOT / "spade_mini").rglob("*.py") if "evaluation" not in p.parts]
    assert not [p for p in training if "reasoning_gym" in p.read_text()]
