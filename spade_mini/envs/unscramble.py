"""Unscramble a word, with a letter revealed after each miss (language understanding)."""
import random
import re

MAX_TURNS = 25
WORDS = ["planet", "garden", "bridge", "winter", "orange", "castle", "flower", "market",
         "silver", "jungle", "pirate", "rabbit", "window", "school", "dragon", "forest"]


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class UnscrambleEnv:
    MAX_TRIES = 3

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.word = self.rng.choice(WORDS)
        letters = list(self.word)
        while "".join(letters) == self.word:
            self.rng.shuffle(letters)
        self.scrambled = "".join(letters)
        self.tries = 0
        self.done = False
        obs = (f"The letters '{self.scrambled}' are a shuffled common English word. Find the word. "
               f"You have {self.MAX_TRIES} tries; after each miss I reveal the next letter of the "
               "word. Answer with the word, e.g. \\boxed{kitten}.")
        return obs, {}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.tries += 1
        guess = unbox(action).lower()
        if guess == self.word:
            self.done = True
            return f"Correct! The word is {self.word}.", 1.0, True, False, {}
        if self.tries == self.MAX_TRIES:
            self.done = True
            return f"Out of tries. The word was {self.word}.", 0.0, True, False, {}
        start = self.word[:self.tries]
        obs = (f"'{guess}' is not it. The word starts with '{start}'. Letters: '{self.scrambled}'. "
               f"Tries left: {self.MAX_TRIES - self.tries}.")
        return obs, 0.0, False, False, {}

    def hint(self):
        return ("Use every letter exactly once; try common endings like -er, -le, -et or -en and "
                "common starts, and check your word letter by letter against the list.")

    def solution(self):
        return [f"\\boxed{{{self.word}}}"]
