"""Difficulty levels (reset's options={"level": n}) and the strict gate: the sandbox plays a level,
validation treats each level as an environment of its own, an answer the first observation does
not decide is refused, so is a design with few distinct instances, and the pool moves levels
(raise at the band's top, lower at its bottom, retire at both ends) for designs and for the
fixed pool's examples alike."""
import json
import random

import gymnasium
import pytest
from hostile import FAST

from spade_mini.envs import (ALL_EXAMPLES, ALL_HELDOUT, MEMORY_ONLY, MIN_INSTANCES, STARTER, STARTER_HELDOUT,
                             HandEnv)
from spade_mini.gate import GateSettings, admit
from spade_mini.pool import Pool
from spade_mini.sandbox import EnvLoadError, SandboxedEnv, validate_env

WON, LOST = 1.0, 0.0
STARTER_LIKE = STARTER + MEMORY_ONLY["starter"]  # played under the cpu preset's 6 turns

# three levels; the number grows a digit a level, and level 2's solution() is off by one
LEVELED = '''import random

class SayNumberEnv:
    """Repeat the number shown."""
    levels = 3

    def reset(self, seed=None, options=None):
        self.level = (options or {}).get("level", 0)
        rng = random.Random(seed)
        self.n = rng.randint(1, 9) * 10 ** (self.level + 1) + rng.randint(0, 9)
        return "Write %d as \\\\boxed{n}." % self.n, {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%d}" % self.n
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def solution(self):
        return ["\\\\boxed{%d}" % (self.n + (self.level == 2))]
'''

# "Tom is taller than Ann. Who is older?": the answer is a hidden coin flip
OLDER = '''import random

class OlderEnv:
    """Say who is older."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        a, b = rng.sample(["Tom", "Ann", "Sam", "Liz"], 2)
        self.answer = rng.choice([a, b])
        return "%s is taller than %s. Who is older? Answer \\\\boxed{name}." % (a, b), {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%s}" % self.answer
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def solution(self):
        return ["\\\\boxed{%s}" % self.answer]
'''
# its well-posed twin: the text says who is older, and asks for one side of it
OLDER_TOLD = OLDER.replace('''        self.answer = rng.choice([a, b])
        return "%s is taller than %s. Who is older? Answer \\\\boxed{name}." % (a, b), {}''',
                           '''        asked = rng.choice(["older", "younger"])
        self.answer = a if asked == "older" else b
        return "%s is older than %s. Who is %s? Answer \\\\boxed{name}." % (a, b, asked), {}''')
FOUR_GAMES = LEVELED.replace("rng.randint(1, 9) * 10 ** (self.level + 1) + rng.randint(0, 9)",
                             "rng.randint(1, 4)")


def test_the_sandbox_plays_the_level_asked_for():
    with SandboxedEnv(LEVELED, limits=FAST) as env:
        assert env.levels == 3
        assert len(env.reset(seed=1)[0].split()[1]) == 2  # level 0: two digits
        assert len(env.reset(seed=1, options={"level": 2})[0].split()[1]) == 4
        with pytest.raises(ValueError, match="levels 0 to 2"):
            env.reset(seed=1, options={"level": 3})
    with SandboxedEnv(LEVELED, limits=FAST, level=1) as env:  # the registration kwarg
        assert len(env.reset(seed=1)[0].split()[1]) == 3
    with SandboxedEnv(OLDER, limits=FAST) as env:  # no `levels`: one level
        assert env.levels == 1 and env.reset(seed=0)[0]
        with pytest.raises(ValueError):
            env.reset(seed=0, options={"level": 1})
    for bad in ("0", '"4"', "99"):
        with pytest.raises(EnvLoadError, match="levels must be an int"):
            SandboxedEnv(LEVELED.replace("levels = 3", f"levels = {bad}"), limits=FAST)


def test_each_level_is_validated_as_an_environment_of_its_own():
    results = [validate_env(LEVELED, limits=FAST, level=n, min_instances=MIN_INSTANCES) for n in range(4)]
    assert [v.ok for v in results[:2]] == [True, True] and all(v.levels == 3 for v in results)
    assert results[2].stage == "solution" and "lost" in results[2].reasons[0]  # its solution loses
    assert results[3].stage == "reset" and "has 3" in results[3].reasons[0]  # no such level


def test_an_answer_the_observation_does_not_decide_is_refused_and_its_twin_passes():
    refused = validate_env(OLDER, limits=FAST)
    assert refused.stage == "decided" and "the observation must decide the answer" in refused.reasons[0], refused.reasons
    assert validate_env(OLDER_TOLD, limits=FAST, min_instances=MIN_INSTANCES).ok


def test_a_design_with_few_distinct_instances_is_refused():
    few = validate_env(FOUR_GAMES, limits=FAST, min_instances=MIN_INSTANCES)
    assert few.stage == "instances" and "only 4 distinct instances" in few.reasons[0], few.reasons
    assert validate_env(FOUR_GAMES, limits=FAST, min_instances=4).ok


@pytest.mark.parametrize("env", ALL_EXAMPLES, ids=[e.name for e in ALL_EXAMPLES])
def test_the_examples_have_four_levels_and_pass_the_whole_gate_but_novelty_at_each(env: HandEnv):
    """Every example, at every level, passes what a design must pass but the re-skin check (the
    examples ARE the archive): validation with K distinct instances, and the text checks (no
    answer shown, no hint that gives it away, the question paid). Level 0 is what a reset
    without options plays."""
    with SandboxedEnv(env.source, limits=FAST) as sandboxed:
        assert sandboxed.levels >= 4
        for seed in range(5):  # no options and level 0 are one episode
            assert sandboxed.reset(seed=seed) == sandboxed.reset(seed=seed, options={"level": 0})
    gate = GateSettings(play_turns=6 if env.name in {e.name for e in STARTER_LIKE} else 25)
    for level in range(4):
        v = admit(env.source, gate, random.Random(f"{level}:{env.name}"), level=level)
        assert v.ok, (level, v.stage, v.reasons)


# Held-out environments that the gate refuses as they stand (they stay as earlier rounds measured
# them): last_word's hint names the answer's first letter.
HELD_OUT_REFUSED = {"last_word": "hint"}


@pytest.mark.parametrize("env", ALL_HELDOUT, ids=[e.name for e in ALL_HELDOUT])
def test_the_held_out_environments_pass_the_whole_gate_but_novelty_and_instances(env: HandEnv):
    """The held-out environments stay as earlier rounds measured them; four have fewer than K
    distinct instances on 16 seeds (last_word, first_letter, capital_word, heavy_coin: an
    evaluation counts distinct items), so they are held to every other check, and one is
    refused where HELD_OUT_REFUSED says."""
    gate = GateSettings(play_turns=6 if env in STARTER_HELDOUT else 25, min_instances=0)
    v = admit(env.source, gate, random.Random(env.name))
    assert v.stage == HELD_OUT_REFUSED.get(env.name, "valid"), (v.stage, v.reasons)


# --- the pool moves levels ---------------------------------------------------------------------

def test_a_level_rises_at_the_top_falls_at_the_bottom_and_retires_at_both_ends():
    pool = Pool(band=(0.1, 0.9), window=10, max_age=0)
    for name, skill, level in (("up", "a", 0), ("down", "b", 2), ("hard", "c", 0)):
        assert pool.admit(name, skill, "games", "src", [WON, LOST], 0, level=level, levels=3)
    pool.record("up", [WON] * 9 + [LOST])  # 0.9: at the top
    pool.record("down", [WON] + [LOST] * 9)  # 0.1: at the bottom
    pool.record("hard", [LOST] * 10)
    assert [(e.id, what) for e, what in pool.review(1)] == [("up", "raised"), ("down", "lowered"),
                                                             ("hard", "too hard")]
    up, down = pool.get("up"), pool.get("down")
    assert (up.level, up.returns, up.moves) == (1, [], [[1, 0, 1]]) and down.level == 1
    pool.record("up", [WON] * 8 + [LOST] * 2)  # 0.8: inside, stays
    pool.record("down", [WON] * 2 + [LOST] * 8)
    assert pool.review(2) == []
    pool.record("up", [WON] * 10)
    assert [what for _, what in pool.review(3)] == ["raised"] and up.level == 2
    pool.record("up", [WON] * 10)  # the top level learned: out
    assert [what for _, what in pool.review(4)] == ["learned"] and pool.ids() == {"down"}
    pool.record("down", [WON] * 10)  # a next level that fails validation: learned, not raised
    assert [what for _, what in pool.review(5, validates=lambda env, level: False)] == ["learned"]
    assert [(r["id"], r["level"], r["why"]) for r in pool.life_table()] == [
        ("hard", 0, "too hard"), ("up", 2, "learned"), ("down", 1, "learned")]
    again = Pool.from_dict(pool.to_dict())
    assert again.to_dict() == pool.to_dict()


def test_no_skill_holds_more_than_half_of_the_pool():
    pool = Pool()
    admit = lambda env_id, skill: pool.admit(env_id, skill, "games", "src", [WON, LOST], 0)  # noqa: E731
    assert admit("a1", "a")  # one alone: allowed
    assert not admit("a2", "a")  # 2 of 2
    assert admit("b1", "b") and not admit("a2", "a")  # 2 of 3
    assert admit("c1", "c") and admit("a2", "a")  # 2 of 4: half
    assert not admit("a3", "a")  # 3 of 5
    assert admit("d1", "d") and admit("a3", "a")  # 3 of 6
    assert [e.skill for e in pool.envs].count("a") == 3 and len(pool.envs) == 6


def test_the_fixed_pool_with_levels_plays_the_budget_and_moves_levels_by_the_pools_rule(tiny_policy):
    from scripted import parts
    from test_pool import _cfg, _state
    cfg = _cfg(pool_fill="examples", episodes_per_iteration=16, pool_window=4, pool_max_age=8, pool_max=16)
    state = _state(tiny_policy, cfg)  # the tier is the starters; the scripted agent answers 0 or 1: it loses
    from spade_mini.loop import one_iteration
    row, designs, playables, episodes, _ = parts(one_iteration(state, cfg))
    pool = state.pool
    assert designs == [] and {e.job.arm for e in episodes} == {"no_hint"} and len(episodes) == 16
    assert row["pool_from_examples"] == len(STARTER) and {e.origin for e in pool.envs} == {"example"}
    first = pool.get("example-" + STARTER[0].name) or pool.envs[0]
    first.level = 2  # as if raised twice: a full window of losses lowers it
    for _ in range(3):
        row, _, _, episodes, _ = parts(one_iteration(state, cfg))
        assert len(episodes) == 16 and row["unspent_episodes"] == 0
        assert {e.job.level for e in episodes} <= {0, 1, 2}
    moved = [r for r in pool.life_table() if r["moves"]]
    assert moved and all(to == frm - 1 for r in moved for _, frm, to in r["moves"])  # only lowered
    assert all(r["why"] in (None, "too hard") for r in pool.life_table())  # left only at level 0, too hard
    assert all(r["level"] == 0 for r in pool.life_table() if r["why"] == "too hard")


def test_a_registered_id_and_a_suite_reset_at_a_given_level(tmp_path):
    import spade_mini  # noqa: F401  (registers the bundled ids)
    env = gymnasium.make("spade_mini/Nim-v0", level=3)
    try:
        top, _ = env.reset(seed=4)
        assert top == env.reset(seed=4, options={"level": 3})[0] != env.reset(seed=4, options={"level": 0})[0]
    finally:
        env.close()
    from spade_mini.adapters.registration import register_suite
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "say_number.py").write_text(LEVELED)
    (suite / "manifest.json").write_text(json.dumps({"run": "t", "environments": [
        {"name": "SayNumber", "file": "say_number.py", "setting": "games", "skill": "s"}]}))
    ids = register_suite(suite, namespace="levels_test")
    env = gymnasium.make(ids[0], level=2)
    try:
        assert len(env.reset(seed=1)[0].split()[1]) == 4
    finally:
        env.close()


def test_a_run_writes_a_life_table_that_eval_plot_draws(tmp_path):
    from spade_mini.evaluation.plots import life_table, plot_run
    pool = Pool(window=2, max_age=0)
    pool.admit("up", "a", "games", "src", [WON, LOST], 0, levels=3)
    pool.admit("gone", "b", "games", "src", [WON, LOST], 0)
    pool.record("up", [WON, WON])
    pool.record("gone", [LOST, LOST])
    pool.review(1)
    (tmp_path / "checkpoint-1").mkdir()
    (tmp_path / "checkpoint-1" / "pool.json").write_text(json.dumps(pool.to_dict()))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "pool_size": 2 - i,
                                                                "pool_level_mean": 0.5}) + "\n" for i in range(2)))
    rows = life_table(tmp_path)
    assert [(r["id"], r["why"], r["level"], r["moves"]) for r in rows] == [
        ("gone", "too hard", 0, []), ("up", None, 1, [[1, 0, 1]])]
    written = {p.name for p in plot_run(tmp_path)}
    assert {"life.png", "pool.png"} <= written


# level 0 shows the number to write, level 1 shows it on even numbers only (else the one before it)
CLIMB = '''import random

class WriteNumberEnv:
    """Write the number meant."""
    levels = 2

    def reset(self, seed=None, options=None):
        level = (options or {}).get("level", 0)
        self.n = random.Random(seed).randint(100, 999)
        told = ("the number after %d" % (self.n - 1) if level == 0 or self.n % 2 == 0
                else "the number before %d" % (self.n + 1))
        return "Write %s as \\\\boxed{n}." % told, {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%d}" % self.n
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def solution(self):
        return ["\\\\boxed{%d}" % self.n]
'''


def test_admission_climbs_a_design_too_easy_at_level_0_to_its_first_level_in_band(tiny_policy):
    import re

    from scripted import ScriptedPlayer, parts
    from test_pool import _cfg, _state

    from spade_mini.loop import one_iteration

    def one_more(chat):  # as the agent, box the observation's first number plus one
        return "\\boxed{%d}" % (int(re.findall(r"\d+", chat[-1]["content"].split("Observation:")[-1])[0]) + 1)

    cfg = _cfg(designs_per_iteration=1, plays_per_design=8, episodes_per_iteration=32, max_turns=1,
               turn_max_new_tokens=16)
    state = _state(tiny_policy, cfg)
    state.policy = ScriptedPlayer(tiny_policy, one_more, lambda chat: f"```python\n{CLIMB}```")
    row, designs, playables, episodes, scores = parts(one_iteration(state, cfg))
    assert designs[0].valid and scores[designs[0].id].no_hint_solve_rate == 1.0  # too easy at level 0
    (env,) = state.pool.envs
    assert env.level == 1 and env.levels == 2 and row["pool_admitted"] == 1
    level_1 = [e for e in episodes if e.job.level == 1]
    # the budget of 32 no-hint plays (it has no hint(): no hint arm): K at level 0, K to admit it
    # at level 1, then the rest replayed there
    assert len(episodes) == 32 and len(level_1) == 24 == row["replay_episodes"]
    assert 0 < sum(e.ret > 0 for e in level_1[:8]) < 8


def test_a_crash_in_replay_drops_the_environment_and_its_memory_record_turns_invalid(tiny_policy):
    from scripted import parity_source
    from test_pool import _cfg, _state

    from spade_mini.designer.memory import EnvRecord, Memory
    from spade_mini.loop import Iteration
    from spade_mini.replay import play_the_rest
    from spade_mini.settings import Settings
    crashy = parity_source(10).replace("        won = action", "        1 / 0\n        won = action")
    cfg = _cfg(episodes_per_iteration=4)
    state = _state(tiny_policy, cfg, memory=Memory())
    state.memory.add(EnvRecord("it0000-00", 0, "games", "s", "parity", crashy, True, no_hint_solve_rate=0.5))
    assert state.pool.admit("it0000-00", "s", "games", crashy, [WON, LOST], 0)
    record = Iteration(1)
    play_the_rest(state, Settings.of(cfg), record)
    assert len(record.episodes) == 4 and record.pool.changes == ["crashed"] and not state.pool.envs
    (record,) = state.memory.records
    assert not record.valid and "crashed in play" in record.reasons[-1]
