import random


class CapitalWordEnv:
    """Write a word in capital letters."""
    def reset(self, seed=None):
        self.word = random.Random(seed).choice("cat dog cup hat pen bird tree book".split())
        return (f"Example: sun in capital letters is \\boxed{{SUN}}\n"
                f"Now: write {self.word} in capital letters."), {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.word.upper()}}}"
        return ("Correct!" if won else f"Wrong: {self.word.upper()}."), float(won), True, False, {}

    def hint(self):
        return f"Keep the same {len(self.word)} letters in the same order, each one as a capital."

    def solution(self):
        return [f"\\boxed{{{self.word.upper()}}}"]
