import random


class CodeBreakerEnv:
    """Mastermind with a 3-digit code."""
    def reset(self, seed=None):
        self.code, self.left = "".join(random.Random(seed).choices("1234", k=3)), 8
        return "Find my 3-digit code (digits 1-4) in 8 guesses. Answer like \\boxed{123}.", {}

    def step(self, action):
        self.left -= 1
        guess = action.strip().removeprefix("\\boxed{").removesuffix("}")
        if guess == self.code:
            return "Correct!", 1.0, True, False, {}
        right = sum(a == b for a, b in zip(self.code, guess))
        near = sum(min(self.code.count(d), guess.count(d)) for d in "1234") - right
        return f"{right} right place, {near} wrong place. {self.left} guesses left.", 0.0, self.left == 0, False, {}

    def hint(self):
        return "Only guess codes that fit all feedback so far; open with 112 and 334."

    def solution(self):
        def score(code, guess):
            right = sum(a == b for a, b in zip(code, guess))
            return right, sum(min(code.count(d), guess.count(d)) for d in "1234") - right
        # Guess the first code that agrees with all feedback so far.
        candidates = [a + b + c for a in "1234" for b in "1234" for c in "1234"]
        moves = []
        while True:
            guess = candidates[0]
            moves.append(f"\\boxed{{{guess}}}")
            if guess == self.code:
                return moves
            feedback = score(self.code, guess)
            candidates = [c for c in candidates if score(c, guess) == feedback]
