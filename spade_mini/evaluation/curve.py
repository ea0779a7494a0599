"""What a learning-curve point shows, from item outcomes alone (no model): bench/learning_curve.py.

An outcome set maps an item key, "<environment>/<seed>" of a distinct item (fixed_set.py), to
0 or 1. `compare(base, other)` pairs two sets over the same keys and gives:

    n           the distinct items compared (evidence: the saturated environments left out)
    delta       the mean paired difference other - base, with the item-level interval and the
                exact McNemar p (intervals.paired_delta)
    cluster_*   the cluster-robust interval and p with environments as clusters
                (intervals.cluster_delta): items of one template move together, so this is
                the honest width when a gain is one environment's format
    mde         the smallest rise over base's rate that n paired 0/1 items detect at 95%
                confidence with 80% power (intervals.detectable_effect)

`saturated(sets)`: the environments that every outcome set compared solves on every item. They
cannot change, so they are reported and left out of n (McNemar's p is the same either way; the
delta, its intervals and the detectable change are then per informative item).
`over_seeds(values)`: the mean of per-seed values with its t interval (intervals.mean_interval).
Omitted: weighting items by how many seeds share their first observation (the counts are kept
in eval.jsonl; every distinct item counts once here).
"""
from __future__ import annotations

from spade_mini.evaluation import intervals as iv


def env_of(key: str) -> str:
    return key.rsplit("/", 1)[0]


def saturated(sets: list[dict[str, float]]) -> list[str]:
    """Environments that every set solves on every item."""
    envs = sorted({env_of(k) for s in sets for k in s})
    return [e for e in envs if all(v == 1.0 for s in sets for k, v in s.items() if env_of(k) == e)]


def never_solved(sets: list[dict[str, float]]) -> list[str]:
    """Environments that no set solves on any item (reported: they carry no evidence either)."""
    envs = sorted({env_of(k) for s in sets for k in s})
    return [e for e in envs if all(v == 0.0 for s in sets for k, v in s.items() if env_of(k) == e)]


def compare(base: dict[str, float], other: dict[str, float], exclude=()) -> dict:
    """The paired comparison of two outcome sets over the same keys, outside `exclude`d environments."""
    if sorted(base) != sorted(other):
        raise ValueError("a comparison needs the same items on both sides: "
                         f"{len(base)} vs {len(other)} items, {len(set(base) ^ set(other))} not shared")
    keys = sorted(k for k in base if env_of(k) not in set(exclude))
    b, o = [base[k] for k in keys], [other[k] for k in keys]
    item, cluster = iv.paired_delta(b, o), iv.cluster_delta(b, o, [env_of(k) for k in keys])
    rate = sum(b) / len(b) if b else float("nan")
    return {"n": len(keys), "base": rate, "other": sum(o) / len(o) if o else float("nan"),
            "delta": item.delta, "delta_low": item.low, "delta_high": item.high, "p": item.p,
            "cluster_low": cluster.low, "cluster_high": cluster.high, "cluster_p": cluster.p,
            "clusters": len({env_of(k) for k in keys}),
            "mde": iv.detectable_effect(len(keys), rate) if b else None}


def point(iteration: int, base: dict[str, float], other: dict[str, float], exclude=()) -> dict:
    """One curve point: its solve rate over every distinct item (Wilson interval) and its
    comparison with the starting policy over the evidence items."""
    rate, low, high, _ = iv.interval([other[k] for k in sorted(other)])
    return {"iteration": iteration, "distinct": len(other), "solve_rate": rate, "low": low, "high": high,
            **compare(base, other, exclude)}


def over_seeds(values: list[float]) -> dict:
    """The mean over seeds of one per-seed value, with its 95% t interval (None with one seed)."""
    values = [v for v in values if v is not None]
    mean, low, high = iv.mean_interval(values)
    finite = len(values) > 1
    return {"seeds": len(values), "mean": mean if values else None,
            "low": low if finite else None, "high": high if finite else None}


def pack(outcomes: dict[str, float | None], keys: list[str]) -> str:
    """Outcomes in the order of `keys` as one string: 1, 0, or - (no score)."""
    return "".join("-" if outcomes.get(k) is None else "1" if outcomes[k] else "0" for k in keys)


def unpack(text: str, keys: list[str]) -> dict[str, float]:
    """pack's inverse; items without a score are left out."""
    if len(text) != len(keys):
        raise ValueError(f"{len(text)} packed outcomes for {len(keys)} items")
    return {k: float(c == "1") for k, c in zip(keys, text) if c != "-"}
