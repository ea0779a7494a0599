# skill: mathematical_reasoning
import random


class BrokenCountEnv:
    """Count the dots (broken on purpose: its solution is one short, so it never wins)."""

    def reset(self, seed=None, options=None):
        self.n = random.Random(seed).randint(3, 12)
        return "How many dots? " + "." * self.n + " Answer in \\boxed{}.", {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.n}}}"
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def solution(self):
        return [f"\\boxed{{{self.n - 1}}}"]
