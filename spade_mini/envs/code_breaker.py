import random


class CodeBreakerEnv:
    """Mastermind with a 3-digit code."""
    levels = 4

    def reset(self, seed=None, options=None):
        self.digits = "1234567"[:4 + (options or {}).get("level", 0)]
        self.code, self.left = "".join(random.Random(seed).choices(self.digits, k=3)), 4 + len(self.digits)
        return f"Find my 3-digit code (digits 1-{self.digits[-1]}) in {self.left} guesses. Answer like \\boxed{{123}}.", {}

    def step(self, action):
        self.left -= 1
        guess = action.strip().removeprefix("\\boxed{").removesuffix("}")
        if guess == self.code:
            return "Correct!", 1.0, True, False, {}
        right, near = self.score(self.code, guess)
        return f"{right} right place, {near} wrong place. {self.left} guesses left.", 0.0, self.left == 0, False, {}

    def score(self, code, guess):
        right = sum(a == b for a, b in zip(code, guess))
        return right, sum(min(code.count(d), guess.count(d)) for d in self.digits) - right

    def hint(self):
        return "Only guess codes that fit all feedback so far; open with 112 and 334."

    def solution(self):
        # Guess the first code that agrees with all feedback so far.
        digits, moves = self.digits, []
        candidates = [a + b + c for a in digits for b in digits for c in digits]
        while True:
            guess = candidates[0]
            moves.append(f"\\boxed{{{guess}}}")
            if guess == self.code:
                return moves
            feedback = self.score(self.code, guess)
            candidates = [c for c in candidates if self.score(c, guess) == feedback]
