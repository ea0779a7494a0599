import random


class NimEnv:
    """Nim: take 1-3 stones a turn; the last stone wins."""
    def reset(self, seed=None):
        self.stones = random.Random(seed).choice([n for n in range(9, 22) if n % 4])
        return f"{self.stones} stones. Take 1-3 a turn, you first; take the last to win, like \\boxed{{2}}.", {}

    def step(self, action):
        take = action.strip().removeprefix("\\boxed{").removesuffix("}")
        if take not in ("1", "2", "3") or int(take) > self.stones:
            return "Illegal move: you lose.", 0.0, True, False, {}
        self.stones -= int(take)
        if self.stones == 0:
            return "You took the last stone. You win!", 1.0, True, False, {}
        mine = self.stones % 4 or 1  # I leave a multiple of 4 when I can
        self.stones -= mine
        return f"I take {mine}; {self.stones} left.", 0.0, self.stones == 0, False, {}

    def hint(self):
        return "Whoever faces a multiple of 4 stones loses, so always leave one."

    def solution(self):
        stones, moves = self.stones, []
        while True:
            moves.append(f"\\boxed{{{stones % 4}}}")
            stones -= stones % 4
            if stones == 0:
                return moves
            stones -= 1  # the opponent's reply to a multiple of 4
