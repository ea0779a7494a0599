"""Tests for spade_mini/reward/regret.py: the reward arithmetic, against hand-computed golden cases.

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

from spade_mini.reward import LearningPotential, invalidity as I, regret as R

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
    # gated: regret is paid only strictly inside (0, 1); the plateau term as in the blend
    "gated_in_band": 0.6 * 1.0 + 0.4 * (0.075 / 0.15),              # plateau(0.5)=1 -> 0.8
    "gated_never_solved": 0.6 * 0.0 + 0.0,                          # rate 0: no regret paid
    "blend_never_solved": 0.6 * 0.0 + 0.4 * min(1, 0.3 / 0.15),      # ungated: 0.4 for leaving the band
    "gated_always_solved": 0.6 * 0.0 + 0.0,                         # rate 1: plateau(1)=0, no regret
}
# Graded: 15 levels (no_code, syntax, structure, load, reset, step, episode, solution, decided,
# instances, given_away, hint, question, play, duplicate) evenly spaced strictly inside
# (invalid_reward, valid_floor): level l earns low + (l + 1) * step, step = (floor - low) / 16.
# With (-1, 0): -15/16, ..., -1/16. A reply cut off at its budget (finished false) earns half a
# step less: syntax 2 -> 1.5 steps.
HAND_INVALID = {
    "constant": [0.5, -1.0, 0.0],  # the invalid one gets invalid_reward, its 0.9 is ignored
    "drop": [0.5, None, 0.0],      # the invalid one yields no sample
    # fifteen stages, no_code .. duplicate (a valid copy tops them), in 16 even steps below the floor
    "graded": [0.5] + [-1 + (level + 1) / 16 for level in range(15)],
    "graded_below_debiased_floor": [-1 + 0.5 / 16, -1 + 14 * 0.5 / 16, -1 + (2 - 0.5) * 0.5 / 16],
}
# Learning potential (the reference's), g_fast = 0.98, g_slow = 0.85, mu <- (1 - g) mu + g r:
#   iteration 1: mu_slow unseen = 0. Designs [1, 1] -> |1 - 0| = 1; [0, 0] -> |0 - 0| = 0.
#                update with r = mean(1, 1, 0, 0) = 0.5: first sight, fast = slow = 0.5, gap 0.
#   iteration 2: designs [1, 0] -> |0.5 - 0.5| = 0; [0, 0] -> |0 - 0.5| = 0.5.
#                r = 0.25: fast = 0.02*0.5 + 0.98*0.25 = 0.255; slow = 0.15*0.5 + 0.85*0.25 = 0.2875
#                gap = |0.255 - 0.2875| / (2 * (0.98 - 0.85)) = 0.0325 / 0.26 = 0.125
HAND_LP = {"reference_two_iterations": [
    ([1.0, 0.0], 0.5, 0.5, 0.0),
    ([0.0, 0.5], 0.02 * 0.5 + 0.98 * 0.25, 0.15 * 0.5 + 0.85 * 0.25, 0.0325 / 0.26)]}
# Noise floor of a useless hint, q = p(1-p) = 0.25 for p = 0.5, terms comb(k,a)comb(k-a,b) q^(a+b)
# (1-2q)^(k-a-b) (a-b)/k over a > b:
#   k = 2: (1,0) 2*.25*.5*.5 = .125, (2,0) .0625*1 = .0625                       -> 0.1875
#   k = 4: (1,0) .03125 + (2,0) .046875 + (2,1) .0234375 + (3,0) .0234375
#          + (3,1) .0078125 + (4,0) .00390625                                      -> 0.13671875
HAND_FLOOR = {2: 0.125 + 0.0625,
              4: 0.03125 + 0.046875 + 0.0234375 + 0.0234375 + 0.0078125 + 0.00390625}
# Sign flips of the differences: mean(s_i d_i) over 2^k equally likely sign patterns.
#   [1, 0]: +-0.5 -> E max(0, .) = 0.5 / 2 = 0.25
#   [1, -1, 0, 1]: sums 3 (1/8), 1 (3/8), -1, -3 over k = 4 -> 3/4 * 1/8 + 1/4 * 3/8 = 0.1875
#   [0.5, 1]: sums +-1.5, +-0.5 (1/4 each) over k = 2 -> (0.75 + 0.25) / 4 = 0.25
HAND_FLIP = {"one_discordant_of_two": 0.25, "three_discordant_of_four": 3 / 32 + 3 / 32,
             "partial_credit": (0.75 + 0.25) / 4, "all_equal": 0.0}
# score_design: frontier diffs [1, 0, 1, 0], regret 0.5; flip floor: sums 2, 0, 0, -2 -> 0.5/4
#   = 0.125, so debiased = 0.5 - 0.125 = 0.375; clipped = 0.5. Coin flip, diffs [-1, 1, -1, 1]:
#   regret 0, floor = (1 * 1/16 + 0.5 * 4/16) = 0.1875 -> -0.1875. No hint: regret 0; blend of
#   solve rate 0.25 = 0.6 * plateau(0.25) = 0.6 * 0.4 = 0.24.
HAND_SCORE = {"frontier_debiased": 0.5 - 0.125, "frontier_clipped": 0.5,
              "coin_flip_useless_hint": 0.0 - (1 / 16 + 0.5 * 4 / 16), "hintless_regret": 0.0,
              "hintless_blend": 0.6 * (0.25 - 0.15) / 0.25}
# Advantages: group means a = (1+0+0+1)/4 = 0.5, b = 0.5, c = 0.2 (a group of one -> 0).
# Population std: a = 0.5 -> 0.5 / (0.5 + 1e-6); b = 0 -> 0 / eps = 0.
# one_winner: mean 0.25, centred (0.75, -0.25 x3), var = (0.5625 + 3*0.0625) / 4 = 0.1875.
_S_A = 0.5 + 1e-6
_S_X = math.sqrt(0.1875) + 1e-6
HAND_ADV = {
    "three_groups": [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0],
    "three_groups_std": [0.5 / _S_A, -0.5 / _S_A, -0.5 / _S_A, 0.5 / _S_A, 0.0, 0.0, 0.0],
    "one_winner_std": [0.75 / _S_X, -0.25 / _S_X, -0.25 / _S_X, -0.25 / _S_X],
    # the designer's cohort baseline: one group of all the designs, mean (0.8+0.2+0.5+0.1)/4 = 0.4
    "cohort_baseline": [0.8 - 0.4, 0.2 - 0.4, 0.5 - 0.4, 0.1 - 0.4],
    # per skill: logic mean 0.5, maps mean 0.3
    "skill_baseline": [0.8 - 0.5, 0.2 - 0.5, 0.5 - 0.3, 0.1 - 0.3],
    "all_equal_is_exactly_zero": [0.0] * 8,  # equal values: 0 exactly, not 1e-17 / (0 + eps)
}


@pytest.mark.golden
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
        assert case["rewards"] == pytest.approx(HAND_INVALID[name], abs=TOL), name
    for name, case in by_name("learning_potential").items():
        for it, (scores, fast, slow, gap) in zip(case["iterations"], HAND_LP[name]):
            assert it["scores"] == pytest.approx(scores, abs=TOL), name
            assert (it["fast"], it["slow"], it["gap"]) == pytest.approx((fast, slow, gap), abs=TOL), name
    for case in GOLDEN["noise_floor"]:
        if case["k"] in HAND_FLOOR:
            assert case["floor"] == pytest.approx(HAND_FLOOR[case["k"]], abs=TOL)
    for name, case in by_name("sign_flip_floor").items():
        assert case["floor"] == pytest.approx(HAND_FLIP[name], abs=TOL), name
    for name, case in by_name("score_design").items():
        assert case["reward"] == pytest.approx(HAND_SCORE[name], abs=TOL), name
    for name, case in by_name("advantages").items():
        assert case["advantages"] == pytest.approx(HAND_ADV[name], abs=TOL), name


# --- the functions reproduce the golden file -----------------------------------------------------

@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["episode_return"], ids=lambda c: c["name"])
def test_episode_return(case):
    got = R.episode_return(case["rewards"], case["terminated"], mode=case["mode"])
    assert got == pytest.approx(case["return"], abs=TOL)


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["solve_rate"], ids=lambda c: c["name"])
def test_solve_rate(case):
    assert R.solve_rate(case["returns"]) == pytest.approx(case["rate"], abs=TOL)


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["regret"], ids=lambda c: c["name"])
def test_hint_regret(case):
    assert R.hint_regret(case["no_hint"], case["hint"]) == pytest.approx(case["regret"], abs=TOL)


@pytest.mark.golden
def test_plateau():
    for case in GOLDEN["plateau"]:
        assert R.plateau(case["rate"]) == pytest.approx(case["value"], abs=TOL), case


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["designer_reward"], ids=lambda c: c["name"])
def test_designer_reward(case):
    got = R.designer_reward(case["kind"], regret=case["regret"],
                            no_hint_solve_rate=case["no_hint_solve_rate"], potential=case["lp"])
    assert got == pytest.approx(case["reward"], abs=TOL)


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["invalid_policy"], ids=lambda c: c["name"])
def test_invalid_policy(case):
    designs = [tuple(d) for d in case["designs"]]
    got = I.apply_invalid_policy(designs, case["policy"], invalid_reward=case["invalid_reward"],
                                 valid_floor=case["valid_floor"])
    assert got == pytest.approx(case["rewards"], abs=TOL)


def test_graded_rewards_rank_stages_and_stay_below_valid():
    for kind in R.DESIGNER_REWARD_KINDS:
        for estimator in R.REGRET_ESTIMATORS:
            floor = R.lowest_valid_reward(kind, estimator)
            rewards = [I.graded_invalid_reward(s, -1.0, floor) for s in I.INVALID_STAGES]
            assert rewards == sorted(rewards) and len(set(rewards)) == len(rewards)
            assert -1.0 < rewards[0] and rewards[-1] < floor
    # the debiased regret never goes below its floor, whatever the differences
    assert R.regret_reward([(1.0, 0.0)], "debiased") == R.DEBIASED_FLOOR
    assert R.regret_reward([(1.0, -1.0)], "debiased") == R.DEBIASED_FLOOR
    with pytest.raises(ValueError, match="invalid_reward"):
        I.graded_invalid_reward("syntax", 0.0, 0.0)


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["learning_potential"], ids=lambda c: c["name"])
def test_learning_potential(case):
    lp = LearningPotential(gamma_fast=case["gamma_fast"], gamma_slow=case["gamma_slow"])
    skill = case["skill"]
    for it in case["iterations"]:
        # every design is scored against the averages from before the iteration ...
        assert [lp.score(skill, d) for d in it["designs"]] == pytest.approx(it["scores"], abs=TOL)
        lp.update(skill, [r for d in it["designs"] for r in d])  # ... then the skill moves once
        assert (lp.fast[skill], lp.slow[skill], lp.gap(skill)) == pytest.approx(
            (it["fast"], it["slow"], it["gap"]), abs=TOL)
    assert lp.gap("never_seen") == 0.0
    assert lp.score("never_seen", [0.25]) == 0.25  # a new skill is measured from 0, not skipped


def test_learning_potential_gives_signal_on_a_skills_first_iteration():
    # The former |fast - slow| after a trial update was 0 for every design of a new skill.
    lp = LearningPotential()
    first = [lp.score("new", returns) for returns in ([1.0, 1.0], [0.0, 1.0], [0.0, 0.0])]
    assert len(set(first)) == 3


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["noise_floor"], ids=lambda c: f"k{c['k']}")
def test_regret_noise_floor(case):
    assert R.regret_noise_floor(case["k"], case["p"]) == pytest.approx(case["floor"], abs=TOL)


def test_noise_floor_matches_simulation():
    """The documented floor (0.19, 0.14, 0.10 at K = 2, 4, 8) is what a useless hint earns."""
    import random
    rng = random.Random(0)
    for k in (2, 4, 8):
        draws = []
        for _ in range(20000):
            alone = [float(rng.random() < 0.5) for _ in range(k)]
            helped = [float(rng.random() < 0.5) for _ in range(k)]
            draws.append(R.regret_reward(list(zip(alone, helped)), "clipped"))
        assert sum(draws) / len(draws) == pytest.approx(R.regret_noise_floor(k, 0.5), abs=0.01)


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["sign_flip_floor"], ids=lambda c: c["name"])
def test_sign_flip_floor(case):
    assert R.sign_flip_floor(case["diffs"]) == pytest.approx(case["floor"], abs=TOL)


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["score_design"], ids=lambda c: c["name"])
def test_score_design_golden(case):
    got = R.score_design(case["kind"], case["no_hint"], [tuple(p) for p in case["pairs"]],
                         estimator=case["estimator"])
    assert got.reward == pytest.approx(case["reward"], abs=TOL)
    assert got.note == case["note"]
    for key in ("regret", "hint_solve_rate"):
        want = case[key]
        assert (getattr(got, key) is None) if want is None else getattr(got, key) == pytest.approx(want)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_debiased_regret_pays_a_useless_hint_nothing(p):
    """Simulated: a hint that changes nothing, per-seed difficulty varying around p. The paper's
    max(0, regret) pays it about as much as a real hint's regret; the debiased estimator ~0."""
    import random
    rng = random.Random(1)
    k, n = 4, 8000
    clipped = debiased = 0.0
    for _ in range(n):
        seeds = [min(1.0, max(0.0, p + rng.uniform(-0.3, 0.3))) for _ in range(k)]
        pairs = [(float(rng.random() < q), float(rng.random() < q)) for q in seeds]
        clipped += R.regret_reward(pairs, "clipped") / n
        debiased += R.regret_reward(pairs, "debiased") / n
    assert clipped > 0.05
    assert abs(debiased) < 0.01


def test_debiased_regret_still_pays_a_useful_hint():
    import random
    rng = random.Random(2)
    n = 4000
    total = sum(R.regret_reward([(float(rng.random() < 0.3), float(rng.random() < 0.6))
                                 for _ in range(4)], "debiased") for _ in range(n)) / n
    assert total > 0.15  # true regret 0.3


@pytest.mark.golden
@pytest.mark.parametrize("case", GOLDEN["advantages"], ids=lambda c: c["name"])
def test_group_advantages(case):
    got = R.group_advantages(case["values"], case["groups"], normalize_std=case["normalize_std"],
                             eps=case["eps"])
    assert got == pytest.approx(case["advantages"], abs=TOL)
    zeros = [i for i, a in enumerate(case["advantages"]) if a == 0.0]
    assert [got[i] for i in zeros] == [0.0] * len(zeros)  # exactly: a 0 leaves the token count


# --- properties and errors -----------------------------------------------------------------------

def test_advantages_sum_to_zero_per_group():
    values = [0.3, 0.9, 0.1, 1.0, 0.0, 0.7]
    groups = ["s1", "s2", "s1", "s2", "s1", "s3"]
    adv = R.group_advantages(values, groups)
    for g in set(groups):
        assert sum(a for a, gg in zip(adv, groups) if gg == g) == pytest.approx(0.0, abs=TOL)
    assert adv[5] == 0.0  # s3 has one member


def test_score_design_bundles_both_arms():
    score = R.score_design("blend", [0, 1, 0, 0], list(zip([0, 1, 0, 0], [1, 1, 0, 1])))
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
    with pytest.raises(ValueError, match="potential"):
        R.designer_reward("learning_potential", regret=0.1, no_hint_solve_rate=0.5)
    with pytest.raises(ValueError, match="mode"):
        R.episode_return([1.0], True, mode="mean")
    with pytest.raises(ValueError):
        I.apply_invalid_policy([("syntax", 0.0, True)], policy="ignore")
    with pytest.raises(ValueError, match="stage"):
        I.apply_invalid_policy([("nonsense", 0.0, True)])
    with pytest.raises(ValueError):
        R.group_advantages([1.0, 2.0], ["a"])
    with pytest.raises(ValueError):
        LearningPotential(gamma_fast=0.5, gamma_slow=0.9)


def test_regret_module_does_not_import_torch():
    # regret.py is pure arithmetic; importing torch there would slow every sandbox-side import.
    import subprocess
    code = "import sys, spade_mini.reward.regret; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=pathlib.Path(__file__).parent.parent)
    assert out.stdout.strip() == "False"


def test_a_group_of_equal_returns_has_advantages_exactly_zero():
    assert sum([0.1] * 8) / 8 != 0.1  # the float mean is off by 1e-17
    assert R.group_advantages([0.1] * 8 + [0.0, 1.0], ["a"] * 8 + ["b"] * 2) == [0.0] * 8 + [-0.5, 0.5]
    assert R.group_advantages([0.1] * 8, ["a"] * 8, normalize_std=True) == [0.0] * 8


def test_each_solve_rate_band_has_one_home_and_one_name():
    """Four rules read a solve rate against a band (the pool, the memory's references, the blend's
    plateau, the gated blend's gate): each reads its own name in reward/bands.py, and no other
    module spells a band's numbers."""
    from spade_mini import pool
    from spade_mini.config import Config
    from spade_mini.designer.memory import Memory
    from spade_mini.reward import bands
    assert (Config().pool_low, Config().pool_high) == bands.POOL_BAND == pool.Pool().band
    assert Memory().band == bands.REFERENCE_BAND
    low, inner_low, inner_high, high = bands.PLATEAU
    assert R.plateau(low) == 0.0 == R.plateau(high) and R.plateau(inner_low) == 1.0 == R.plateau(inner_high)
    assert 0.0 < R.plateau((low + inner_low) / 2) < 1.0 and 0.0 < R.plateau((inner_high + high) / 2) < 1.0
    gated = [R.designer_reward("gated_blend", regret=0.15, no_hint_solve_rate=r) for r in bands.GATE]
    assert gated == [R.designer_reward("gated_blend", regret=0.0, no_hint_solve_rate=r) for r in bands.GATE]
    assert R.designer_reward("gated_blend", regret=0.15, no_hint_solve_rate=0.05) > \
        R.designer_reward("gated_blend", regret=0.0, no_hint_solve_rate=0.05)  # paid strictly inside
    root = pathlib.Path(R.__file__).resolve().parents[1]
    spelled = [str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "bands.py"
               and any(t in p.read_text() for t in ("(0.1, 0.9)", "(0.15, 0.85)", "0.15, inner_low"))]
    assert spelled == [], spelled
