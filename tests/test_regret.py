"""Tests for spade_mini/regret.py: the reward arithmetic, against hand-computed golden cases.

Golden file tests/golden/reinforce_cases.json (schema in its "_doc" key): top-level keys
episode_return, solve_rate, regret, plateau, designer_reward, invalid_policy, learning_potential,
advantages, loss; each a list of named cases holding inputs and the expected output. Two checks
per section: (1) the file's expected values equal the arithmetic written out below by hand, so
the file cannot drift; (2) the functions reproduce the file.
"""

import json
import math
import pathlib
import sys

import pytest

from spade_mini import regret as R

GOLDEN = json.loads((pathlib.Path(__file__).parent / "golden" / "reinforce_cases.json").read_text())
TOL = 1e-9


def by_name(section):
    return {case["name"]: case for case in GOLDEN[section]}


# --- hand arithmetic, one line per golden case --------------------------------------------------

HAND_RETURN = {
    "win_last_step": 1.0,            # terminated, last reward 1
    "truncated_earns_nothing": 0.0,  # not terminated -> 0 whatever the last reward
    "crash_penalty": -1.0,           # the caller ends a crashed episode with -1, terminated
    "clipped_high": 1.0,             # clip(2.5, -1, 1)
    "no_steps": 0.0,                 # nothing happened
    "sum_clipped": 1.0,              # clip(0.25 + 0.25 + 0.75 = 1.25) = 1
    "sum_negative": -0.25,           # 0.25 - 0.5
}
HAND_SOLVE = {
    "half": 2 / 4,                   # two returns > 0 out of four
    "partial_and_crash": 1 / 3,      # 0.5 counts, -1 and 0 do not
    "empty": 0.0,
}
HAND_REGRET = {
    "hint_helps": (1 + 1 + 0 + 1) / 4 - (0 + 1 + 0 + 0) / 4,  # 0.75 - 0.25 = 0.5
    "hint_hurts": (0 + 1) / 2 - (1 + 1) / 2,                  # 0.5 - 1 = -0.5
    "crash_in_no_hint": (1 + 1 + 1) / 3 - (-1 + 0 + 1) / 3,    # 1 - 0 = 1
}
HAND_PLATEAU = {
    0.0: 0.0, 0.15: 0.0,
    0.275: (0.275 - 0.15) / (0.4 - 0.15),  # halfway up the left ramp = 0.5
    0.4: 1.0, 0.5: 1.0, 0.6: 1.0,
    0.7: (0.85 - 0.7) / (0.85 - 0.6),      # 0.15 / 0.25 = 0.6 on the right ramp
    0.85: 0.0, 1.0: 0.0,
}
HAND_DESIGNER = {
    "regret_positive": max(0, 0.5),
    "regret_floored": max(0, -0.25),                               # 0
    "blend_half_half": 0.6 * 0.5 + 0.4 * (0.075 / 0.15),            # plateau(0.275)=0.5 -> 0.5
    "blend_saturated": 0.6 * 1.0 + 0.4 * min(1, 0.3 / 0.15),        # 1.0
    "blend_negative_regret": 0.6 * 0.6 + 0.4 * max(0, -0.2 / 0.15),  # 0.36
    "solve_rate_only": 0.6,                                         # plateau(0.7)
    "learning_potential": 0.12,                                     # passed through
}
HAND_INVALID = {
    "penalty": [0.5, -1.0, 0.0],   # the invalid one gets invalid_reward, its 0.9 is ignored
    "drop": [0.5, None, 0.0],      # the invalid one yields no sample
}
# Learning potential, g_fast = 0.98, g_slow = 0.85, mu <- (1 - g) mu + g r, r = mean of the batch:
#   update 1, r = 0:   fast = slow = 0 (first sight)                          -> |0 - 0| = 0
#   update 2, r = 1:   fast = 0.02*0 + 0.98*1 = 0.98; slow = 0.15*0 + 0.85 = 0.85   -> 0.13
#   update 3, r = 0.5: fast = 0.02*0.98 + 0.98*0.5 = 0.5096;
#                      slow = 0.15*0.85 + 0.85*0.5 = 0.5525                   -> 0.0429
HAND_LP = {"rise_then_fall": [0.0, 0.98 - 0.85, 0.5525 - 0.5096]}
# Advantages: group means a = (1+0+0+1)/4 = 0.5, b = 0.5, c = 0.2 (a group of one -> 0).
# Population std: a = 0.5 -> 0.5 / (0.5 + 1e-6); b = 0 -> 0 / eps = 0.
# one_winner: mean 0.25, centred (0.75, -0.25 x3), var = (0.5625 + 3*0.0625) / 4 = 0.1875.
_S_A = 0.5 + 1e-6
_S_X = math.sqrt(0.1875) + 1e-6
HAND_ADV = {
    "three_groups": [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0],
    "three_groups_std": [0.5 / _S_A, -0.5 / _S_A, -0.5 / _S_A, 0.5 / _S_A, 0.0, 0.0, 0.0],
    "one_winner_std": [0.75 / _S_X, -0.25 / _S_X, -0.25 / _S_X, -0.25 / _S_X],
}


def test_golden_file_matches_hand_arithmetic():
    for name, case in by_name("episode_return").items():
        assert case["return"] == pytest.approx(HAND_RETURN[name], abs=TOL), name
    for name, case in by_name("solve_rate").items():
        assert case["rate"] == pytest.approx(HAND_SOLVE[name], abs=TOL), name
    for name, case in by_name("regret").items():
        assert case["regret"] == pytest.approx(HAND_REGRET[name], abs=TOL), name
    assert {c["rate"]: c["value"] for c in GOLDEN["plateau"]} == pytest.approx(HAND_PLATEAU)
    for name, case in by_name("designer_reward").items():
        assert case["reward"] == pytest.approx(HAND_DESIGNER[name], abs=TOL), name
    for name, case in by_name("invalid_policy").items():
        assert case["rewards"] == HAND_INVALID[name], name
    for name, case in by_name("learning_potential").items():
        assert case["values"] == pytest.approx(HAND_LP[name], abs=TOL), name
    for name, case in by_name("advantages").items():
        assert case["advantages"] == pytest.approx(HAND_ADV[name], abs=TOL), name


# --- the functions reproduce the golden file -----------------------------------------------------

@pytest.mark.parametrize("case", GOLDEN["episode_return"], ids=lambda c: c["name"])
def test_episode_return(case):
    got = R.episode_return(case["rewards"], case["terminated"], mode=case["mode"])
    assert got == pytest.approx(case["return"], abs=TOL)


@pytest.mark.parametrize("case", GOLDEN["solve_rate"], ids=lambda c: c["name"])
def test_solve_rate(case):
    assert R.solve_rate(case["returns"]) == pytest.approx(case["rate"], abs=TOL)


@pytest.mark.parametrize("case", GOLDEN["regret"], ids=lambda c: c["name"])
def test_hint_regret(case):
    assert R.hint_regret(case["no_hint"], case["hint"]) == pytest.approx(case["regret"], abs=TOL)


def test_plateau():
    for case in GOLDEN["plateau"]:
        assert R.plateau(case["rate"]) == pytest.approx(case["value"], abs=TOL), case


@pytest.mark.parametrize("case", GOLDEN["designer_reward"], ids=lambda c: c["name"])
def test_designer_reward(case):
    got = R.designer_reward(case["kind"], regret=case["regret"],
                            no_hint_solve_rate=case["no_hint_solve_rate"], lp=case["lp"])
    assert got == pytest.approx(case["reward"], abs=TOL)


@pytest.mark.parametrize("case", GOLDEN["invalid_policy"], ids=lambda c: c["name"])
def test_invalid_policy(case):
    designs = [tuple(d) for d in case["designs"]]
    got = R.apply_invalid_policy(designs, case["policy"], invalid_reward=case["invalid_reward"])
    assert got == case["rewards"]


@pytest.mark.parametrize("case", GOLDEN["learning_potential"], ids=lambda c: c["name"])
def test_learning_potential(case):
    lp = R.LearningPotential(gamma_fast=case["gamma_fast"], gamma_slow=case["gamma_slow"])
    values = [lp.update(case["skill"], returns) for returns in case["updates"]]
    assert values == pytest.approx(case["values"], abs=TOL)
    assert lp.value("never_seen") == 0.0
    # Skills are tracked separately: a new skill starts from its own first batch.
    assert lp.update("other", [1.0]) == 0.0


@pytest.mark.parametrize("case", GOLDEN["advantages"], ids=lambda c: c["name"])
def test_group_advantages(case):
    got = R.group_advantages(case["values"], case["groups"], normalize_std=case["normalize_std"],
                             eps=case["eps"])
    assert got == pytest.approx(case["advantages"], abs=TOL)


# --- properties and errors -----------------------------------------------------------------------

def test_advantages_sum_to_zero_per_group():
    values = [0.3, 0.9, 0.1, 1.0, 0.0, 0.7]
    groups = ["s1", "s2", "s1", "s2", "s1", "s3"]
    adv = R.group_advantages(values, groups)
    for g in set(groups):
        assert sum(a for a, gg in zip(adv, groups) if gg == g) == pytest.approx(0.0, abs=TOL)
    assert adv[5] == 0.0  # s3 has one member


def test_score_design_bundles_both_arms():
    score = R.score_design("blend", no_hint=[0, 1, 0, 0], hint=[1, 1, 0, 1])
    # solve rates 1/4 and 3/4; regret 0.5; blend = 0.6 * plateau(0.25) + 0.4 * clip(0.5/0.15)
    assert score.no_hint_solve_rate == 0.25 and score.hint_solve_rate == 0.75
    assert score.regret == pytest.approx(0.5)
    assert score.reward == pytest.approx(0.6 * (0.25 - 0.15) / 0.25 + 0.4 * 1.0)


def test_errors_are_narrow():
    with pytest.raises(ValueError, match="paired"):
        R.hint_regret([0, 1], [1])
    with pytest.raises(ValueError):
        R.hint_regret([], [])
    with pytest.raises(ValueError, match="unknown designer reward"):
        R.designer_reward("minimise_regret", regret=0.1, no_hint_solve_rate=0.5)
    with pytest.raises(ValueError, match="lp"):
        R.designer_reward("learning_potential", regret=0.1, no_hint_solve_rate=0.5)
    with pytest.raises(ValueError, match="mode"):
        R.episode_return([1.0], True, mode="mean")
    with pytest.raises(ValueError):
        R.apply_invalid_policy([(False, 0.0)], policy="ignore")
    with pytest.raises(ValueError):
        R.group_advantages([1.0, 2.0], ["a"])
    with pytest.raises(ValueError):
        R.LearningPotential(gamma_fast=0.5, gamma_slow=0.9)


def test_regret_module_does_not_import_torch():
    # regret.py is pure arithmetic; importing torch there would slow every sandbox-side import.
    import subprocess
    code = "import sys, spade_mini.regret; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=pathlib.Path(__file__).parent.parent)
    assert out.stdout.strip() == "False"


def test_learning_potential_preview_changes_nothing():
    from spade_mini.regret import LearningPotential
    lp = LearningPotential()
    lp.update("s", [0.0, 0.0])
    before = (dict(lp.fast), dict(lp.slow))
    peek = lp.preview("s", [1.0])
    assert (lp.fast, lp.slow) == before  # nothing moved
    assert peek == lp.update("s", [1.0]) and peek > 0  # and it is what update() then returns
