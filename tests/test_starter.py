"""The starter tier (spade_mini/envs/starter/): every environment wins with its solution() through
the sandbox, a constant junk reply loses, hints point at the answer without holding it, and the
held-out starters share nothing with an example. Solutions are read out of the sandbox with the
warm start's own `solved_source`, so no environment runs in this process."""
import json
import re

import pytest

from spade_mini.designer import SKILLS
from spade_mini.envs import EXAMPLES, HELDOUT, STARTER, STARTER_HELDOUT, HandEnv
from spade_mini.sandbox import SandboxedEnv, validate_env
from spade_mini.warmstart import solved_source

ALL = STARTER + STARTER_HELDOUT
IDS = [env.name for env in ALL]
SEEDS = range(20)
MAX_TURNS = 6          # the cpu-smoke turn cap: a starter is decided well within it
DESIGN_TOKENS = 380    # a starter with its levels, solution() included, in the embedded model's tokens (a cpu-smoke design may write 400)
JUNK = ["\\boxed{test}", "\\boxed{}", "\\boxed{-9999}", "no answer here"]


def boxed(action: str) -> str:
    return action.removeprefix("\\boxed{").removesuffix("}")


def play(env: SandboxedEnv, seed: int, actions) -> list[tuple]:
    """Reset with `seed` and step through `actions` until the episode ends."""
    env.reset(seed=seed)
    results = []
    for action in actions:
        results.append(env.step(action))
        if results[-1][2] or results[-1][3]:
            break
    return results


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from spade_mini.config import Config
    from spade_mini.policy import embedded_checkpoint
    return AutoTokenizer.from_pretrained(str(embedded_checkpoint(Config().cache_dir)))


def test_two_disjoint_sets_with_known_skills():
    keys = {s.key for s in SKILLS["games"]}
    assert len(STARTER) >= 8 and len(STARTER_HELDOUT) >= 8
    assert all(env.setting == "games" and env.skill in keys for env in ALL)
    names = [e.name for e in ALL + EXAMPLES + HELDOUT]
    assert len(set(names)) == len(names)
    examples = STARTER + EXAMPLES
    assert not {e.source for e in STARTER_HELDOUT} & {e.source for e in examples}
    classes = lambda envs: {re.search(r"^class (\w+Env)", e.source, re.M).group(1) for e in envs}  # noqa: E731
    assert not classes(STARTER_HELDOUT) & classes(examples)


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_solution_wins_on_every_seed(env: HandEnv):
    with SandboxedEnv(solved_source(env)) as game:
        for seed in SEEDS:
            game.reset(seed=seed)
            actions = json.loads(game.hint())
            assert 1 <= len(actions) <= 2
            results = play(game, seed, actions)
            last = len(actions) - 1  # only the last action ends the episode, and wins it
            assert [r[1] for r in results] == [0.0] * last + [1.0], f"seed {seed}: {results[-1][0]}"
            assert [r[2] for r in results] == [False] * last + [True]


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_a_constant_junk_reply_loses(env: HandEnv):
    with SandboxedEnv(env.source) as game:
        for seed in range(5):
            for junk in JUNK:
                results = play(game, seed, [junk] * MAX_TURNS)
                assert all(r[1] == 0.0 for r in results), f"{junk!r} won"
                assert results[-1][2], f"{junk!r}: no end after {MAX_TURNS} turns"


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_hint_points_without_holding_the_answer(env: HandEnv):
    with SandboxedEnv(solved_source(env)) as solved, SandboxedEnv(env.source) as game:
        firsts = set()
        for seed in SEEDS:
            solved.reset(seed=seed)
            answer = boxed(json.loads(solved.hint())[-1]).lower()
            obs, _ = game.reset(seed=seed)
            hint = game.hint()
            firsts.add(obs)
            assert 10 < len(hint) < 200
            assert not re.search(rf"\b{re.escape(answer)}\b", hint.lower()), f"seed {seed}: {hint}"
        assert len(firsts) >= 4, "different seeds should give different episodes"


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_source_is_short_and_valid(env: HandEnv, tokenizer):
    assert len(tokenizer(env.source)["input_ids"]) <= DESIGN_TOKENS
    validation = validate_env(env.source)
    assert validation.ok and validation.has_hint, validation.reasons


@pytest.mark.parametrize("env", ALL, ids=IDS)
def test_the_worked_example_never_holds_the_answer(env: HandEnv):
    """Each first observation shows the format on a worked example, whose answer the small
    agent may copy: it must never be the episode's own answer."""
    with SandboxedEnv(solved_source(env)) as solved:
        for seed in SEEDS:
            obs, _ = solved.reset(seed=seed)
            shown = set(re.findall(r"\\boxed\{([^}]*)\}", obs))
            assert shown, "the first observation shows the answer format"
            assert boxed(json.loads(solved.hint())[-1]) not in shown, f"seed {seed}: {obs}"
