"""Intervals, paired deltas and detectable effects against arithmetic written out by hand."""
import math

import pytest

from spade_mini.evaluation import intervals as iv


def test_interval_wilson_and_normal():
    mean, low, high, how = iv.interval([1.0, 0.0, 1.0, 1.0])
    # Wilson, n=4, p=0.75, z=1.96: centre (0.75 + 0.9604/2)/(1 + 0.9604), half 1.96*sqrt(.046875 + .015006)/1.9604
    centre, half = (0.75 + 0.4802) / 1.9604, 1.96 * math.sqrt(0.75 * 0.25 / 4 + 3.8416 / 64) / 1.9604
    assert how == "wilson" and mean == 0.75
    assert low == pytest.approx(centre - half) and high == pytest.approx(centre + half)
    assert iv.interval([1.0] * 5)[2] == 1.0 and iv.interval([1.0] * 5)[1] < 1.0  # never collapses
    mean, low, high, how = iv.interval([0.5, -1.0, 1.0])
    assert how == "normal" and low < mean < high


def test_paired_delta_binary_is_agresti_min_with_exact_mcnemar():
    base = [1, 1, 0, 0, 0, 1, 0, 1, 0, 0]
    other = [1, 0, 1, 1, 0, 1, 1, 1, 0, 1]
    # n = 10; base right & other wrong: item 1 (n12 = 1); the reverse: items 2, 3, 6, 9 (n21 = 4).
    # delta = (4 - 1) / 10 = 0.3.  Adjusted: p12 = 1.5/12 = 0.125, p21 = 4.5/12 = 0.375,
    # d~ = 0.25, var = (0.125 + 0.375 - 0.0625) / 12 = 0.0364583, se = 0.1909407,
    # half = 1.96 * se = 0.3742438 -> [-0.1242438, 0.6242438].
    # McNemar: 5 discordant, the rarer side 1: 2 * (C(5,0) + C(5,1)) / 2^5 = 2 * 6/32 = 0.375.
    d = iv.paired_delta([float(x) for x in base], [float(x) for x in other])
    assert d.method == "agresti-min" and d.n == 10
    assert d.delta == pytest.approx(0.3)
    assert d.low == pytest.approx(-0.1242438, abs=1e-6) and d.high == pytest.approx(0.6242438, abs=1e-6)
    assert d.p == pytest.approx(0.375)


def test_paired_delta_no_change_keeps_a_width_and_p_one():
    d = iv.paired_delta([1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0])
    # n12 = n21 = 0: p12 = p21 = 0.5/6, d~ = 0, half = 1.96 * sqrt((1/6) / 6) = 0.3266667
    assert d.delta == 0.0 and d.p == 1.0
    assert d.high == pytest.approx(1.96 * math.sqrt(1 / 36)) and d.low == pytest.approx(-d.high)


def test_paired_delta_continuous_is_normal_on_differences():
    base = [0.0, 0.5, -1.0, 0.25]
    other = [0.5, 0.0, 0.0, 0.25]
    # differences 0.5, -0.5, 1.0, 0.0: mean 0.25; squared deviations .0625 .5625 .5625 .0625 -> 1.25,
    # sample variance 1.25 / 3, se = sqrt(1.25 / 3 / 4) = 0.3227486, half = 1.96 se = 0.6325873
    d = iv.paired_delta(base, other)
    assert d.method == "paired-normal" and d.delta == pytest.approx(0.25)
    assert d.low == pytest.approx(0.25 - 0.6325873, abs=1e-6) and d.high == pytest.approx(0.25 + 0.6325873, abs=1e-6)
    # p = 2 * (1 - Phi(0.25 / 0.3227486)) = 2 * (1 - Phi(0.7745967)) = 0.4385780
    assert d.p == pytest.approx(0.438578, abs=1e-5)


def test_paired_delta_needs_equal_lengths():
    with pytest.raises(ValueError, match="same items"):
        iv.paired_delta([1.0, 0.0], [1.0])


def test_mcnemar_exact_small_tables():
    assert iv.mcnemar_p(0, 6) == pytest.approx(2 / 64)  # six one-way changes: significant at 5%
    assert iv.mcnemar_p(0, 5) == pytest.approx(2 / 32)  # five: not
    assert iv.mcnemar_p(3, 3) == 1.0 and iv.mcnemar_p(0, 0) == 1.0
    assert iv.mcnemar_p(2, 8) == pytest.approx(2 * (1 + 10 + 45) / 1024)


def test_detectable_effect_solves_the_sample_size_formula():
    # p = 0.5: psi = 0.5 (0.5 - d) + (0.5 + d) 0.5 = 0.5 for every d, so
    # n(d) = (1.96 sqrt(0.5) + 0.8416212 sqrt(0.5 - d^2))^2 / d^2; n(0.196) = 99.7 <= 100 < n(0.195) = 100.8.
    def n_needed(d):
        return (1.96 * math.sqrt(0.5) + 0.8416212 * math.sqrt(0.5 - d * d)) ** 2 / (d * d)
    assert n_needed(0.196) <= 100 < n_needed(0.195)
    assert iv.detectable_effect(100, 0.5) == pytest.approx(0.196)
    assert iv.required_pairs(0.5, 0.196) == pytest.approx(n_needed(0.196), rel=1e-6)


def test_detectable_effect_floor_and_limits():
    # n = 12: six one-way changes are the least an exact test can flag, so never below 6/12
    assert iv.detectable_effect(12, 0.3) >= 0.5
    assert iv.detectable_effect(40, 0.5) > iv.detectable_effect(160, 0.5)  # more items, smaller effect
    assert iv.detectable_effect(200, 0.1) < iv.detectable_effect(200, 0.5)  # rare successes: less noise
    assert iv.detectable_effect(10, 0.95) is None  # no room above the base rate
    assert iv.detectable_effect(0, 0.5) is None
    # shift of a continuous score: (1.96 + 0.8416212) * sqrt(2 * 0.5^2 / 50) = 0.2801621
    assert iv.detectable_shift(50, 0.5) == pytest.approx(0.2801621, abs=1e-6)


def test_t_quantiles_match_the_printed_table():
    for df, t in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042)):
        assert iv.t_quantile(df) == pytest.approx(t, abs=1e-3)
    assert iv.t_cdf(iv.t_quantile(14), 14) == pytest.approx(0.975, abs=1e-6)


def test_cluster_delta_by_hand():
    # clusters a, b, c of two items; summed differences 2, 0, 0 over n = 6: delta = 1/3;
    # residuals 2 - 2/3, -2/3, -2/3; var = 3/2 * (16/9 + 4/9 + 4/9) / 36 = 1/9, se = 1/3, t(2) = 4.303
    d = iv.cluster_delta([0, 0, 0, 0, 1, 1], [1, 1, 0, 0, 1, 1], list("aabbcc"))
    assert d.delta == pytest.approx(1 / 3)
    assert (d.low, d.high) == pytest.approx((1 / 3 - 4.303 / 3, 1 / 3 + 4.303 / 3), abs=1e-3)
    mean, low, high = iv.mean_interval([0.1, 0.2, 0.3])  # sd 0.1: 0.2 +- 4.303 * 0.1 / sqrt(3)
    assert (mean, low, high) == pytest.approx((0.2, 0.2 - 0.24843, 0.2 + 0.24843), abs=1e-4)


def test_the_cluster_interval_is_wider_when_an_environment_moves_as_one():
    # 10 environments of 20 items; the same 30 items flip 0 -> 1 either inside 3 environments
    # (all of their 10 unsolved items) or spread, 3 in each environment
    envs = [e for e in range(10) for _ in range(20)]
    base = [float(i % 2) for i in range(200)]
    together = [1.0 if envs[i] < 3 else b for i, b in enumerate(base)]
    spread = [1.0 if (i % 20) < 6 else b for i, b in enumerate(base)]
    assert sum(together) - sum(base) == sum(spread) - sum(base) == 30
    item = iv.paired_delta(base, together)
    assert item == iv.paired_delta(base, spread)  # item level: the same table either way
    clustered, even = iv.cluster_delta(base, together, envs), iv.cluster_delta(base, spread, envs)
    assert clustered.high - clustered.low > 1.5 * (item.high - item.low)
    assert clustered.low < 0 < item.low  # significant item by item, not once environments are counted
    assert even.high - even.low < item.high - item.low
