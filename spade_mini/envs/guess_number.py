"""Guess a hidden number from higher/lower feedback (logical deduction by halving)."""
import random
import re

MAX_TURNS = 25


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class GuessNumberEnv:
    LOW, HIGH, MAX_GUESSES = 1, 64, 7

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.secret = self.rng.randint(self.LOW, self.HIGH)
        self.guesses = 0
        self.done = False
        obs = (f"I am thinking of a whole number from {self.LOW} to {self.HIGH}. You have "
               f"{self.MAX_GUESSES} guesses. After each guess I tell you whether my number is "
               "higher or lower. Answer with one number per turn, e.g. \\boxed{32}.")
        return obs, {}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.guesses += 1
        text = unbox(action)
        left = self.MAX_GUESSES - self.guesses
        if not re.fullmatch(r"-?\d+", text):
            obs = f"'{text}' is not a whole number. Guesses left: {left}."
        elif int(text) == self.secret:
            self.done = True
            return f"Correct! The number was {self.secret}.", 1.0, True, False, {}
        else:
            word = "higher" if self.secret > int(text) else "lower"
            obs = f"My number is {word} than {text}. Guesses left: {left}."
        if left == 0:
            self.done = True
            return obs + f" Out of guesses; the number was {self.secret}.", 0.0, True, False, {}
        return obs, 0.0, False, self.guesses >= MAX_TURNS, {}

    def hint(self):
        return ("Keep track of the smallest and largest numbers still possible and always guess "
                "the middle of that range; each answer halves what is left.")

    def solution(self):
        low, high, moves = self.LOW, self.HIGH, []
        while True:
            mid = (low + high) // 2
            moves.append(f"\\boxed{{{mid}}}")
            if mid == self.secret:
                return moves
            low, high = (mid + 1, high) if mid < self.secret else (low, mid - 1)
