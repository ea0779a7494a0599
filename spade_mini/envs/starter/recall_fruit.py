import random

FRUITS = "plum mango cherry lemon peach melon".split()


class RecallFruitEnv:
    """Remember a fruit, then pick it out of three."""
    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.fruit, self.asked = self.rng.choice(FRUITS), False
        return (f"Example: remember fig; asked later, answer \\boxed{{fig}}\n"
                f"Now: remember {self.fruit}. Reply \\boxed{{ok}} first."), {}

    def step(self, action):
        if not self.asked:
            self.asked = True
            options = sorted(self.rng.sample([f for f in FRUITS if f != self.fruit], 2) + [self.fruit])
            return f"Which fruit did I ask you to remember: {', '.join(options)}?", 0.0, False, False, {}
        won = action.strip().lower() == f"\\boxed{{{self.fruit}}}"
        return ("Correct!" if won else f"Wrong: it was {self.fruit}."), float(won), True, False, {}

    def hint(self):
        return "The fruit to remember is the one named right after 'Now: remember'."

    def solution(self):
        return ["\\boxed{ok}", f"\\boxed{{{self.fruit}}}"]
