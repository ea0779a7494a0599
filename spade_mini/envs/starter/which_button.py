import random

WANTS = {"lights a lamp": "light", "rings a bell": "a sound", "starts a fan": "wind",
         "opens a tap": "water", "heats a pan": "warmth", "opens a door": "a way out"}


class WhichButtonEnv:
    """Each button causes one thing: press the one that gives what you want."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, level = random.Random(seed), (options or {}).get("level", 0)
        buttons = rng.sample("red green blue white black grey gold".split()[:4 + level], 3 + level)
        self.button, self.effect = rng.choice(list(zip(buttons, WANTS)))
        rules = " ".join(f"The {b} button {e}." for b, e in zip(buttons, WANTS))
        return (f"Example: the pink button plays music; you want music. \\boxed{{pink}}\n"
                f"Now: {rules} You want {WANTS[self.effect]}. Which button?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.button}}}"
        return ("Correct!" if won else "Wrong."), float(won), True, False, {}

    def hint(self):
        return f"Read what each button does and answer with the one that {self.effect}."

    def solution(self):
        return [f"\\boxed{{{self.button}}}"]
