import random

SENTENCES = ["The old dog sleeps by the warm fire", "We walked home along the river",
             "My sister plays the piano every evening", "A small bird sat on the fence",
             "The children built a castle of sand", "Snow fell quietly over the village"]


class LastWordEnv:
    """Say the last word of a sentence."""
    def reset(self, seed=None):
        sentence = random.Random(seed).choice(SENTENCES)
        self.word = sentence.split()[-1]
        return (f'Example: the last word of "I like tea." is \\boxed{{tea}}\n'
                f'Now: the last word of "{sentence}."?'), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.word}}}"
        return ("Correct!" if won else f"Wrong: it is {self.word}."), float(won), True, False, {}

    def hint(self):
        return f"The last word comes just before the full stop and starts with '{self.word[0]}'."

    def solution(self):
        return [f"\\boxed{{{self.word}}}"]
