"""The novelty guard: a copy of a known environment, up to names, comments and docstrings, is a
duplicate; a genuinely different environment is not."""
import random

from scripted import ScriptedDesigner

from spade_mini.designer import DesignSettings, design_environments, fingerprint, skills_for
from spade_mini.designer.prompts import GAME_EXAMPLE
from spade_mini.sandbox import MAX_SOURCE_CHARS

RENAMED = r'''import random, re

class SumGameEnv:
    # every name changed, the docstrings gone, comments added
    levels = 4

    def reset(self, seed=None, options=None):
        gen = random.Random(seed)
        lv = (options or {}).get("level", 0)
        self.goal, self.acc, self.t = gen.randint(20, 40 - 5 * lv), 0, 0  # the same numbers
        self.n = 6 - lv
        return self.show("Add a digit 1-9 each turn, e.g. \\boxed{5}."), {}

    def show(self, text):
        return f"{text} Total {self.acc}, target {self.goal}, turns left {self.n - self.t}."

    def step(self, move):
        self.t += 1
        hit = re.fullmatch(r"\\boxed\{([1-9])\}", move.strip())
        if hit:
            self.acc += int(hit.group(1))
        if self.acc == self.goal:
            return "Exact total reached!", 1.0, True, False, {}
        done = self.acc > self.goal or self.t >= self.n
        return self.show("Added." if hit else "Invalid move."), 0.0, done, False, {}

    def hint(self):
        return "Split the remaining difference over the turns left."

    def solution(self):
        rest, out = self.goal - self.acc, []
        while rest > 0:
            out.append(f"\\boxed{{{min(9, rest)}}}")
            rest -= min(9, rest)
        return out
'''

DIFFERENT = RENAMED.replace("randint(20, 40 - 5 * lv)", "randint(10, 30 - 5 * lv)").replace("6 - lv", "8 - lv")


def test_a_renamed_copy_has_the_same_fingerprint():
    assert fingerprint(RENAMED) == fingerprint(GAME_EXAMPLE)


def test_other_numbers_make_another_environment():
    assert fingerprint(DIFFERENT) != fingerprint(GAME_EXAMPLE)


def test_unparsable_or_huge_sources_have_no_fingerprint():
    assert fingerprint("class Broken(:") is None
    assert fingerprint("(" * 200_000) is None  # a parser bomb is bounded, never raised
    assert fingerprint("x = 1\n" * (MAX_SOURCE_CHARS // 6 + 1)) is None


def test_design_environments_marks_copies_duplicate(tiny_policy):
    skills = skills_for("games")[:1] * 3
    policy = ScriptedDesigner(tiny_policy, [f"```python\n{RENAMED}```", f"```python\n{DIFFERENT}```",
                      f"```python\n{DIFFERENT}```"])
    designs = design_environments(policy, skills, None, None, random.Random(0), DesignSettings(max_new_tokens=64, temperature=0.6), iteration=0)
    assert [d.stage for d in designs] == ["duplicate", "valid", "duplicate"]
    assert "the prompt's example" in designs[0].reasons[0]
    assert designs[2].reasons[0].startswith("duplicate: the same environment as it0000-01")
    assert [d.valid for d in designs] == [False, True, False]


def test_a_rewrite_of_a_held_out_environment_is_a_duplicate(tiny_policy):
    from spade_mini.envs import STARTER_HELDOUT
    held = next(e for e in STARTER_HELDOUT if e.name == "add_numbers")
    renamed = held.source.replace("AddNumbersEnv", "SumTwoEnv").replace("self.", "self.my_")
    (design,) = design_environments(ScriptedDesigner(tiny_policy, [f"```python\n{renamed}```"]), skills_for("games")[:1], None, None, random.Random(0), DesignSettings(max_new_tokens=64, temperature=0.6), iteration=0)
    assert design.stage == "duplicate" and "held-out add_numbers" in design.reasons[0], design.reasons
