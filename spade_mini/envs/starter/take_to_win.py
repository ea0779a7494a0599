import random


class TakeToWinEnv:
    """Players take turns removing stones; say how many to take now so that you win."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        most = rng.randint(2, 4)
        stones = rng.choice([n for n in range(5, 40) if n % (most + 1) not in (0, 2)])  # 2: the example's
        self.take = stones % (most + 1)
        return (f"Example: 8 stones; take 1 or 2 a turn; whoever takes the last stone wins. "
                f"You go first: take? \\boxed{{2}}\n"
                f"Now: {stones} stones; take 1 to {most} a turn; whoever takes the last stone wins. "
                f"You go first: take?"), {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.take}}}"
        return ("Correct!" if won else f"Wrong: take {self.take}."), float(won), True, False, {}

    def hint(self):
        return "Leave your opponent a multiple of one more than the most a player may take."

    def solution(self):
        return [f"\\boxed{{{self.take}}}"]
