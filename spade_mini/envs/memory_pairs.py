"""Memorise word-number pairs, then answer questions about them later (memory recall)."""
import random
import re

MAX_TURNS = 25
WORDS = ["apple", "river", "candle", "tiger", "window", "garden", "pencil", "cloud",
         "silver", "rocket", "basket", "mirror"]


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class MemoryPairsEnv:
    PAIRS, QUESTIONS = 5, 3

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        words = self.rng.sample(WORDS, self.PAIRS)
        self.pairs = {w: self.rng.randint(10, 99) for w in words}
        self.asked = self.rng.sample(words, self.QUESTIONS)
        self.index = -1  # -1: the pairs are on show, no question asked yet
        self.done = False
        shown = ", ".join(f"{w} = {n}" for w, n in self.pairs.items())
        obs = (f"Memorise these pairs: {shown}. They will not be shown again. Reply \\boxed{{ready}} "
               f"and I will ask {self.QUESTIONS} questions, one per turn; answer each with the "
               "number, e.g. \\boxed{42}. A wrong answer ends the game.")
        return obs, {}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        text = unbox(action).lower()
        if self.index >= 0:
            expected = self.pairs[self.asked[self.index]]
            if text != str(expected):
                self.done = True
                return f"Wrong: {self.asked[self.index]} was {expected}.", 0.0, True, False, {}
        elif text != "ready":
            self.done = True
            return "You had to reply \\boxed{ready} first. Game over.", 0.0, True, False, {}
        self.index += 1
        if self.index == self.QUESTIONS:
            self.done = True
            return "All correct. You win!", 1.0, True, False, {}
        prefix = "Correct. " if self.index else "The pairs are hidden now. "
        return prefix + f"Which number was paired with '{self.asked[self.index]}'?", 0.0, False, False, {}

    def hint(self):
        return ("Before replying ready, restate the pairs to yourself in order; for each question "
                "look back at that list in your earlier messages and answer the number only.")

    def solution(self):
        return ["\\boxed{ready}"] + [f"\\boxed{{{self.pairs[w]}}}" for w in self.asked]
