"""The active pool (spade_mini/pool.py) and what the loop does with it: admission, replay on fresh
seeds without a hint arm, retirement, re-admission from the memory, designing until K are valid,
equal no-hint episodes in both arms, and an exact --resume after a SIGKILL."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from scripted import invalid_first, parity_roles, parity_source, parts

from spade_mini.config import Config
from spade_mini.designer import skills_for
from spade_mini.designer.memory import EnvRecord, Memory
from spade_mini.envs import STARTER
from spade_mini.loop import State, one_iteration
from spade_mini.pool import AGE_REASON, Pool, PoolEnv, informative
from spade_mini.reinforce import make_optimizer
from spade_mini.reward import designer_reward
from spade_mini.reward.bands import inside
from spade_mini.shape import Shape

ROOT = Path(__file__).resolve().parents[1]
WON, LOST = 1.0, 0.0


# --- the pool on its own ------------------------------------------------------------------------

def test_admission_takes_only_informative_plays():
    assert informative([WON, LOST, LOST, LOST]) and not informative([LOST] * 8)
    assert not informative([WON] * 8) and not informative([])
    assert not informative([WON] + [LOST] * 9, band=(0.2, 0.8))  # 0.1: below the band
    # at the band's edges themselves: not inside (the pool moves a level there)
    assert not informative([WON] + [LOST] * 9) and not informative([WON] * 9 + [LOST])
    pool = Pool(band=(0.1, 0.9), max_size=2)
    assert pool.admit("a", "s", "games", "src", [WON, LOST], iteration=0)
    assert not pool.admit("b", "t", "games", "src", [LOST, LOST], iteration=0)  # never solved
    assert not pool.admit("c", "t", "games", "src", [WON, WON], iteration=0)  # always solved
    assert not pool.admit("a", "t", "games", "src", [WON, LOST], iteration=0)  # already in
    assert pool.admit("d", "t", "games", "src", [LOST, WON], iteration=0)
    assert not pool.admit("e", "u", "games", "src", [LOST, WON], iteration=0)  # full
    assert pool.ids() == {"a", "d"} and pool.in_band() == 2


def test_one_level_environments_retire_at_both_edges_and_age_only_unjudged():
    pool = Pool(band=(0.1, 0.9), max_age=3, window=6)
    for name, skill in (("learned", "a"), ("hard", "b"), ("steady", "c"), ("unjudged", "d")):
        pool.admit(name, skill, "games", "src", [WON, LOST], iteration=0)
    assert pool.review(0) == []  # just admitted, in band, young
    pool.record("learned", [WON] * 3)
    assert pool.review(0) == []  # 5 plays: the band is judged on a full window (6)
    pool.record("learned", [WON] * 3)
    pool.record("hard", [LOST] * 6)
    pool.record("steady", [WON, LOST, WON, LOST])
    assert [(e.id, why) for e, why in pool.review(1)] == [("learned", "learned"), ("hard", "too hard")]
    # judged inside the band, "steady" stays however old; "unjudged" has had 2 plays in 3 iterations
    assert [(e.id, why) for e, why in pool.review(2)] == [("unjudged", AGE_REASON)]
    assert [(e.id, why) for e, why in pool.review(9)] == []
    assert pool.ids() == {"steady"} and pool.retired == {"learned": ("learned", 1), "hard": ("too hard", 1),
                                                        "unjudged": (AGE_REASON, 2)}
    assert [row["why"] for row in pool.life_table()] == ["learned", "too hard", AGE_REASON, None]
    back = Pool(window=6)  # one back from the memory has no plays yet: 3 won are not a verdict
    back.envs.append(PoolEnv("m", "s", "games", "src", admitted=0, origin="memory"))
    back.record("m", [WON] * 3)
    assert back.review(0) == [] and back.ids() == {"m"}


def test_the_design_schedule_runs_every_r_iterations_or_when_short():
    pool = Pool(min_size=1)
    assert pool.due(0, 4) and pool.short()
    pool.admit("a", "s", "games", "src", [WON, LOST], iteration=0)
    assert [pool.due(it, 4) for it in range(1, 9)] == [False, False, False, True, False, False, False, True]


def test_split_shares_the_budget_in_groups_drawn_by_p_times_1_minus_p():
    pool = Pool(window=8)
    for name in "abc":
        pool.admit(name, name, "games", "src", [WON, LOST], iteration=0)
    pool.record("a", [WON] * 7)  # a: 8/9 won recently, b and c: 1/2
    rng = random.Random(0)
    assert sorted(n for _, n in pool.split(25, group=8, rng=rng)) == [8, 8, 9]  # all three, sizes within one
    assert [n for _, n in pool.split(5, group=8, rng=rng)] == [5]  # one group, however small
    assert pool.split(0, group=8, rng=rng) == []
    drawn = [pool.split(8, group=8, rng=rng)[0][0].id for _ in range(3000)]
    # weights p(1 - p): a 8/9 * 1/9 = 0.099, b and c 0.25 each: a is drawn 0.099 / 0.599 of the time
    assert abs(drawn.count("a") / 3000 - 0.099 / 0.599) < 0.03, drawn.count("a")
    assert abs(drawn.count("b") - drawn.count("c")) < 200


def _record(env_id, rate, iteration=1, valid=True):
    return EnvRecord(env_id, iteration, "games", "pattern_recognition", env_id, parity_source(7), valid,
                     no_hint_solve_rate=rate)


def test_the_store_holds_the_runs_own_waiting_and_in_band_designs_only():
    memory = Memory()
    memory.add([_record("seeded", 0.5, iteration=-1), _record("invalid", 0.5, valid=False),
                _record("never", 0.0), _record("always", 1.0), _record("old", 0.5), _record("gone", 0.5),
                _record("aged", 0.4), _record("fresh", 0.6), _record("waiting", None)])
    for i, r in enumerate(memory.records):  # one skill each: the skill cap is tested on its own
        r.skill = f"skill{i}"
    pool = Pool(min_size=3)
    pool.retired = {"gone": ("too hard", 4), "aged": (AGE_REASON, 4), "recent": (AGE_REASON, 4)}
    memory.add(_record("recent", 0.5))
    memory.records[-1].skill = "skill-recent"
    # the most recent first; never played (it waited) or last inside the band; a band retirement
    # never comes back, an age retirement after as many iterations away as its age ("recent" left
    # at 4, so at 8 it may: 8 - 4 >= max_age 4)
    assert [r.id for r in pool.stored(memory, iteration=8)] == ["recent", "waiting", "fresh", "aged", "old"]
    early = Pool(min_size=3)
    early.retired = {"recent": (AGE_REASON, 6)}
    assert "recent" not in [r.id for r in early.stored(memory, iteration=8)]  # 2 iterations away: not yet
    assert pool.admit("fresh", "skill7", "games", "src", [WON, LOST], iteration=8)
    assert "fresh" not in [r.id for r in pool.stored(memory, iteration=8)]  # in the pool: not stored twice


def test_the_pool_round_trips_through_json():
    pool = Pool(band=(0.2, 0.8), max_age=5, window=6, min_size=1, max_size=3)
    pool.admit("a", "s", "games", "src", [WON, LOST], iteration=2)
    pool.record("a", [LOST, WON, WON])
    pool.retired["b"] = ("learned", 3)
    again = Pool.from_dict(json.loads(json.dumps(pool.to_dict())))
    assert again.to_dict() == pool.to_dict() and again.envs == pool.envs


def test_the_gated_blend_pays_nothing_from_regret_at_rate_0_or_1():
    for rate in (0.0, 1.0):
        assert designer_reward("gated_blend", regret=1.0, no_hint_solve_rate=rate) == 0.0
        assert designer_reward("blend", regret=1.0, no_hint_solve_rate=rate) == pytest.approx(0.4)
    # inside the band it is the paper's blend
    for rate, regret in ((0.25, 0.0), (0.5, 0.1), (0.75, 0.3)):
        assert designer_reward("gated_blend", regret=regret, no_hint_solve_rate=rate) == pytest.approx(
            designer_reward("blend", regret=regret, no_hint_solve_rate=rate))
    # the drift it closes: under blend, never solved alone outearns in band with a useless hint
    assert designer_reward("blend", regret=1.0, no_hint_solve_rate=0.0) > designer_reward(
        "blend", regret=0.0, no_hint_solve_rate=0.25)
    assert designer_reward("gated_blend", regret=1.0, no_hint_solve_rate=0.0) < designer_reward(
        "gated_blend", regret=0.0, no_hint_solve_rate=0.25)


# --- the loop with the pool: scripted designer and agent around the tiny model -----------------

def _cfg(**kw):
    # the scripted designer's parity games differ only in their number range: re-skins of each
    # other, which the novelty gate refuses (tests/test_gate.py); these tests are of the pool
    base = dict(model="tiny", designs_per_iteration=2, plays_per_design=4, max_turns=1,
                turn_max_new_tokens=8, hint_source="env", lr=1e-3, pool_max_age=3, design_every=2,
                pool_min=1, designer_reward="gated_blend", designer_baseline="cohort", drift_probe=0, novelty=False)
    return Config(**{**base, **kw})


def _state(tiny_policy, cfg, memory=None):
    return State(parity_roles(tiny_policy), make_optimizer(tiny_policy.model, cfg.lr), skills_for("games"),
                 None, memory, random.Random(0), examples=list(STARTER), pool=Pool.from_config(cfg))


def test_new_designs_are_admitted_and_replayed_without_a_hint_on_fresh_seeds(tiny_policy):
    import torch
    torch.manual_seed(0)
    cfg = _cfg(episodes_per_iteration=16)
    state = _state(tiny_policy, cfg)
    row, designs, playables, episodes, scores = parts(one_iteration(state, cfg))
    assert [d.valid for d in designs] == [True, True]
    informative_ids = [d.id for d in designs if 0 < scores[d.id].no_hint_solve_rate < 1]
    # both designs are of one skill (two a skill, for its baseline): the first informative one
    # joins, and the second would make that skill the whole pool
    assert designs[0].skill == designs[1].skill and informative_ids
    admitted = informative_ids[:1]
    assert row["pool_admitted"] == 1 and state.pool.ids() == set(admitted)
    no_hint = [e for e in episodes if e.job.arm == "no_hint"]
    assert len(no_hint) == 16 == row["no_hint_episodes"]  # 2 designs x 4 paired seeds, then 8 replays
    first_seeds = {e.job.seed for e in no_hint}
    for d in designs:  # the admitted design is scored on its replays of this iteration too (same policy)
        plays = [e.ret for e in no_hint if e.job.design_id == d.id]
        assert len(plays) == (12 if d.id in admitted else 4)
        assert scores[d.id].no_hint_solve_rate == sum(r > 0 for r in plays) / len(plays)
        if d.id in admitted:  # and its first 4 plays alone would have said otherwise (else this proves nothing)
            assert sum(r > 0 for r in plays[:4]) / 4 != scores[d.id].no_hint_solve_rate

    row, designs, playables, episodes, scores = parts(one_iteration(state, cfg))  # iteration 1: not due
    assert designs == [] and row["designs"] == 0 and row["valid_fraction"] is None
    assert {e.job.arm for e in episodes} == {"no_hint"} and len(episodes) == 16
    assert {e.job.design_id for e in episodes} <= set(admitted)
    assert not {e.job.seed for e in episodes} & first_seeds  # fresh seeds
    assert row["replay_episodes"] == 16 and row["pool_replayed"] >= 1
    assert row["informative_episodes"] <= row["no_hint_episodes"]


@pytest.mark.parametrize("fill", ["designs", "both", "examples"])
def test_the_no_hint_episodes_do_not_follow_the_design_batch(tiny_policy, fill):
    """One and three designs a call: the designer writes more, every arm plays the same budget
    (--episodes-per-iteration 0: N x K = 2 x 4), whatever fills the pool."""
    rows = []
    for batch in (1, 3):
        cfg = _cfg(pool_fill=fill, design_batch=batch)
        rows.append(parts(one_iteration(_state(tiny_policy, cfg), cfg))[0])
    assert rows[0]["no_hint_episodes"] == rows[1]["no_hint_episodes"] == Shape.of(cfg).no_hint_episodes == 8
    if fill != "examples":
        assert (rows[0]["designs"], rows[1]["designs"]) == (1, 3)


def test_a_design_the_budget_cannot_play_waits_in_the_store_and_is_played_fresh_when_the_pool_is_short(tiny_policy):
    """Three valid designs, room for two (budget 8, K 4): the third waits, unplayed, unscored and
    no designer sample, a valid record of the memory; in the next iteration, where the designer
    writes nothing valid, it is played on K fresh no-hint seeds and joins by them, once."""
    torch.manual_seed(0)
    cfg = _cfg(design_batch=3, pool_min=3, design_every=100)
    state = _state(tiny_policy, cfg, Memory())
    written, parity = [0], state.policy.replies

    def three_then_none(chat):
        written[0] += 1
        return parity(chat) if written[0] <= 3 else "No code here, sorry."
    state.policy.replies = three_then_none
    row, designs, _, episodes, scores = parts(one_iteration(state, cfg))
    assert [d.valid for d in designs] == [True] * 3 and row["designs_waiting"] == 1 and row["no_hint_episodes"] == 8
    waiting = designs[2]
    assert waiting.id not in scores and waiting.id not in {e.job.design_id for e in episodes}
    assert waiting.reward is None and row["designer_samples"] == 2
    record = next(r for r in state.memory.records if r.id == waiting.id)
    assert record.valid and record.no_hint_solve_rate is None

    row, designs, _, episodes, scores = parts(one_iteration(state, cfg))  # short: the designer writes, nothing valid
    assert designs and not any(d.valid for d in designs) and row["pool_from_store"] == 1
    mine = [e for e in episodes if e.job.design_id == waiting.id]
    assert len(mine) == 4 and {e.job.arm for e in mine} == {"no_hint"} and row["no_hint_episodes"] == 8
    joined = waiting.id in state.pool.ids()
    assert joined == (row["pool_readmitted"] == 1) == informative([e.ret for e in mine])
    if not joined:  # its rate on those plays is kept, and out of the band it is not taken again
        assert record.pool_rate == sum(e.ret > 0 for e in mine) / 4
    later = one_iteration(state, cfg)
    if joined or not inside(record.pool_rate, state.pool.band):  # in the pool, or judged out of the band
        assert waiting.id not in [p.id for p in later.stored]
    assert len(state.pool.ids()) == len(state.pool.envs)  # never in the pool twice


def test_the_store_plays_what_waited_whenever_there_is_room_and_the_in_band_only_when_short(tiny_policy):
    from spade_mini.fill import from_store
    from spade_mini.settings import Settings
    cfg = _cfg()
    memory = Memory()
    memory.add([_record("in_band", 0.5), _record("waiting", None)])
    memory.records[0].skill = "skill0"
    state = _state(tiny_policy, cfg, memory)
    settings = Settings.of(cfg)
    assert [p.id for p in from_store(state, settings, 2, iteration=1, played=False)] == ["waiting"]
    assert [p.id for p in from_store(state, settings, 2, iteration=1)] == ["waiting", "in_band"]
    assert [p.id for p in from_store(state, settings, 1, iteration=1)] == ["waiting"]  # the room holds


def test_a_stored_design_that_re_skins_what_the_archive_admitted_since_is_not_played(tiny_policy):
    from spade_mini.fill import from_store
    from spade_mini.gate import Archive
    from spade_mini.settings import Settings
    cfg = _cfg(novelty=True)
    memory = Memory()
    memory.add([_record("waiting", None)])
    state = _state(tiny_policy, cfg, memory)
    state.archive = Archive()
    state.archive.add("waiting", parity_source(7))  # itself, admitted when it validated: not a re-skin
    assert [p.id for p in from_store(state, Settings.of(cfg), 2, iteration=1)] == ["waiting"]
    state.archive.add("later", parity_source(900))  # the same game, admitted since
    assert from_store(state, Settings.of(cfg), 2, iteration=1) == []
    assert not memory.records[0].valid and "a re-skin of later" in memory.records[0].reasons[-1]


def test_the_design_budget_in_attempts_holds_over_the_run_and_its_resume(tiny_policy):
    """Five attempts a run, two slots an iteration: 2, 2, 1, then none; the count is the pool's,
    so a pool saved and restored (a checkpoint) goes on from it."""
    cfg = _cfg(design_budget=5, design_every=1)
    state = _state(tiny_policy, cfg, Memory())
    written = [len(parts(one_iteration(state, cfg))[1]) for _ in range(2)]
    state.pool = Pool.from_dict(json.loads(json.dumps(state.pool.to_dict())))  # what --resume restores
    written += [len(parts(one_iteration(state, cfg))[1]) for _ in range(2)]
    assert written == [2, 2, 1, 0] and state.pool.spent["attempts"] == 5


def test_the_design_budget_in_seconds_holds_on_a_fake_clock(tiny_policy, monkeypatch):
    """Each design call takes 300 s of a fake clock, a regeneration at most two calls (4
    attempts): of a budget of 800 s the first spends 600, the second starts one call in the 200 s
    left and no second, and the third does not start."""
    import types

    import spade_mini.designer.design as design_module
    import spade_mini.fill as fill_module
    now = [0.0]
    clock = types.SimpleNamespace(monotonic=lambda: now[0])
    monkeypatch.setattr(fill_module, "time", clock)
    monkeypatch.setattr(design_module, "time", clock)
    cfg = _cfg(design_budget_s=800, design_every=1, valid_designs=2, design_attempts=4)
    state = _state(tiny_policy, cfg, Memory())

    def slow(chat):  # nothing valid, so a regeneration would write again
        now[0] += 150.0  # two rows a call: 300 s a call
        return "No code here, sorry."
    state.policy.replies = slow
    rows = [parts(one_iteration(state, cfg))[1] for _ in range(3)]
    assert [len(r) for r in rows] == [4, 2, 0]
    assert state.pool.spent["seconds"] == 900.0 and state.pool.spent["attempts"] == 6


def test_every_presets_budget_is_the_same_at_every_design_batch():
    for preset in ("cpu-smoke", "cpu", "gpu"):
        budgets = {Shape.of(Config.from_preset(preset, design_batch=b)).no_hint_episodes for b in (16, 32, 64)}
        assert budgets == {Shape.of(Config.from_preset(preset)).no_hint_episodes}, preset
    assert Shape.of(Config.from_preset("cpu", design_batch=32)).slots == 32


def test_the_fixed_pool_plays_the_same_no_hint_episodes_and_no_hint_arm(tiny_policy):
    cfg = _cfg(pool_fill="examples", episodes_per_iteration=10)
    state = _state(tiny_policy, cfg)
    row, designs, playables, episodes, scores = parts(one_iteration(state, cfg))
    assert designs == [] and {e.job.arm for e in episodes} == {"no_hint"}
    # every starter example in the pool, 10 no-hint plays in groups of at least K = 4: 2 examples of 5
    assert row["pool_size"] == row["pool_examples"] == len(STARTER) == row["pool_from_examples"]
    assert len(episodes) == 10 and sorted(p.plays for p in playables) == [5, 5]
    assert row["valid_fraction"] is None and row["designs"] == 0


def test_design_until_k_valid_stops_at_k_or_at_the_cap_and_keeps_every_attempt(tiny_policy, tmp_path):
    from spade_mini.run import RunDir, iteration_records
    cfg = _cfg(valid_designs=3, design_attempts=12, designs_per_iteration=4)
    state = _state(tiny_policy, cfg, memory=Memory())
    state.policy = invalid_first(tiny_policy, invalid=3)  # 3 invalid replies, then parity games
    row, designs, *_, scores = parts(one_iteration(state, cfg))
    # a batch of 4 (1 valid), then the 3 invalid slots again (3 valid): K = 3 reached, no third batch
    assert [d.valid for d in designs] == [False, False, False, True, True, True, True]
    assert [d.attempt for d in designs] == [1, 1, 1, 1, 2, 2, 2]
    assert row["designs"] == 7 and row["valid_designs"] == 4
    run = RunDir(tmp_path, "r")
    samples, envs = iteration_records(0, designs, [], scores)
    assert len([s for s in samples if s["kind"] == "design"]) == len(designs) == len(envs)
    assert len({i for i, _ in envs}) == len(envs)  # one file per attempt
    assert [r.id for r in state.memory.records if r.iteration == 0] == [d.id for d in designs]
    run.write_iteration(row, samples, envs)

    capped = _cfg(valid_designs=2, design_attempts=5, designs_per_iteration=2)
    state = _state(tiny_policy, capped)
    state.policy = invalid_first(tiny_policy, invalid=100)
    row, designs, *_ = parts(one_iteration(state, capped))
    assert len(designs) == 5 and row["valid_designs"] == 0  # the attempt cap
    timed = _cfg(valid_designs=2, design_attempts=50, design_seconds=1e-9)
    state = _state(tiny_policy, timed)
    state.policy = invalid_first(tiny_policy, invalid=100)
    row, designs, *_ = parts(one_iteration(state, timed))
    assert len(designs) == 2  # the first batch only: no new batch once the seconds are spent
    one = _cfg(valid_designs=1, design_attempts=12, designs_per_iteration=4)
    state = _state(tiny_policy, one)
    state.policy = invalid_first(tiny_policy, invalid=3)
    row, designs, *_ = parts(one_iteration(state, one))
    assert [d.valid for d in designs] == [False, False, False, True]  # K = 1 reached: no second batch


def test_the_update_scores_every_valid_design_and_a_fraction_of_the_invalid_ones(tiny_policy):
    torch.manual_seed(0)
    cfg = _cfg(valid_designs=2, design_attempts=10, invalid_update_fraction=0.25)
    state = _state(tiny_policy, cfg)
    state.policy = invalid_first(tiny_policy, invalid=8)
    row, designs, *_ = parts(one_iteration(state, cfg))
    assert [d.valid for d in designs] == [False] * 8 + [True] * 2
    scored, left = row["designer_samples"], row["designer_samples_left_out"]
    assert scored + left == len(designs) and 2 < scored < len(designs) and left > 0, (scored, left)
    whole = _state(tiny_policy, _cfg(valid_designs=2, design_attempts=10))
    whole.policy = invalid_first(tiny_policy, invalid=8)
    full = one_iteration(whole, _cfg(valid_designs=2, design_attempts=10)).row
    assert (full["designer_samples"], full["designer_samples_left_out"]) == (len(designs), 0)


def test_the_seeded_pool_plays_the_examples_while_the_designer_writes_nothing_valid(tiny_policy):
    """--pool-fill both: the pool starts with the tier's examples and the designer adds to them,
    so an iteration whose designs are all invalid still plays its whole no-hint budget, on the
    examples; --pool-fill designs (the paper's) plays nothing then."""
    torch.manual_seed(0)
    for fill in ("designs", "both"):
        cfg = _cfg(valid_designs=1, design_attempts=2, episodes_per_iteration=16, pool_fill=fill)
        state = _state(tiny_policy, cfg)
        state.policy = invalid_first(tiny_policy, invalid=100)
        row, designs, playables, episodes, _ = parts(one_iteration(state, cfg))
        assert row["valid_designs"] == 0 and len(designs) == 2  # the designer ran in both
        if fill == "designs":
            assert (row["no_hint_episodes"], row["pool_from_examples"], row["pool_size"]) == (0, 0, 0)
            continue
        assert row["pool_from_examples"] == len(STARTER) == row["pool_size"] == row["pool_examples"]
        assert row["no_hint_episodes"] == 16 and row["unspent_episodes"] == 0
        assert {e.job.design_id for e in episodes} <= {f"example-{e.name}" for e in STARTER}
        assert all(e.origin == "example" and e.level == 0 for e in state.pool.envs)


def test_in_both_a_design_joins_beside_the_examples_and_the_life_table_says_which_is_which(tiny_policy):
    torch.manual_seed(0)
    cfg = _cfg(pool_fill="both", episodes_per_iteration=32, pool_max=16)
    state = _state(tiny_policy, cfg)
    row = one_iteration(state, cfg).row
    # two parity games of one skill: beside 8 examples neither holds half of the pool, so both join
    assert row["pool_examples"] == len(STARTER) and row["pool_admitted"] == row["pool_designs"] == 2
    origins = {r["origin"] for r in state.pool.life_table()}
    assert origins == {"example", "design"}
    assert all(r["id"].startswith("example-") == (r["origin"] == "example") for r in state.pool.life_table())


# --- a SIGKILL between iterations, then --resume: the same pool as the uninterrupted run -------

def _scripted_command(tmp_path, name, *extra):
    return [sys.executable, str(ROOT / "tests" / "scripted_train.py"), "--model", "tiny",
            "--designs-per-iteration", "2", "--plays-per-design", "4", "--max-turns", "1",
            "--turn-max-new-tokens", "8", "--run-dir", str(tmp_path), "--name", name, "--save-every", "1",
            "--preset", "cpu-smoke", "--warm-start-steps", "0", "--design-every", "2", "--pool-min", "1",
            "--pool-max-age", "3", "--drift-probe", "2", "--lr", "1e-3", "--novelty", "false", *extra]


def _pools(run: Path) -> dict:
    """Each checkpoint's pool.json, less the seconds spent designing: a clock reading, which two runs
    never share (its attempts stay in)."""
    pools = {p.name: json.loads((p / "pool.json").read_text()) for p in sorted(run.glob("checkpoint-*"))}
    for pool in pools.values():
        assert pool["spent"].pop("seconds") > 0
    return pools


def _kill_and_resume_matches(tmp_path, *extra, iterations: int = 4, kill_after: int = 1) -> dict:
    """Run the iterations whole; run them again, SIGKILLed once checkpoint-`kill_after` is written,
    and resume; assert the same pool, memory and samples. Returns the whole run's pools."""
    its = str(iterations)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    whole = subprocess.run(_scripted_command(tmp_path, "whole", "--iterations", its, "--keep-checkpoints", "0", *extra),
                           cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert whole.returncode == 0, whole.stderr[-2000:]
    pools = _pools(tmp_path / "whole")
    assert any(p["envs"] for p in pools.values())  # the pool really held environments

    killed = subprocess.Popen(_scripted_command(tmp_path, "split", "--iterations", its, "--keep-checkpoints", "0", *extra),
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 300
    while not (tmp_path / "split" / f"checkpoint-{kill_after}").is_dir() and killed.poll() is None \
            and time.time() < deadline:
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)  # between iterations kill_after and kill_after + 1 (or early in the next)
    killed.wait()
    assert (tmp_path / "split" / f"checkpoint-{kill_after}").is_dir()
    assert not (tmp_path / "split" / f"checkpoint-{iterations - 1}").exists()
    out = subprocess.run(_scripted_command(tmp_path, "split", "--iterations", its, "--resume", *extra),
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "resumed" in out.stdout
    split = tmp_path / "split"
    assert _pools(split)[f"checkpoint-{iterations - 1}"] == pools[f"checkpoint-{iterations - 1}"]
    assert (split / "memory.jsonl").read_text() == (tmp_path / "whole" / "memory.jsonl").read_text()
    rows = lambda run, kind: [{k: v for k, v in r.items() if k not in ("transcript", "completion")}  # noqa: E731
                              for r in map(json.loads, (run / "samples.jsonl").read_text().splitlines())
                              if r["kind"] == kind]
    assert rows(split, "episode") == rows(tmp_path / "whole", "episode")
    assert rows(split, "design") == rows(tmp_path / "whole", "design")
    from safetensors.torch import load_file  # and the same weights: one seed, one run, designer and pool on
    last = f"checkpoint-{iterations - 1}/trainable.safetensors"
    wa, wb = load_file(split / last), load_file(tmp_path / "whole" / last)
    assert wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa)
    return pools


def test_resume_after_a_sigkill_restores_the_same_pool_memory_and_episodes(tmp_path):
    """Three designs a call and room for two: the designs that wait in the store (the memory)
    come back from the checkpoint as they were."""
    pools = _kill_and_resume_matches(tmp_path, "--design-batch", "3")
    designs = [json.loads(line) for line in (tmp_path / "whole" / "memory.jsonl").read_text().splitlines()]
    assert any(r["valid"] and r["iteration"] >= 0 and r["no_hint_solve_rate"] is None for r in designs)
    split = {p.name: json.loads((p / "pool.json").read_text()) for p in (tmp_path / "split").glob("checkpoint-*")}
    for pool in (*pools.values(), *split.values()):  # a design taken from the store is admitted once, resumed or not
        ids = [row["id"] for row in pool["life"] + pool["envs"]]
        assert len(ids) == len(set(ids)), ids


def test_resume_after_a_sigkill_restores_the_pools_levels_and_moves(tmp_path):
    """Games with 4 levels and a window of 2 plays: the pool raises and lowers levels every few
    plays, so the kill falls among moves, and the resumed run must move them the same way."""
    pools = _kill_and_resume_matches(tmp_path, "--scripted-levels", "--pool-window", "2", iterations=5, kill_after=2)
    restored = pools["checkpoint-2"]["envs"]  # what the resumed run starts from
    assert any(e["level"] > 0 and e["moves"] for e in restored), restored  # a level had really moved
    assert any(e["moves"][-1][0] > 2 for e in pools["checkpoint-4"]["envs"] if e["moves"])  # and moves after
    assert all(e["levels"] == 4 for p in pools.values() for e in p["envs"])  # from the memory too
    designs = [json.loads(line) for line in (tmp_path / "whole" / "memory.jsonl").read_text().splitlines()]
    assert [r["levels"] for r in designs if r["valid"] and r["iteration"] >= 0] == \
        [4] * sum(r["valid"] and r["iteration"] >= 0 for r in designs)  # a record knows its levels before the pool


# --- the contract told is the contract played ---------------------------------------------------

def test_validation_refuses_a_solution_longer_than_the_runs_turn_cap_or_its_turn_budget(tiny_policy):
    from spade_mini.designer.prompts import GAME_EXAMPLE, designer_prompt
    from spade_mini.gate import turn_budget
    from spade_mini.sandbox import validate_env
    # the prompt's example needs up to 4 moves of at most 9 to reach 20-40 (and ends at 6 turns)
    assert validate_env(GAME_EXAMPLE, play_turns=6).ok
    short = validate_env(GAME_EXAMPLE, play_turns=2)
    assert not short.ok and short.stage == "solution"
    assert any("at most 2 actions, the run's turn cap" in r for r in short.reasons), short.reasons
    fits = turn_budget(tiny_policy.count_tokens, 6)  # "\boxed{9}" is 6 tokens, with EOS 7: one too many
    tight = validate_env(GAME_EXAMPLE, play_turns=6, action_fits=fits)
    assert not tight.ok and tight.stage == "solution" and any("one turn of this run" in r for r in tight.reasons)
    assert validate_env(GAME_EXAMPLE, play_turns=6, action_fits=turn_budget(tiny_policy.count_tokens, 7)).ok
    assert fits("7") and fits("7").split(" takes ")[1] == fits("\\boxed{7}").split(" takes ")[1]  # counted boxed
    text = designer_prompt(skills_for("games")[0], None, "", turns=6, turn_tokens=24)[1]["content"]
    assert "End within 6 turns." in text and "at most 24 tokens a turn" in text


# ---- golden: the pool's rules as sequences of returns ------------------------------------------
# By hand (band (0.25, 0.75), window 4, max_age 3; a rate is judged on the last 4 plays at the
# level once 4 have come in; at or above 0.75 raise, at or below 0.25 lower; unjudged for
# max_age iterations after the last move: age):
#   raised_then_learned: it1 [1,1,1,1] rate 1 -> raised to 1 (plays cleared); it2 [1,1,1,0] rate
#     0.75 -> no level 2 of 2 -> learned.  raise_refused_by_validation: rate 1, level 1 does not
#     validate -> learned.  lowered_then_too_hard: from level 1, it1 rate 0 -> lowered to 0; it2
#     two plays, unjudged, 2 - 1 + 1 = 2 < 3 iterations -> stays; it3 [1,0,0,0] rate 0.25 at
#     level 0 -> too hard.  judged_in_band_stays: rate 0.5 every time, judged, never ages.
#   not_judged_ages_out: 3 plays < 4 by it2, 2 - 0 + 1 = 3 iterations -> age.  Admission needs a
#     rate strictly inside the band: [1,1,1,1] (1.0) and [1,0,0,0] (0.25, the edge) are refused.
GOLDEN = json.loads((Path(__file__).parent / "golden" / "reinforce_cases.json").read_text())


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["pool"], ids=lambda c: c["name"])
def test_pool_rules_match_golden(case):
    pool = Pool(tuple(case["band"]), case["max_age"], case["window"], 1, 8)
    admitted = pool.admit("e", "skill", "games", "", case["admit"], 0, level=case["level"], levels=case["levels"])
    assert admitted == case["admitted"]
    for i, it in enumerate(case["iterations"], start=1):
        if it["returns"] is not None:
            pool.record("e", it["returns"])
        events = pool.review(i, validates=lambda env, level, ok=it["validates"]: ok)
        assert [what for _, what in events] == ([it["event"]] if it["event"] else []), (case["name"], i)
        assert (pool.get("e").level if pool.get("e") else None) == it["level"], (case["name"], i)
    assert pool.retired.get("e") == (tuple(case["left"]) if case["left"] else None)
