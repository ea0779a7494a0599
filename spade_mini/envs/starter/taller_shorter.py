import random


class TallerShorterEnv:
    """Comparisons are stated; name who is at one end of them."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, level = random.Random(seed), (options or {}).get("level", 0)
        people = rng.sample("Tom Ann Sam Liz Ben Kim".split(), 2 + level)
        more, less = rng.choice([("taller", "shorter"), ("older", "younger")])
        asked = rng.choice([more, less])
        self.answer = people[0] if asked == more else people[-1]
        self.asked = asked[:-2] + "est" if level else asked
        facts = [f"{a} is {more} than {b}." for a, b in zip(people, people[1:])]
        rng.shuffle(facts)
        return (f"Example: Joe is taller than Mia. Who is shorter? \\boxed{{Mia}}\n"
                f"Now: {' '.join(facts)} Who is {self.asked}?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.answer.lower()}}}"
        return ("Correct!" if won else f"Wrong: {self.answer}."), float(won), True, False, {}

    def hint(self):
        return "If one is taller than the other, the other is shorter; older and younger turn the same way."

    def solution(self):
        return [f"\\boxed{{{self.answer}}}"]
