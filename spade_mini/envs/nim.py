import random


class NimEnv:
    """Nim: take 1-3 stones a turn (1-6 at the top level); the last stone wins."""
    levels = 4

    def reset(self, seed=None, options=None):
        level = (options or {}).get("level", 0)
        self.group = 4 + level  # take 1 to group - 1 stones; facing a multiple of group loses
        self.stones = random.Random(seed).choice([n for n in range(9, 60 + 8 * level) if n % self.group])
        return (f"{self.stones} stones. Take 1-{self.group - 1} a turn, you first; "
                "take the last to win, like \\boxed{2}."), {}

    def step(self, action):
        take = action.strip().removeprefix("\\boxed{").removesuffix("}")
        if take not in map(str, range(1, self.group)) or int(take) > self.stones:
            return "Illegal move: you lose.", 0.0, True, False, {}
        self.stones -= int(take)
        if self.stones == 0:
            return "You took the last stone. You win!", 1.0, True, False, {}
        mine = self.stones % self.group or 1  # I leave a multiple of group when I can
        self.stones -= mine
        return f"I take {mine}; {self.stones} left.", 0.0, self.stones == 0, False, {}

    def hint(self):
        return f"Whoever faces a multiple of {self.group} stones loses, so always leave one."

    def solution(self):
        stones, moves = self.stones, []
        while True:
            moves.append(f"\\boxed{{{stones % self.group}}}")
            stones -= stones % self.group
            if stones == 0:
                return moves
            stones -= 1  # the opponent's reply to a multiple of group
