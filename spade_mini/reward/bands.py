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

Plain numbers, no imports: config.py, pool.py, the memory and the reward all read them here.
"""
POOL_BAND = (0.1, 0.9)
REFERENCE_BAND = (0.15, 0.85)
PLATEAU = (0.15, 0.4, 0.6, 0.85)
GATE = (0.0, 1.0)
