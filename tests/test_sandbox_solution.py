"""The solution stage of validate_env (a solution must win its seed, blind players must lose),
what comes back from solution() and how it is bounded, and `solve`, the only way out of the
sandbox for the privileged answers (the bundled environments: test_envs.py)."""
import re
import time

import pytest
from hostile import FAST, KIT, SIMPLE, assert_bounded

from spade_mini.reward.leaks import leaked_answer
from spade_mini.sandbox import (SOLUTION_EPISODES, EnvProtocolError, SandboxedEnv, SandboxLimits,
                                Solved, solve, validate_env)


def with_solution(source: str, body: str) -> str:
    """`source` (SIMPLE, or SIMPLE changed) with `body` as its last method, solution()."""
    lines = "".join(f"        {line}\n" for line in body.splitlines())
    return source + "    def solution(self):\n" + lines


BOXED_TARGET = r"""return ["\\boxed{%d}" % self.target]"""
SOLVED = with_solution(SIMPLE, BOXED_TARGET)  # SIMPLE, whose solution() names the digit
WIN_CHECK = r'won = action.strip() == "\\boxed{%d}" % self.target'
assert WIN_CHECK in SIMPLE

# Each is refused at the solution stage, with a reason that says why.
REFUSED = {
    "no_solution": (SIMPLE, "defines no solution()"),
    "solution_loses": (with_solution(SIMPLE, r"""return ["\\boxed{%d}" % (self.target % 9 + 1)]"""),
                       "with the episode still running after its last action (turn 1)"),
    "house_always_wins": (with_solution(SIMPLE.replace("float(won), won,", "0.0, won,"),
                                        BOXED_TARGET),
                          "at turn 1 (terminated, reward 0): 'Correct.'"),
    "always_pays": (with_solution(SIMPLE.replace("won = action", "won = self.turns >= 3 and action[7:-1].isdigit() or action"),
                                  BOXED_TARGET),
                    "the outcome ignores the agent: a constant action (another seed's first "
                    "solution action, repeated) wins on 1/"),
    # any boxed digit wins when the seed's digit is 3, 6 or 9: a coin flip the seed decides,
    # which the agent's plays would show as "informative" (some won, some lost) while teaching
    # nothing; blind players win on one seed of the four, which a majority rule let pass
    "seed_coin_flip": (with_solution(SIMPLE.replace(WIN_CHECK, WIN_CHECK + " or (self.target % 3 == 0"
                                                    " and action.strip()[7:-1].isdigit())"), BOXED_TARGET),
                       "a constant action (another seed's first solution action, repeated) wins on 1/"),
    "any_number_wins": (with_solution(SIMPLE.replace(WIN_CHECK, r'won = action[7:-1].isdigit()'),
                                      BOXED_TARGET),
                        "the outcome ignores the agent: a constant action"),
    "same_task_every_seed": (with_solution(SIMPLE.replace("self.rng.randint(1, 9)", "5"),
                                           BOXED_TARGET),
                             "the outcome ignores the episode: another seed's solution() wins "
                             "on every seed, being every seed's solution"),
    # step() wants a bare digit, solution() says one: the agent writes it boxed and play sends
    # \\boxed{d}, so no play can win it (validation plays the agent's own action path)
    "bare_answer": (with_solution(SIMPLE.replace(WIN_CHECK, 'won = action.strip() == "%d" % self.target'),
                                  r"""return ["%d" % self.target]"""),
                    "with the episode still running after its last action (turn 1)"),
    "solution_raises": (with_solution(SIMPLE, "raise ValueError('no idea')"),
                        "ValueError: no idea"),
    "a_str": (with_solution(SIMPLE, r'return "\\boxed{1}"'),
              "ProtocolViolation: solution() must return a list of str, got str"),
    "empty": (with_solution(SIMPLE, "return []"), "returned 0 actions; return 1 to 25"),
    "too_many": (with_solution(SIMPLE, "return ['x'] * 26"), "returned 26 actions; return 1 to 25"),
    "not_str": (with_solution(SIMPLE, "return [1]"), "action 0 must be a str, got int"),
    "too_long": (with_solution(SIMPLE, "return ['x' * 30000]"),
                 "action 0 has 30000 characters, more than 20000"),
    "hangs": (with_solution(SIMPLE, "while True:\n    pass"), "solution: EnvTimeout"),
    # solution() runs in a child of its own: what it changes there cannot help a play
    "cheats_in_its_child": (with_solution(
        SIMPLE.replace("won = action", "won = getattr(self, 'cheat', False) or action"),
        "type(self).cheat = True\nreturn ['\\\\boxed{0}']"), "solution() lost on seed "),
    # a forged reply of the current id, with far too many actions: the parent refuses it too
    "forged_reply": (with_solution(KIT + SIMPLE, r"""json = worker()["sys"].modules["json"]
reply(json.dumps({"id": request_id(), "ok": True, "value": ["x"] * 1000, "notes": []}) + "\n")
return ["x"]"""), "malformed solution reply"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_solution_stage_refuses_with_its_reason(name):
    source, needle = REFUSED[name]
    v = validate_env(source, limits=FAST)
    assert not v.ok and v.stage == "solution" and any(needle in r for r in v.reasons), v.reasons


def test_a_solution_that_raises_shows_its_traceback():
    v = validate_env(REFUSED["solution_raises"][0], limits=FAST)
    assert v.reasons[1].startswith("traceback (last lines):") and "no idea" in v.reasons[1]


def test_a_solution_that_loses_on_every_seed_says_so_for_each():
    v = validate_env(REFUSED["solution_loses"][0], limits=FAST)
    assert len(v.reasons) == SOLUTION_EPISODES
    assert all(re.match(r"solution\(\) lost on seed \d+ with the episode still running", r)
               for r in v.reasons), v.reasons


def test_without_require_solution_validation_is_as_before():
    for source in (SIMPLE, REFUSED["solution_raises"][0], REFUSED["always_pays"][0]):
        v = validate_env(source, limits=FAST, require_solution=False)
        assert v.ok and v.stage == "valid", v.reasons
        assert set(v.timings) == {"load", "reset", "probe", "episode", "hint"}


def test_the_play_api_never_gives_the_solution():
    assert not hasattr(SandboxedEnv, "solution")
    with SandboxedEnv(SOLVED, limits=FAST) as env:
        assert env.has_solution and not hasattr(env, "solution")
    with SandboxedEnv(SIMPLE, limits=FAST) as env:
        assert not env.has_solution


def test_solve_returns_each_episodes_hint_and_solution():
    solved = solve(SOLVED, [5, 6, 5], max_actions=25, limits=FAST)
    assert [s.seed for s in solved] == [5, 6, 5] and solved[0] == solved[2]
    for s in solved:
        digit = s.hint.removeprefix("The digit is ").removesuffix(".")
        assert s.actions == (f"\\boxed{{{digit}}}",)
    no_hint = SOLVED.replace("def hint(self)", "def clue(self)")
    assert solve(no_hint, [1], max_actions=25, limits=FAST)[0].hint is None
    (unsolved,) = solve(SIMPLE, [1], max_actions=25, limits=FAST)
    assert unsolved.actions is None and unsolved.hint.startswith("The digit is")
    assert isinstance(unsolved, Solved)


def test_solve_bounds_what_comes_back():
    with pytest.raises(EnvProtocolError, match="returned 26 actions"):
        solve(REFUSED["too_many"][0], [1], max_actions=25, limits=FAST)
    long = with_solution(SIMPLE, "return ['x'] * 30")
    assert len(solve(long, [1], max_actions=30, limits=FAST)[0].actions) == 30


def test_a_hint_from_the_sandbox_that_names_the_answer_is_caught():
    # SIMPLE's own hint says "The digit is 7.": one character, which the check leaves alone
    # (spade_mini/reward/leaks.py); a hint that writes the winning reply is caught.
    boxed = SOLVED.replace('return "The digit is %d." % self.target',
                           r'return "Reply \\boxed{%d}." % self.target')
    for plain, stating in zip(solve(SOLVED, [1, 2], max_actions=25, limits=FAST),
                              solve(boxed, [1, 2], max_actions=25, limits=FAST)):
        assert leaked_answer(plain.hint, plain.actions) is None
        assert leaked_answer(stating.hint, stating.actions) == stating.actions[-1]


def test_the_solver_loaded_early_still_counts_when_the_first_stages_are_slow():
    # The solver's child loads while the first stages run; a slow hint() makes them outlast its
    # load timeout, which must count from when validation waits for it, not from its launch.
    slow_hint = KIT + SOLVED.replace('        return "The digit is',
                                     '        spin(1.3)\n        return "The digit is')
    limits = SandboxLimits(call_timeout_s=2.0, load_timeout_s=1.0, cpu_s=20, memory_mb=256)
    v = validate_env(slow_hint, limits=limits)
    assert v.ok, v.reasons


def test_the_solution_stage_keeps_validations_one_deadline():
    # (the stages before it play some fifteen short episodes, each in a fresh child)
    slow = with_solution(KIT + SIMPLE, "spin(8)\n" + BOXED_TARGET)
    start = time.monotonic()
    v = validate_env(slow, limits=SandboxLimits(call_timeout_s=10.0, load_timeout_s=3.0),
                     time_budget_s=5.0)
    assert v.stage == "solution" and "exceeded its 5 s budget" in v.reasons[0], v.reasons
    assert_bounded(start, 6.0)
