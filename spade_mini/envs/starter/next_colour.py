import random


class NextColourEnv:
    """Two colours take turns in a row: say which comes next."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        pair, shown = rng.sample("red green yellow black white pink".split(), 2), rng.randint(3, 5)
        self.next = pair[shown % 2]
        row = ", ".join(pair[i % 2] for i in range(shown))
        return f"Example: up, down, up, down, ? \\boxed{{up}}\nNow: {row}, ? Which colour comes next?", {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.next}}}"
        return ("Correct!" if won else f"Wrong: {self.next} comes next."), float(won), True, False, {}

    def hint(self):
        return f"The colours take turns; the next one starts with '{self.next[0]}'."

    def solution(self):
        return [f"\\boxed{{{self.next}}}"]
