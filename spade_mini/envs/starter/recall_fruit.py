import random

FRUITS = "plum mango cherry lemon peach melon grape apple lime pear kiwi date".split()


class RecallFruitEnv:
    """Remember a fruit, then pick it out of a few."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, self.asked = random.Random(seed), False
        self.fruit = rng.choice(FRUITS)
        others = rng.sample([f for f in FRUITS if f != self.fruit], 2 + (options or {}).get("level", 0))
        self.options, decoys = sorted(others + [self.fruit]), others[1:]
        return (f"Example: remember fig; asked later, answer \\boxed{{fig}}\n"
                f"Now: remember {', not '.join([self.fruit] + decoys)}. Reply \\boxed{{ok}} first."), {}

    def step(self, action):
        if not self.asked:
            self.asked = True
            return f"Which fruit did I ask you to remember: {', '.join(self.options)}?", 0.0, False, False, {}
        won = action.strip().lower() == f"\\boxed{{{self.fruit}}}"
        return ("Correct!" if won else f"Wrong: it was {self.fruit}."), float(won), True, False, {}

    def hint(self):
        return "The fruit to remember is the one named right after 'Now: remember'."

    def solution(self):
        return ["\\boxed{ok}", f"\\boxed{{{self.fruit}}}"]
