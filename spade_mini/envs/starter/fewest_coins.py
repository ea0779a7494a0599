import random


class FewestCoinsEnv:
    """Coins are worth 1 and a larger value; give the fewest coins that make an amount."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.coins = 3  # the worked example's answer: drawn again
        while self.coins == 3:
            big, amount = rng.randint(3, 9), rng.randint(10, 40)
            self.coins = amount // big + amount % big
        return (f"Example: coins are worth 1 and 5. The fewest coins that make 7? \\boxed{{3}}\n"
                f"Now: coins are worth 1 and {big}. The fewest coins that make {amount}?"), {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.coins}}}"
        return ("Correct!" if won else f"Wrong: it is {self.coins}."), float(won), True, False, {}

    def hint(self):
        return "Use as many of the larger coins as fit, then make up the rest with coins of 1."

    def solution(self):
        return [f"\\boxed{{{self.coins}}}"]
