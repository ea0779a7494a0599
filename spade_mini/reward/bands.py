"""The solve-rate bands, in one home. Four rules read an environment's no-hint solve rate
against a band, each for a reason of its own, so each has its own name:

    POOL_BAND       (0.1, 0.9)   the active pool (pool.py; --pool-low, --pool-high): a design joins
                                 strictly inside it, and a full window at an edge moves its level.
                                 With 8 seeds: at least one win and one loss.
    REFERENCE_BAND  (0.15, 0.85) the memory (designer/memory.py): the earlier designs a designer
                                 prompt shows as references were played inside it.
    PLATEAU         (0.15, 0.4, 0.6, 0.85)  the blend's solve-rate term (regret.plateau): 1 on
                                 [0.4, 0.6], falling linearly to 0 at 0.15 and at 0.85.
    GATE            (0.0, 1.0)   the gated blend (regret.designer_reward): regret is paid only
                                 strictly inside, where some plays won and some lost.
    ALIGNMENT_BAND  (0.1, 0.9)   the alignment set (alignment.py): an item's start rate lies
                                 inside it or on its edge (the starting policy is neither always
                                 right nor always wrong); POOL_BAND's numbers,
                                 another reason.
    EVIDENCE_BAND   (0.05, 0.95) the curve's transfer suites: only the items of environments whose
                                 start rate lies inside it or on its edge count as evidence.

Plain numbers, no imports: config.py, pool.py, the memory and the reward all read them here.
"""
POOL_BAND = (0.1, 0.9)
REFERENCE_BAND = (0.15, 0.85)
PLATEAU = (0.15, 0.4, 0.6, 0.85)
GATE = (0.0, 1.0)
ALIGNMENT_BAND = POOL_BAND
EVIDENCE_BAND = (0.05, 0.95)


def inside(rate: float | None, band: tuple[float, float]) -> bool:
    """Strictly inside the band and strictly between 0 and 1 (some won and some lost): the test
    of the pool's admission and refill, and of the gated blend."""
    return rate is not None and 0.0 < rate < 1.0 and band[0] < rate < band[1]


def within(rate: float | None, band: tuple[float, float]) -> bool:
    """Inside the band or on its edge: the memory's references."""
    return rate is not None and band[0] <= rate <= band[1]


def rate_of(returns: list[float]) -> float | None:
    """The solve rate of some returns (a win: return > 0), None without any."""
    return sum(r > 0 for r in returns) / len(returns) if returns else None
