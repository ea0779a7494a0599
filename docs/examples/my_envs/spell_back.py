# skill: language_understanding
import random

WORDS = ["lamp", "stone", "river", "cloud", "apple", "tiger", "bread", "chair", "glove", "music",
         "plant", "sugar", "train", "watch", "house", "field"]


class SpellBackEnv:
    """Write a word backwards."""

    def reset(self, seed=None, options=None):
        self.word = random.Random(seed).choice(WORDS)
        return f"Write the word '{self.word}' backwards, in \\boxed{{}}.", {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.word[::-1]}}}"
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def hint(self):
        return "Start from the last letter and read to the first."

    def solution(self):
        return [f"\\boxed{{{self.word[::-1]}}}"]
