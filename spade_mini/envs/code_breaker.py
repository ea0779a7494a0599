"""Mastermind with three digits: deduce a hidden code from exact/misplaced counts."""
import itertools
import random
import re

MAX_TURNS = 25


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


def score(code, guess):
    """(digits in the right place, right digits in the wrong place)."""
    exact = sum(c == g for c, g in zip(code, guess))
    common = sum(min(code.count(d), guess.count(d)) for d in set(guess))
    return exact, common - exact


class CodeBreakerEnv:
    DIGITS, LENGTH, MAX_GUESSES = "1234", 3, 8

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.code = "".join(self.rng.choice(self.DIGITS) for _ in range(self.LENGTH))
        self.guesses = 0
        self.done = False
        obs = (f"Break a secret code of {self.LENGTH} digits, each one of {', '.join(self.DIGITS)} "
               f"(digits may repeat). You have {self.MAX_GUESSES} guesses. After each guess I "
               "report how many digits are correct and in the right place, and how many are "
               "correct but in the wrong place. Answer with the digits, e.g. \\boxed{123}.")
        return obs, {}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.guesses += 1
        guess = re.sub(r"[^0-9]", "", unbox(action))
        left = self.MAX_GUESSES - self.guesses
        if guess == self.code:
            self.done = True
            return f"Correct! The code was {self.code}.", 1.0, True, False, {}
        if len(guess) != self.LENGTH or any(d not in self.DIGITS for d in guess):
            obs = f"A guess must be {self.LENGTH} digits from {self.DIGITS}. Guesses left: {left}."
        else:
            exact, near = score(self.code, guess)
            obs = f"{guess}: {exact} in the right place, {near} in the wrong place. Guesses left: {left}."
        if left == 0:
            self.done = True
            return obs + f" Out of guesses; the code was {self.code}.", 0.0, True, False, {}
        return obs, 0.0, False, self.guesses >= MAX_TURNS, {}

    def hint(self):
        return ("Keep every code that agrees with all the feedback so far and guess one of them; "
                "start with guesses like 112 and 334 to learn which digits occur.")

    def solution(self):
        # Play the consistent-candidate strategy against the hidden code.
        candidates = ["".join(p) for p in itertools.product(self.DIGITS, repeat=self.LENGTH)]
        moves = []
        while True:
            guess = candidates[0]
            moves.append(f"\\boxed{{{guess}}}")
            if guess == self.code:
                return moves
            feedback = score(self.code, guess)
            candidates = [c for c in candidates if score(c, guess) == feedback]
