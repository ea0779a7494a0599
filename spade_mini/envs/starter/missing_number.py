import random


class MissingNumberEnv:
    """Five numbers go up by the same step; name the one that is missing."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.number = 6  # the worked example's answer: drawn again
        while self.number == 6:
            start, gap, self.hole = rng.randint(1, 20), rng.randint(2, 5), rng.randint(1, 3)
            row = [start + gap * k for k in range(5)]
            self.number = row[self.hole]
        shown = ", ".join("?" if k == self.hole else str(n) for k, n in enumerate(row))
        return (f"Example: 2, 4, ?, 8, 10. The missing number? \\boxed{{6}}\n"
                f"Now: {shown}. The missing number?"), {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.number}}}"
        return ("Correct!" if won else f"Wrong: it is {self.number}."), float(won), True, False, {}

    def hint(self):
        return "Find how much each number adds to the one before it, and add that to the number before the gap."

    def solution(self):
        return [f"\\boxed{{{self.number}}}"]
