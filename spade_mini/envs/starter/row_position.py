import random

ANIMALS = "cat dog fox pig owl hen bee rat".split()
PLACES = ["left end", "middle", "right end"]


class RowPositionEnv:
    """Three animals stand in a row: name the one at a given place."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        row, self.at = rng.sample(ANIMALS, 3), rng.randrange(3)
        self.animal = row[self.at]
        return (f"Example: left to right: ant, elk, yak. At the left end? \\boxed{{ant}}\n"
                f"Now: left to right: {', '.join(row)}. At the {PLACES[self.at]}?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.animal}}}"
        return ("Correct!" if won else f"Wrong: it is the {self.animal}."), float(won), True, False, {}

    def hint(self):
        return f"The animal at the {PLACES[self.at]} starts with '{self.animal[0]}'."

    def solution(self):
        return [f"\\boxed{{{self.animal}}}"]
