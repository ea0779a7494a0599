import random


class SmallerNumberEnv:
    """Say which of two numbers is smaller."""
    def reset(self, seed=None):
        self.pair = random.Random(seed).sample([n for n in range(10, 100) if n not in (45, 71)], 2)
        return (f"Example: which is smaller, 71 or 45? \\boxed{{45}}\n"
                f"Now: which is smaller, {self.pair[0]} or {self.pair[1]}?"), {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{min(self.pair)}}}"
        return ("Correct!" if won else f"Wrong: {min(self.pair)} is smaller."), float(won), True, False, {}

    def hint(self):
        return f"The smaller number ends in the digit {min(self.pair) % 10}."

    def solution(self):
        return [f"\\boxed{{{min(self.pair)}}}"]
