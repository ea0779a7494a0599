import random


class AddNumbersEnv:
    """Add two two-digit numbers."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(10, 49), rng.randint(10, 49)
        return (f"Example: 12 plus 5 is \\boxed{{17}}\n"
                f"Now: {self.a} plus {self.b}?"), {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.a + self.b}}}"
        return ("Correct!" if won else f"Wrong: it is {self.a + self.b}."), float(won), True, False, {}

    def hint(self):
        return "Add the tens, then the ones, and carry a ten when the ones pass nine."

    def solution(self):
        return [f"\\boxed{{{self.a + self.b}}}"]
