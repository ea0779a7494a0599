import random


class CountItemsEnv:
    """Count how many times one word is listed."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.item, self.count = rng.choice("apple stone shell coin leaf egg".split()), rng.randint(3, 5)
        shown = " ".join([self.item] * self.count)
        return f"Example: cup cup. How many cups? \\boxed{{2}}\nNow: {shown}. How many {self.item}s?", {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.count}}}"
        return ("Correct!" if won else f"Wrong: there are {self.count}."), float(won), True, False, {}

    def hint(self):
        return f"Count the words '{self.item}' one by one; there are more than two."

    def solution(self):
        return [f"\\boxed{{{self.count}}}"]
