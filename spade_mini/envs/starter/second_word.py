import random

WORDS = "cat dog hen fox owl bee cow pig ram yak ant elk".split()
VERBS = "sees likes finds meets helps follows".split()


class SecondWordEnv:
    """Say the second word of a short sentence."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        first, last = rng.sample(WORDS, 2)
        words = ["the", first, rng.choice(VERBS), "the", last]
        self.word = words[1]
        return (f'Example: the second word of "my hat is red." is \\boxed{{hat}}\n'
                f'Now: the second word of "{" ".join(words).capitalize()}."?'), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.word}}}"
        return ("Correct!" if won else f"Wrong: it is {self.word}."), float(won), True, False, {}

    def hint(self):
        return "Skip the first word; the answer is the word right after it."

    def solution(self):
        return [f"\\boxed{{{self.word}}}"]
