"""Tests for the hand-written environments: contract, winnability, losing play, determinism,
honest hints.

Solutions are computed in-process by exec'ing the trusted source with the same seed; winning
plays go through the sandbox, so these tests also pin the sandbox and the environments to the same
contract. Losing plays run in-process because they are many and only test the environments.
Validation plays every solution too (its solution stage), and the leak check reads each hint
with the solution of its episode, both from the sandbox (`solve`).
"""
import ast
import importlib
import random
import sys

import pytest
from gymnasium.utils.env_checker import check_env

from spade_mini.envs import EXAMPLES, HELDOUT, HandEnv
from spade_mini.reward.leaks import final_answer, leaked_answer
from spade_mini.sandbox import SandboxedEnv, solve, validate_env
from spade_mini.sandbox.solution import NO_SOLUTION

ALL = EXAMPLES + HELDOUT
IDS = [env.name for env in ALL]
SKILLS = {
    "games": {"pattern_recognition", "logical_deduction", "strategic_planning",
              "mathematical_reasoning", "spatial_reasoning", "causal_inference", "memory_recall",
              "optimization", "language_understanding"},
    "tool_use": {"api_orchestration", "data_retrieval", "state_modification", "error_recovery",
                 "tool_selection", "multi_step_workflows"},
}
MAX_TURNS = 25
SEEDS = [0, 1, 7]
DESIGN_TOKENS = 520  # an example with its levels, solution() included, in the embedded model's tokens
FIRST_OBS_TOKENS = 64  # the first observation is in the agent's prompt every turn
# Actions that must never win: junk text, empty boxes, and wrong final answers.
JUNK = {
    "games": ["\\boxed{test}", "\\boxed{}", "\\boxed{-9999}", "no answer here"],
    "tool_use": ["<answer>wrong</answer>", "<answer></answer>", "hello",
                 '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>'],
}


def make(env: HandEnv):
    """Instantiate the environment in-process (trusted source only)."""
    if "tooluse" not in sys.modules:  # the sandbox exposes the helper as a top-level module
        sys.modules["tooluse"] = importlib.import_module("spade_mini.tooluse")
    namespace: dict = {"__name__": f"env_{env.name}"}
    exec(compile(env.source, f"<{env.name}>", "exec"), namespace)
    classes = [v for k, v in namespace.items()
               if k.endswith("Env") and isinstance(v, type) and v.__module__ == namespace["__name__"]]
    assert len(classes) == 1, f"{env.name}: expected one *Env class, found {classes}"
    return classes[0]()


def check_step(result) -> None:
    obs, reward, terminated, truncated, info = result
    assert type(obs) is str and obs
    assert type(reward) is float and reward in (0.0, 1.0)
    assert type(terminated) is bool and type(truncated) is bool and type(info) is dict


def play_sandboxed(env: HandEnv, seed: int, actions: list[str]) -> list[tuple]:
    """Reset with `seed` in the sandbox and play `actions` until the episode ends."""
    with SandboxedEnv(env.source) as sandboxed:
        sandboxed.reset(seed=seed)
        return play_on(sandboxed, actions)


def play_on(game, actions: list[str]) -> list[tuple]:
    """Step `game` through `actions` until the episode ends; the step results."""
    results = []
    for action in actions:
        results.append(game.step(action))
        check_step(results[-1])
        if results[-1][2] or results[-1][3]:
            break
    return results


def test_catalogue_names_skills_and_split():
    assert len([e for e in EXAMPLES if e.setting == "games"]) >= 8
    assert len([e for e in EXAMPLES if e.setting == "tool_use"]) >= 4
    assert len(HELDOUT) >= 6 and {e.setting for e in HELDOUT} == {"games", "tool_use"}
    assert len(set(IDS)) == len(IDS)
    assert not {e.source for e in EXAMPLES} & {e.source for e in HELDOUT}
    for env in ALL:
        assert env.skill in SKILLS[env.setting], env.name
        assert env.summary and "\n" not in env.summary
        uses_helper = "from tooluse import" in env.source
        assert uses_helper == (env.setting == "tool_use"), env.name


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_contract_in_process(env):
    game = make(env)
    obs, info = game.reset(42)
    assert type(obs) is str and obs and type(info) is dict
    if env.setting == "tool_use":
        assert info["tools"] and all(t["function"]["name"] for t in info["tools"])
    for probe in ["\\boxed{1}", "\\boxed{test}", "\\boxed{42}"]:
        result = game.step(probe)
        check_step(result)
        if result[2]:
            break
    assert type(game.reset(123)[0]) is str
    hint = game.hint()
    assert type(hint) is str and 10 < len(hint) < 400


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_validate_env_accepts(env):
    validation = validate_env(env.source, require_solution=True)
    assert validation.ok, validation.reasons
    assert "solution" in validation.timings  # its solution won, and blind players lost
    assert validation.class_name and validation.class_name.endswith("Env")
    assert validation.has_hint


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_solution_wins(env):
    for seed in SEEDS:
        game = make(env)
        game.reset(seed)
        actions = game.solution()
        assert 1 <= len(actions) <= MAX_TURNS
        results = play_sandboxed(env, seed, actions)
        assert len(results) == len(actions), f"seed {seed}: ended early: {results[-1][0]}"
        assert all(r[1] == 0.0 and not r[2] for r in results[:-1])
        obs, reward, terminated, _, _ = results[-1]
        assert reward == 1.0 and terminated, f"seed {seed}: {obs}"


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_junk_actions_lose_within_turn_cap(env):
    for seed in SEEDS:
        for junk in JUNK[env.setting]:
            game = make(env)
            game.reset(seed)
            results = play_on(game, [junk] * MAX_TURNS)
            assert all(r[1] == 0.0 for r in results), f"{junk!r} won"
            assert results[-1][2] or results[-1][3], f"{junk!r}: no end after {MAX_TURNS} turns"


def random_action(rng: random.Random, setting: str) -> str:
    """A plausible-looking but uninformed action: the kind of play that should lose."""
    if setting == "tool_use":
        return f"<answer>{rng.choice(['done', str(rng.randint(0, 500)), 'ORD-1000', 'yes'])}</answer>"
    inner = rng.choice([str(rng.randint(1, 64)), rng.choice(["up", "down", "left", "right"]),
                        f"flip {rng.randint(1, 4)}", "answer " + "".join(rng.sample("ABCD", 4)),
                        f"answer {rng.randint(1, 9)}", "weigh 1,2,3 vs 4,5,6", "ready",
                        f"{rng.randint(-5, 5)},{rng.randint(-5, 5)}", "1,2", "planet"])
    return f"\\boxed{{{inner}}}"


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_random_play_rarely_wins(env):
    rng, wins, episodes = random.Random(0), 0, 40
    for seed in range(episodes):
        game = make(env)
        game.reset(seed)
        results = play_on(game, [random_action(rng, env.setting) for _ in range(MAX_TURNS)])
        wins += results[-1][1] == 1.0
    assert wins / episodes <= 0.2


# code_breaker's honest hint names two codes, and states the answer of the episodes that have them
OPENINGS = {"code_breaker": {"\\boxed{112}", "\\boxed{334}"}}


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_the_leak_check_passes_honest_hints_and_flags_stated_answers(env):
    solved = solve(env.source, range(10), max_actions=MAX_TURNS)
    for s in solved:
        others = [o.actions for o in solved if o is not s]
        opening = s.actions[-1] in OPENINGS.get(env.name, ())
        for known in ((), others):
            assert (leaked_answer(s.hint, s.actions, known) is not None) == opening, s
        assert leaked_answer(f"Try {s.actions[-1]} now.", s.actions) == s.actions[-1].strip()
        final = final_answer(s.actions)
        if len(final) >= 2:
            assert leaked_answer(f"{s.hint} It is {final}!", s.actions) == final.strip()
    if env.name in OPENINGS:  # seeds 4 and 5 have the codes 112 and 334
        assert {s.actions[-1] for s in solved} >= OPENINGS[env.name]


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_reset_is_deterministic_per_seed(env):
    def episode(seed):
        # The solution stands for the hidden state, which the first observation may not show.
        game = make(env)
        obs, _ = game.reset(seed)
        return obs, tuple(game.solution())
    first = [episode(seed) for seed in range(6)]
    assert first == [episode(seed) for seed in range(6)]
    assert len(set(first)) >= 3, "different seeds should usually give different episodes"


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_gymnasium_check_env(env):
    with SandboxedEnv(env.source) as sandboxed:
        check_env(sandboxed, skip_render_check=True)
        _, info = sandboxed.reset(seed=0)
        if env.setting == "tool_use":
            assert info["tools"], "the tool specs must survive the trip through the sandbox"


# --- what the designer sees: compact examples, solution() last ----------------------------------

@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from spade_mini.config import Config
    from spade_mini.policy import embedded_checkpoint
    return AutoTokenizer.from_pretrained(str(embedded_checkpoint(Config().cache_dir)))


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_solution_is_the_last_method(env):
    tree = ast.parse(env.source)
    cls = tree.body[-1]
    assert isinstance(cls, ast.ClassDef) and cls.name.endswith("Env"), "the class must end the file"
    assert isinstance(cls.body[-1], ast.FunctionDef) and cls.body[-1].name == "solution"
    assert env.source.count("def solution(") == 1
    cut = env.without_solution
    assert env.source.startswith(cut.rstrip()) and "def solution" not in cut
    refused = validate_env(cut)  # without its solution() it proves nothing
    assert refused.stage == "solution" and refused.reasons == [NO_SOLUTION]
    assert validate_env(cut, require_solution=False).ok


@pytest.mark.parametrize("env", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_examples_are_compact(env, tokenizer):
    design = len(tokenizer(env.source)["input_ids"])
    assert design <= DESIGN_TOKENS, f"{env.name}: {design} tokens"
    longest = max(len(tokenizer(make(env).reset(seed)[0])["input_ids"]) for seed in range(50))
    assert longest <= FIRST_OBS_TOKENS, f"{env.name}: a first observation of {longest} tokens"
    if env.setting == "games":
        assert "\\boxed{" in make(env).reset(0)[0], "a game's first observation shows the answer format"
