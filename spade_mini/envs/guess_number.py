import random


class GuessNumberEnv:
    """Guess a number from 1 to 64 with higher/lower feedback."""
    def reset(self, seed=None):
        self.secret, self.left = random.Random(seed).randint(1, 64), 7
        return "Guess my number from 1 to 64 in 7 tries. Answer like \\boxed{32}.", {}

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
        low, high, moves = 1, 64, []
        while True:
            mid = (low + high) // 2
            moves.append(f"\\boxed{{{mid}}}")
            if mid == self.secret:
                return moves
            low, high = (mid + 1, high) if mid < self.secret else (low, mid - 1)
