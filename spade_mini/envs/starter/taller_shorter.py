import random


class TallerShorterEnv:
    """One comparison is stated; name who is on one side of it."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        first, second = rng.sample(["Tom", "Ann", "Sam", "Liz", "Ben", "Kim"], 2)
        more, less = rng.choice([("taller", "shorter"), ("older", "younger")])
        self.asked = rng.choice([more, less])
        self.answer = first if self.asked == more else second
        return (f"Example: Joe is taller than Mia. Who is shorter? \\boxed{{Mia}}\n"
                f"Now: {first} is {more} than {second}. Who is {self.asked}?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.answer.lower()}}}"
        return ("Correct!" if won else f"Wrong: {self.answer}."), float(won), True, False, {}

    def hint(self):
        return f"The one who is {self.asked} has a name starting with '{self.answer[0]}'."

    def solution(self):
        return [f"\\boxed{{{self.answer}}}"]
