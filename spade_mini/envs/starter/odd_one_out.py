import random

GROUPS = {"animal": "cat cow horse goat", "fruit": "apple pear plum lemon", "tool": "hammer saw drill axe"}


class OddOneOutEnv:
    """Three words share a kind; find the word that does not."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.kind, self.other = rng.sample(list(GROUPS), 2)
        words, self.odd = rng.sample(GROUPS[self.kind].split(), 3), rng.choice(GROUPS[self.other].split())
        words.insert(rng.randint(0, 3), self.odd)
        return (f"Example: red, blue, sun, green: not a colour? \\boxed{{sun}}\n"
                f"Now: {', '.join(words)}: not a {self.kind}?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.odd}}}"
        return ("Correct!" if won else "Wrong."), float(won), True, False, {}

    def hint(self):
        return f"One of the words is a {self.other}, not a {self.kind}."

    def solution(self):
        return [f"\\boxed{{{self.odd}}}"]
