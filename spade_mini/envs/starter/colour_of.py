import random

COLOURS = "red green yellow black white pink".split()


class ColourOfEnv:
    """Name the colour of one of a few things just described."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, n = random.Random(seed), 3 + (options or {}).get("level", 0)
        things, colours = rng.sample("ball cup hat car box kite".split(), n), rng.sample(COLOURS, n)
        self.thing, self.colour = rng.choice(list(zip(things, colours)))
        facts = ", ".join(f"the {t} is {c}" for t, c in zip(things, colours))
        return (f"Example: the sky is blue. Colour of the sky? \\boxed{{blue}}\n"
                f"Now: {facts}. Colour of the {self.thing}?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.colour}}}"
        return ("Correct!" if won else f"Wrong: it is {self.colour}."), float(won), True, False, {}

    def hint(self):
        return f"Find where the {self.thing} is named and read the colour written with it."

    def solution(self):
        return [f"\\boxed{{{self.colour}}}"]
