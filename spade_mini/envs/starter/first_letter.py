import random


class FirstLetterEnv:
    """Give the first letter of a word."""
    def reset(self, seed=None):
        self.word = random.Random(seed).choice("garden window pencil rocket turtle basket".split())
        return (f"Example: the first letter of cat is \\boxed{{c}}\n"
                f"Now: what is the first letter of {self.word}?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.word[0]}}}"
        return ("Correct!" if won else f"Wrong: it is {self.word[0]}."), float(won), True, False, {}

    def hint(self):
        return "Answer one single letter: the one the word begins with, not the whole word."

    def solution(self):
        return [f"\\boxed{{{self.word[0]}}}"]
