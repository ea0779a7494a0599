"""Confidence intervals for evaluation scores: one model, two models on the same items, and power.

`interval(scores)`: the 95% interval of one model's mean score. Wilson's score interval when every
score is 0 or 1 (it stays inside [0, 1] and never collapses to a point at 0/n or n/n), else the
normal approximation mean +- z * standard error.

`paired_delta(base, other)`: the difference `other - base` on the SAME items, item i of one list
against item i of the other. Pairing removes the spread between items (an easy item is easy for
both models), which is what lets a few dozen items show a difference at all.
  * 0/1 scores: only the discordant items carry information: n12 items that base solved and
    other did not, n21 the reverse; delta = (n21 - n12) / n. The interval is Agresti and Min's
    (2005) adjusted Wald interval: add 1/2 to each of the four cells of the 2x2 table (n + 2 in
    all), then delta~ +- z * sqrt((p12 + p21 - delta~^2) / (n + 2)). Unlike the plain Wald interval
    it does not collapse to zero width when no item changed, and it covers well from n ~ 20. The
    p-value is the exact McNemar test: under "no difference" each discordant item is a fair coin.
    Near the edge the two can disagree (an interval just clear of 0 with p slightly above 0.05):
    the exact test is the stricter; read both.
    Chosen over a bootstrap over items because at these n a percentile bootstrap of 0/1 scores
    is too narrow (and a point when nothing changed), and because a closed form gives the same
    answer on every run and can be checked by hand.
  * other scores (returns, shares of turns): the normal interval of the mean per-item
    difference, with a two-sided normal p-value.

`detectable_effect(n, p)`: the smallest improvement over a base rate p that n paired 0/1 items
detect at 95% confidence with 80% power. It uses Connor's (1987) normal approximation of the
McNemar test, n = (z_a sqrt(psi) + z_b sqrt(psi - d^2))^2 / d^2, with the discordant share psi
taken as if the two models erred independently, psi = p (1 - p - d) + (p + d)(1 - p) (real models
agree more than that, so this errs on the large side), and never below 6 / n: with fewer than six
items changing, all the same way, the exact test cannot reach p < 0.05 (2 * 0.5^5 > 0.05).
`cluster_delta(base, other, clusters)`: the same paired difference with environments as
clusters. Items of one environment share a template, so they tend to move together (a model
that learns the format of one environment wins all its items at once); the item-level interval
treats them as independent and is then too narrow. The cluster-robust variance of the mean
difference sums the differences per cluster, var = G / (G - 1) * sum_g (D_g - n_g * delta)^2 / n^2
(D_g: cluster g's summed difference, n_g its items, G clusters), and the interval is
delta +- t(G - 1) * sqrt(var), Student's t on G - 1 degrees of freedom since G is small.
`mean_interval(values)`: the t interval of a mean over a few runs (seeds). `ratio_interval(a, n1, b, n2)`:
the ratio of two independent rates (Katz's log interval).
Omitted: corrections for testing many metrics at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

Z95 = 1.96                    # two-sided 95%
POWER = 0.8
MIN_DISCORDANT = 6            # smallest one-way change an exact McNemar test flags at 5%


def is_binary(scores) -> bool:
    return all(s in (0.0, 1.0) for s in scores)


def interval(scores: list[float], z: float = Z95) -> tuple[float, float, float, str]:
    """(mean, low, high, method): Wilson for 0/1 scores, else mean +- z * standard error."""
    n = len(scores)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), "none"
    mean = sum(scores) / n
    if is_binary(scores):
        denom = 1 + z * z / n
        centre = (mean + z * z / (2 * n)) / denom
        half = z * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n)) / denom
        return mean, max(0.0, centre - half), min(1.0, centre + half), "wilson"
    var = sum((s - mean) ** 2 for s in scores) / max(1, n - 1)
    half = z * math.sqrt(var / n)
    return mean, mean - half, mean + half, "normal"


@dataclass
class Delta:
    n: int          # paired items
    delta: float    # mean of other - base
    low: float
    high: float
    p: float        # two-sided p-value of "no difference"
    method: str     # "agresti-min" | "paired-normal"


def mcnemar_p(n12: int, n21: int) -> float:
    """Exact two-sided McNemar p-value: twice the binomial tail of the rarer change, at most 1."""
    m = n12 + n21
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, k) for k in range(min(n12, n21) + 1)) / 2 ** m
    return min(1.0, 2 * tail)


def paired_delta(base: list[float], other: list[float], z: float = Z95) -> Delta:
    """Paired difference other - base over items in the same order (see the module docstring)."""
    if len(base) != len(other):
        raise ValueError(f"paired scores need the same items: {len(base)} vs {len(other)} scores.")
    n = len(base)
    if n == 0:
        return Delta(0, float("nan"), float("nan"), float("nan"), float("nan"), "none")
    if is_binary(base) and is_binary(other):
        n12 = sum(1 for b, o in zip(base, other) if b == 1.0 and o == 0.0)  # base right, other wrong
        n21 = sum(1 for b, o in zip(base, other) if b == 0.0 and o == 1.0)  # the reverse
        p12, p21 = (n12 + 0.5) / (n + 2), (n21 + 0.5) / (n + 2)
        adjusted = p21 - p12
        half = z * math.sqrt((p12 + p21 - adjusted ** 2) / (n + 2))
        return Delta(n, (n21 - n12) / n, max(-1.0, adjusted - half), min(1.0, adjusted + half),
                     mcnemar_p(n12, n21), "agresti-min")
    diffs = [o - b for b, o in zip(base, other)]
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / max(1, n - 1) / n)
    p = 1.0 if se == 0 else 2 * (1 - NormalDist().cdf(abs(mean) / se))
    return Delta(n, mean, mean - z * se, mean + z * se, p, "paired-normal")


def required_pairs(p: float, d: float, z_a: float = Z95, power: float = POWER) -> float:
    """Connor's paired sample size for a rise from p to p + d (independent errors assumed)."""
    z_b = NormalDist().inv_cdf(power)
    psi = p * (1 - p - d) + (p + d) * (1 - p)
    return (z_a * math.sqrt(psi) + z_b * math.sqrt(max(0.0, psi - d * d))) ** 2 / (d * d)


def detectable_effect(n: int, p: float, z_a: float = Z95, power: float = POWER) -> float | None:
    """Smallest rise d (in steps of 0.001) over base rate p that n paired 0/1 items detect;
    None when even p -> 1 is out of reach."""
    if n <= 0:
        return None
    floor = MIN_DISCORDANT / n
    for k in range(1, 1001):
        d = k / 1000
        if p + d > 1.0 + 1e-12:
            return None
        if d >= floor and required_pairs(p, d, z_a, power) <= n:
            return d
    return None


def detectable_shift(n: int, sd: float, z_a: float = Z95, power: float = POWER) -> float | None:
    """Smallest mean shift n paired items of a continuous score detect, if the two models varied
    independently around the base's standard deviation `sd`."""
    if n <= 1:
        return None
    return (z_a + NormalDist().inv_cdf(power)) * math.sqrt(2 * sd * sd / n)


def t_cdf(x: float, df: int, steps: int = 400) -> float:
    """P(T <= x) for Student's t, x >= 0: 0.5 plus the density integrated by Simpson's rule."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    h = x / steps
    f = [c * (1 + (h * k) ** 2 / df) ** (-(df + 1) / 2) for k in range(steps + 1)]
    return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))


def t_quantile(df: int, q: float = 0.975) -> float:
    """Student's t quantile (q >= 0.5), by bisection on t_cdf."""
    if df < 1:
        return float("nan")
    low, high = 0.0, 1000.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < q else (low, mid)
    return (low + high) / 2


def cluster_delta(base: list[float], other: list[float], clusters: list) -> Delta:
    """Paired difference other - base with a cluster-robust interval (`clusters[i]`: item i's
    environment); the p-value is the t test of the same statistic."""
    if not len(base) == len(other) == len(clusters):
        raise ValueError("cluster_delta needs one base score, one other score and one cluster per item.")
    n = len(base)
    sums: dict = {}
    for b, o, g in zip(base, other, clusters):
        total, count = sums.get(g, (0.0, 0))
        sums[g] = (total + o - b, count + 1)
    if n == 0 or len(sums) < 2:
        return Delta(n, float("nan") if n == 0 else sum(o - b for b, o in zip(base, other)) / n,
                     float("nan"), float("nan"), float("nan"), "cluster-t")
    delta = sum(total for total, _ in sums.values()) / n
    g = len(sums)
    var = g / (g - 1) * sum((total - count * delta) ** 2 for total, count in sums.values()) / n ** 2
    se, t = math.sqrt(var), t_quantile(g - 1)
    p = 1.0 if se == 0 else 2 * (1 - t_cdf(abs(delta) / se, g - 1))
    return Delta(n, delta, delta - t * se, delta + t * se, p, "cluster-t")


def mean_interval(values: list[float], z: float | None = None) -> tuple[float, float, float]:
    """(mean, low, high) of a mean over a few runs: Student's t on n - 1 degrees of freedom
    (nan bounds for one run)."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    mean = sum(values) / n
    if n == 1:
        return mean, float("nan"), float("nan")
    half = (z or t_quantile(n - 1)) * math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
    return mean, mean - half, mean + half


def ratio_interval(a: int, n1: int, b: int, n2: int, z: float = Z95) -> tuple[float, float, float]:
    """(ratio, low, high) of two independent rates, (a / n1) / (b / n2): Katz's log interval,
    ln r +- z * sqrt(1/a - 1/n1 + 1/b - 1/n2), with 1/2 added to a zero count (and its n) so
    that 0 of n gives a finite bound. What `bench/designer_validity.py --compare` reads: a valid
    fraction under one prompt against another, e.g. "cut by at most a third" is low > 2/3."""
    if min(n1, n2) <= 0:
        raise ValueError("both rates need at least one trial")
    if a == 0 or b == 0:
        a, n1, b, n2 = a + 0.5, n1 + 0.5, b + 0.5, n2 + 0.5
    ratio = (a / n1) / (b / n2)
    half = z * math.sqrt(max(0.0, 1 / a - 1 / n1 + 1 / b - 1 / n2))
    return ratio, ratio * math.exp(-half), ratio * math.exp(half)
