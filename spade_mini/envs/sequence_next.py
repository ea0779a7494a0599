import random


class SequenceNextEnv:
    """Give the next three terms of a number sequence."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        a, d = rng.randint(1, 9), rng.randint(2, 6)
        terms = rng.choice([[a + d * i for i in range(8)], [a * 2 ** i for i in range(8)],
                            [a + i * i for i in range(8)]])
        self.rest = terms[5:]
        shown = ", ".join(map(str, terms[:5]))
        return f"Give the next 3 terms of {shown}, ... one per turn, like \\boxed{{17}}.", {}

    def step(self, action):
        term = self.rest.pop(0)
        if action.strip() != f"\\boxed{{{term}}}":
            return f"Wrong: the next term was {term}.", 0.0, True, False, {}
        if not self.rest:
            return "Correct! Sequence complete.", 1.0, True, False, {}
        return "Correct. Next term?", 0.0, False, False, {}

    def hint(self):
        return "Look at the differences between neighbouring terms, and at their ratios."

    def solution(self):
        return [f"\\boxed{{{t}}}" for t in self.rest]
