"""The hint-leak check (spade_mini/reward/leaks.py) on hand-made hints: what it flags, what it leaves
alone on purpose, and that it is pure Python (the bundled environments' own hints, read from the
sandbox: test_envs.py)."""
import ast
from pathlib import Path

import pytest

from spade_mini.reward import leaks
from spade_mini.reward.leaks import final_answer, leaked_answer, tokens

BISECTION = ["\\boxed{32}", "\\boxed{48}", "\\boxed{40}"]
TOOLS = ['<tool_call>{"name": "search", "arguments": {"query": "clock"}}</tool_call>',
         "<answer>ORD-4417</answer>"]


@pytest.mark.parametrize("hint, solution, leaked", [
    ("The number is 40.", BISECTION, "40"),
    ("Reply \\boxed{40} and you win.", BISECTION, "\\boxed{40}"),
    ("Just answer <answer>ORD-4417</answer>", TOOLS, "<answer>ORD-4417</answer>"),
    ("the order id will be ord-4417", TOOLS, "ORD-4417"),
    ("The word is PLANET, in capitals.", ["\\boxed{planet}"], "planet"),
    ("Write to ann.lee@corp.com", ["<answer>ann.lee@corp.com</answer>"], "ann.lee@corp.com"),
    ("You end at (3, -2).", ["\\boxed{3,-2}"], "3,-2"),
    ("It falls to -1 at the end", ["\\boxed{4}", "\\boxed{-1}"], "-1"),
    ("Go right, right, then down.", ["\\boxed{right}", "\\boxed{right}", "\\boxed{down}"], "down"),
    ("Guess 32, then 48, then 40.", BISECTION, "40"),
    ("The moves: 1 3 2", ["\\boxed{1}", "\\boxed{3}", "\\boxed{2}"], "1 3 2"),  # rule 3
])
def test_a_hint_that_states_the_answer_is_flagged(hint, solution, leaked):
    assert leaked_answer(hint, solution) == leaked


@pytest.mark.parametrize("hint, solution", [
    ("Always guess the middle of what is left.", BISECTION),
    ("Open with 32, then halve the range.", BISECTION),  # a fixed move, not the answer
    ("Numbers above 400 are never right.", BISECTION),  # 40 is not 400
    ("It is not 4.0 or -40.", BISECTION),
    ("Take 1 stone when 5 are left.", ["\\boxed{2}", "\\boxed{1}"]),  # one character: left alone
    ("Search for the clock first, then order it.", TOOLS),  # tool arguments are not answers
    ("Planets are not words here.", ["\\boxed{planet}"]),  # a token, not a prefix
    ("", BISECTION),
    ("anything", []),
])
def test_an_honest_hint_is_not_flagged(hint, solution):
    assert leaked_answer(hint, solution) is None


def test_a_final_answer_that_every_episode_shares_is_not_this_episodes_answer():
    hint = "Rename the key, fix the counter, then answer done."
    solution = ["<tool_call>{}</tool_call>", "<answer>done</answer>"]
    others = [["<tool_call>{}</tool_call>", "<answer>done</answer>"], ["<answer>done</answer>"]]
    assert leaked_answer(hint, solution) == "done"
    assert leaked_answer(hint, solution, others) is None
    assert leaked_answer("The number is 40.", BISECTION, [["\\boxed{32}"], BISECTION]) == "40"


def test_tokens_and_answers():
    assert tokens("x = -1.5, (3,-2) Ann.Lee") == ["x", "-1.5", "3", "-2", "ann", "lee"]
    assert final_answer(TOOLS) == "ORD-4417" and final_answer(TOOLS[:1]) == ""
    assert final_answer(["\\boxed{f(x) = {1}}"]) == "f(x) = {1}"
    assert final_answer(["left", "up"]) == "up"  # an action without markup counts whole


def test_the_leak_check_is_pure_python():
    tree = ast.parse(Path(leaks.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"re", "collections.abc"}, imported
