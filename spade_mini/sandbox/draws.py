"""Child side of the sandbox: the random draws of a reset, counted over every generator the
environment reaches and one of them changed on request (validation's `decided` question:
instances.py asks through solution.py's `reset_perturbed`). Imported by worker.py's main()
before the kernel layers, like kernel.py.
"""
import random


class Draws(random.Random):
    """random.Random counting the draws of a reset over every generator, and changing one
    (validation's question: instances.py); unperturbed, the same numbers as random.Random. A draw
    is one random(), one bounded integer (randint, choice, sample, shuffle: `_randbelow`, whatever
    bits its rejection loop takes) or one getrandbits() of the caller's. `perturb` is (draw, far):
    far moves it by half its range (a hidden price by 50, which changes which one is largest),
    near to a neighbouring value (a hidden move to the next one, the rest of the reset unmoved)."""
    count, perturb, inside = 0, None, False

    @staticmethod
    def _changed() -> str | None:
        """None, or how the draw just made is changed: "far" or "near"."""
        Draws.count += 1
        if Draws.perturb is None or Draws.count - 1 != Draws.perturb[0]:
            return None
        return "far" if Draws.perturb[1] else "near"

    def random(self):
        value, how = super().random(), Draws._changed()
        return value if how is None else (value + (0.5 if how == "far" else 0.01)) % 1.0

    def _randbelow(self, n):
        Draws.inside = True
        try:
            value = super()._randbelow(n)
        finally:
            Draws.inside = False
        how = Draws._changed()
        if how is None or n < 2:
            return value
        if how == "far":
            return (value + max(1, n // 2)) % n
        return value ^ 1 if value ^ 1 < n else value - 1

    def getrandbits(self, k):
        value = super().getrandbits(k)
        if Draws.inside:  # the bits of a bounded integer: counted as that one draw
            return value
        how = Draws._changed()
        return value if how is None or k < 1 else value ^ (1 << (k - 1) if how == "far" else 1)


def count_draws() -> None:  # every generator the environment reaches: random.Random, random.randint, ...
    old, random._inst, random.Random = random._inst, Draws(), Draws
    for name, value in list(vars(random).items()):
        if getattr(value, "__self__", None) is old:
            setattr(random, name, getattr(random._inst, name))
