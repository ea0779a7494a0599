import random

ANIMALS = "cat dog fox pig owl hen bee rat".split()
PLACES = ["{} end", "2nd spot from the {}", "3rd spot from the {}"]


class RowPositionEnv:
    """Animals stand in a row: name the one at a given place."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, n = random.Random(seed), 3 + (options or {}).get("level", 0)
        row, at = rng.sample(ANIMALS, n), rng.randrange(n)
        self.animal, side = row[at], "left" if 2 * at < n - 1 else "right"
        self.place = "middle" if 2 * at == n - 1 else PLACES[min(at, n - 1 - at)].format(side)
        return (f"Example: left to right: ant, elk, yak. At the left end? \\boxed{{ant}}\n"
                f"Now: left to right: {', '.join(row)}. At the {self.place}?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.animal}}}"
        return ("Correct!" if won else f"Wrong: it is the {self.animal}."), float(won), True, False, {}

    def hint(self):
        return "Count the animals from the left: the left end is the first named, the right end the last."

    def solution(self):
        return [f"\\boxed{{{self.animal}}}"]
