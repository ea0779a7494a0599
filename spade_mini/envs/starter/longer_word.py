import random


class LongerWordEnv:
    """Say which of two words has more letters."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.long = rng.choice("elephant umbrella computer basketball".split())
        pair = [rng.choice("cat dog sun pen cup hat".split()), self.long]
        rng.shuffle(pair)
        return (f"Example: which word is longer, ox or zebra? \\boxed{{zebra}}\n"
                f"Now: which word is longer, {pair[0]} or {pair[1]}?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.long}}}"
        return ("Correct!" if won else f"Wrong: {self.long} is longer."), float(won), True, False, {}

    def hint(self):
        return f"Count the letters of each word; the longer one has {len(self.long)}."

    def solution(self):
        return [f"\\boxed{{{self.long}}}"]
