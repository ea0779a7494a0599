import random


class SequenceNextEnv:
    """Give the next terms of a number sequence; each level adds a kind of sequence and a term."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, level = random.Random(seed), (options or {}).get("level", 0)
        a, d, n = rng.randint(1, 9), rng.randint(2, 6), 8 + level
        kinds = [[a + d * i for i in range(n)], [a * 2 ** i for i in range(n)], [a + i * i for i in range(n)],
                 [a + d * i * i for i in range(n)], [a + d * 2 ** i for i in range(n)],
                 [(a + d * i) * (-1) ** i for i in range(n)]]
        terms = rng.choice(kinds[:3 + level])
        self.rest = terms[5:]
        shown = ", ".join(map(str, terms[:5]))
        return f"Give the next {n - 5} terms of {shown}, ... one per turn, like \\boxed{{17}}.", {}

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
