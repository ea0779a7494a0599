"""validate_env and its stages, the bounded parse of untrusted source, paired seeds that are
really paired across children, and starting many children at once (the solution stage in
detail: test_sandbox_solution.py)."""
import ast
import time

import pytest
from hostile import FAST, KIT, SIMPLE, assert_bounded, env_source
from test_sandbox_solution import SOLVED

from spade_mini.designer import env_title
from spade_mini.sandbox import (MAX_AST_DEPTH, MAX_SOURCE_CHARS, STAGES, EnvLoadError,
                                SandboxedEnv, SandboxError, SourceError, parse_source,
                                start_envs, validate_env)


def test_validate_accepts_a_good_env():
    v = validate_env(SOLVED, limits=FAST)
    assert v.ok and v.reasons == [] and v.class_name == "CountEnv" and v.has_hint
    assert "load" in v.timings and "solution" in v.timings and v.stage == "valid"


@pytest.mark.parametrize("source, needle", [
    ("class A\n", "syntax error"),
    (SIMPLE + "\nclass OtherEnv:\n    pass\n", "exactly one"),
    (SIMPLE.replace("self.turns >= 10", "False"), "did not end within"),
    (SIMPLE.replace("float(won)", "100.0"), "outside [-10, 10]"),
    (SIMPLE.replace("random.Random(seed)", "random.Random()").replace(
        'return "Guess', 'return str(self.rng.random()) + "Guess'),
     "different first observations"),
    (SIMPLE.replace("float(won)", "won"), "bool reward"),
    (SIMPLE.replace('return "Guess', 'return 5 or "Guess'), "must be a str"),
])
def test_validate_explains_failures(source, needle):
    v = validate_env(source, limits=FAST)
    assert not v.ok and any(needle in r for r in v.reasons), v.reasons


def test_validate_respects_its_time_budget():
    slow = SIMPLE.replace("self.turns += 1", "self.turns += 1\n        sum(range(3 * 10**6))")
    start = time.monotonic()
    v = validate_env(slow, limits=FAST, time_budget_s=0.2)
    assert not v.ok and any("budget" in r for r in v.reasons)
    assert_bounded(start, 1.2)  # the budget plus at most a second


# ---- stages: one small hand-written source per stage ------------------------------------------

HANG = "while True:\n    pass"
STAGE_SOURCES = [
    ("syntax", "class A\n"),
    ("syntax", "x = (" * 300 + ")" * 300),
    ("structure", SIMPLE + "\nclass OtherEnv:\n    pass\n"),
    ("structure", "import os\n" + SIMPLE),
    ("structure", "from . import x\n" + SIMPLE),
    ("structure", "__import__('socket')\n" + SIMPLE),  # only the import allowlist at load sees it
    ("structure", "class Maker:\n    pass\nglobals()['SecondEnv'] = type('SecondEnv', (), {})\n"
                  + SIMPLE),
    ("load", SIMPLE + "\nraise ValueError('at import time')\n"),
    ("load", SIMPLE.replace("    def reset", "    def __init__(self):\n        1 / 0\n    def reset")),
    ("load", SIMPLE + "\n" + HANG + "\n"),
    ("reset", SIMPLE.replace('return "Guess', 'return 5 or "Guess')),
    ("reset", SIMPLE.replace("self.rng = random.Random(seed)", "self.rng = random.Random()")
     .replace('return "Guess', 'return str(self.rng.random()) + "Guess')),
    ("reset", SIMPLE.replace("self.target, self.turns =", "raise KeyError('no')\n        self.x =")),
    ("step", SIMPLE.replace("float(won)", "100.0")),
    ("step", SIMPLE.replace("float(won), won,", "float(won), 'yes',")),
    ("step", SIMPLE.replace("self.turns += 1", "self.turns += 1\n        [][0]")),
    ("episode", SIMPLE.replace("self.turns >= 10", "False")),
    ("episode", SIMPLE.replace("self.turns += 1", "self.turns += 1\n        assert self.turns < 3")),
    ("episode", SIMPLE.replace('return "The digit', 'raise RuntimeError("no hint")\n        return "')),
    ("episode", SIMPLE.replace('won = action.strip() ==', 'won = True or action.strip() ==')),  # anything wins
    ("solution", SIMPLE),  # no solution()
    ("solution", SOLVED.replace("return [", "return ['\\\\boxed{0}'] or [")),  # it loses
    # one guess ends the episode, and the text never shows which digit: a coin flip
    ("decided", SOLVED.replace("float(won), won, self.turns >= 10", "float(won), True, False")),
    ("instances", SOLVED.replace("self.rng.randint(1, 9)", "self.rng.randint(1, 2)")),  # two games
    ("valid", SOLVED),
]
INSTANCES = 3  # the least distinct instances asked of STAGE_SOURCES (SOLVED has 9)


@pytest.mark.parametrize("stage, source", STAGE_SOURCES,
                         ids=[f"{s}-{i}" for i, (s, _) in enumerate(STAGE_SOURCES)])
def test_each_stage_is_named_by_the_first_check_that_fails(stage, source):
    v = validate_env(source, limits=FAST, min_instances=INSTANCES)
    assert v.stage == stage, v.reasons
    assert v.ok == (stage == "valid") and (v.reasons == []) == v.ok


def test_stages_are_ordered_and_public():
    assert STAGES == ("syntax", "structure", "load", "reset", "step", "episode", "solution",
                      "decided", "instances", "valid")
    assert {s for s, _ in STAGE_SOURCES} == set(STAGES)


# ---- the bounded parse -----------------------------------------------------------------------

HOSTILE_SOURCES = {
    "parens": "(" * 300 + ")" * 300,
    "not_chain": "not " * 25_000 + "x",
    "plus_chain": "1+" * 45_000 + "1",
    "calls": "f" + "()" * 45_000,
    "deep_dicts": "x = " + "{1: " * 150 + "1" + "}" * 150,
    "too_long": "x = 1\n" * (MAX_SOURCE_CHARS // 6 + 1),
    "null_byte": "x = 1\0",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SOURCES))
def test_parse_source_refuses_huge_or_deep_source_with_a_typed_error(name):
    source = HOSTILE_SOURCES[name]
    with pytest.raises(SourceError):
        parse_source(source)
    assert issubclass(SourceError, SandboxError)
    v = validate_env(source, limits=FAST)
    assert not v.ok and v.stage == "syntax"
    assert isinstance(env_title(source), str)  # the memory's titles use the same parse


def test_parse_source_returns_a_tree_that_recursive_code_can_walk():
    tree = parse_source(SIMPLE)
    assert isinstance(tree, ast.Module) and ast.dump(tree)
    deepest = "x = " + "[" * 45 + "]" * 45  # close to MAX_AST_DEPTH, still accepted
    assert MAX_AST_DEPTH > 45 and ast.dump(parse_source(deepest))
    with pytest.raises(SourceError, match="str"):
        parse_source(b"x = 1")


def test_too_long_source_does_not_load_either():
    with pytest.raises(EnvLoadError) as err:
        SandboxedEnv(HOSTILE_SOURCES["too_long"], limits=FAST)
    assert err.value.stage == "syntax"


# ---- paired seeds: the same episode in every fresh child --------------------------------------

SET_ORDER = '''
import random
class PickEnv:
    def reset(self, seed=None):
        rng = random.Random(seed)
        words = {"apple", "pear", "plum", "fig", "kiwi", "lime", "date", "lemon", "mango"}
        return "%s %s" % (rng.choice(list(words)), list(words)), {}
    def step(self, action):
        return "", 0.0, True, False, {}
'''
GLOBAL_RANDOM = '''
import random
class GlobalEnv:
    def reset(self, seed=None):
        return "target %d" % random.randint(1, 10**9), {}
    def step(self, action):
        return "", 0.0, True, False, {}
'''


@pytest.mark.parametrize("source", [SET_ORDER, GLOBAL_RANDOM], ids=["set_order", "global_random"])
def test_a_seed_gives_the_same_first_observation_in_six_fresh_children(source):
    firsts = set()
    for _ in range(6):
        with SandboxedEnv(source, limits=FAST) as env:
            firsts.add(env.reset(seed=1234)[0])
    assert len(firsts) == 1, firsts


# ---- many children at once -------------------------------------------------------------------

def test_start_envs_keeps_order_and_puts_errors_in_their_slots():
    sources = [SIMPLE, "class A\n", KIT + SIMPLE, env_source("pass", top="1 / 0"), SIMPLE]
    started = start_envs(sources, limits=FAST, parallel=2)
    try:
        assert [type(s).__name__ for s in started] == [
            "SandboxedEnv", "EnvLoadError", "SandboxedEnv", "EnvLoadError", "SandboxedEnv"]
        assert all(s.reset(seed=i)[0].startswith("Guess") for i, s in enumerate(started)
                   if isinstance(s, SandboxedEnv))
    finally:
        for s in started:
            if isinstance(s, SandboxedEnv):
                s.close()


def _parse_in_threads(parse, rounds: int = 10) -> list[str]:
    """Parse in 8 threads while the collector frees cycles whose finalizers run Python code (as
    SandboxedEnv's do in validation's thread pool): a thread switch inside a parse."""
    import gc
    import time
    from concurrent.futures import ThreadPoolExecutor

    class Finalized:
        def __init__(self):
            self.me = self  # a cycle: only the collector frees it

        def __del__(self):
            time.sleep(0)  # Python code in a finalizer lets another thread run

    from spade_mini.envs import EXAMPLES
    source, errors = "\n".join(e.source for e in EXAMPLES), []

    def work(_):
        for _ in range(rounds):
            for _ in range(20):
                Finalized()
            try:
                parse(source)
            except SystemError as e:
                errors.append(str(e))
    threshold = gc.get_threshold()
    gc.set_threshold(50)
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(work, range(8)))
    finally:
        gc.set_threshold(*threshold)
    return errors


def test_parsing_in_threads_never_fails_spuriously():
    """CPython 3.11 shares the AST constructor's recursion count between threads: plain ast.parse
    here fails with "recursion depth mismatch" (python/cpython#106905), which once ended a
    training run from validation's thread pool; parse_source parses one at a time."""
    import sys
    if sys.version_info[:2] == (3, 11):
        assert any(_parse_in_threads(ast.parse) for _ in range(5)), "the race did not show here"
    assert _parse_in_threads(parse_source, rounds=40) == []
