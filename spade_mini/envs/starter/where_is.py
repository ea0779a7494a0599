import random

NAMES = "Ann Bo Cy Dee Eve Finn Gus Hal Ida Jo".split()
PLACES = "kitchen garden attic cellar garage hall porch shed".split()


class WhereIsEnv:
    """Someone is in one of two places and not in the other; say where they are."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        name = rng.choice(NAMES)
        self.place, other = rng.sample(PLACES, 2)
        either = [self.place, other]
        rng.shuffle(either)
        return (f"Example: Max is in the bath or the bed. Max is not in the bed. Where is Max? \\boxed{{bath}}\n"
                f"Now: {name} is in the {either[0]} or the {either[1]}. {name} is not in the {other}. "
                f"Where is {name}?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.place}}}"
        return ("Correct!" if won else f"Wrong: in the {self.place}."), float(won), True, False, {}

    def hint(self):
        return "Of the two places, answer the one that the second sentence does not rule out."

    def solution(self):
        return [f"\\boxed{{{self.place}}}"]
