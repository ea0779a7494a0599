import random


class RepeatWordEnv:
    """Write a word three or four times."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.word, self.times = rng.choice("sun moon tree fish rain star".split()), rng.randint(3, 4)
        return (f"Example: write cat 3 times. \\boxed{{cat cat cat}}\n"
                f"Now: write {self.word} {self.times} times."), {}

    def step(self, action):
        won = action.strip().lower().split() == f"\\boxed{{{' '.join([self.word] * self.times)}}}".split()
        return ("Correct!" if won else "Wrong count or word."), float(won), True, False, {}

    def hint(self):
        return f"Write {self.word}, then a space, and so on until there are {self.times} copies."

    def solution(self):
        return ["\\boxed{" + " ".join([self.word] * self.times) + "}"]
