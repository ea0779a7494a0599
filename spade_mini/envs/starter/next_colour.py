import random


class NextColourEnv:
    """A few colours take turns in a row: say which comes next."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, k = random.Random(seed), 2 + (options or {}).get("level", 0)
        pair, shown = rng.sample("red green yellow black white pink".split(), k), rng.randint(k + 1, 2 * k + 1)
        self.next = pair[shown % k]
        row = ", ".join(pair[i % k] for i in range(shown))
        return f"Example: up, down, up, down, ? \\boxed{{up}}\nNow: {row}, ? Which colour comes next?", {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.next}}}"
        return ("Correct!" if won else f"Wrong: {self.next} comes next."), float(won), True, False, {}

    def hint(self):
        return "The colours take turns, so the next one is the colour that came two places before it."

    def solution(self):
        return [f"\\boxed{{{self.next}}}"]
