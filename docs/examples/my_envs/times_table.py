# skill: mathematical_reasoning
import random


class TimesTableEnv:
    """Multiply two numbers; level 1 uses numbers up to 20."""
    levels = 2

    def reset(self, seed=None, options=None):
        top = (9, 20)[(options or {}).get("level", 0)]
        rng = random.Random(seed)
        self.a, self.b = rng.randint(2, top), rng.randint(2, top)
        return f"What is {self.a} times {self.b}? Answer with the number in \\boxed{{}}.", {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.a * self.b}}}"
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def hint(self):
        return "Add the first number to itself as many times as the second says."

    def solution(self):
        return [f"\\boxed{{{self.a * self.b}}}"]
