import random


class GuessNumberEnv:
    """Guess a number with higher/lower feedback; each level doubles the range."""
    levels = 4

    def reset(self, seed=None, options=None):
        level = (options or {}).get("level", 0)
        self.high, self.left = 64 * 2 ** level, 7 + level
        self.secret = random.Random(seed).randint(1, self.high)
        return f"Guess my number from 1 to {self.high} in {self.left} tries. Answer like \\boxed{{32}}.", {}

    def step(self, action):
        self.left -= 1
        guess = action.strip().removeprefix("\\boxed{").removesuffix("}")
        if not guess.isdecimal():
            return f"Answer a whole number. {self.left} tries left.", 0.0, self.left == 0, False, {}
        if int(guess) == self.secret:
            return "Correct!", 1.0, True, False, {}
        word = "higher" if int(guess) < self.secret else "lower"
        return f"My number is {word} than {guess}. {self.left} tries left.", 0.0, self.left == 0, False, {}

    def hint(self):
        return "Always guess the middle of the range still possible; each answer halves it."

    def solution(self):
        low, high, moves = 1, self.high, []
        while True:
            mid = (low + high) // 2
            moves.append(f"\\boxed{{{mid}}}")
            if mid == self.secret:
                return moves
            low, high = (mid + 1, high) if mid < self.secret else (low, mid - 1)
