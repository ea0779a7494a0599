"""Take-away game (Nim with one pile) against a fixed opponent: take the last stone to win."""
import random
import re

MAX_TURNS = 25


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class NimEnv:
    MAX_TAKE = 3

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        # Never a multiple of 4, so the first player can always force a win.
        self.stones = self.rng.choice([n for n in range(9, 22) if n % 4])
        self.turns = 0
        self.done = False
        obs = (f"There are {self.stones} stones. We take turns; you go first. On your turn take 1, "
               f"2 or {self.MAX_TAKE} stones. Whoever takes the last stone wins. Answer with how "
               "many stones you take, e.g. \\boxed{2}.")
        return obs, {}

    def opponent_take(self):
        # The opponent answers well when it can and otherwise takes one stone.
        return self.stones % 4 or 1

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turns += 1
        text = unbox(action)
        if text not in ("1", "2", "3") or int(text) > self.stones:
            self.done = True
            return f"'{text}' is not a legal move, so you lose.", 0.0, True, False, {}
        self.stones -= int(text)
        if self.stones == 0:
            self.done = True
            return "You took the last stone. You win!", 1.0, True, False, {}
        take = self.opponent_take()
        self.stones -= take
        if self.stones == 0:
            self.done = True
            return f"I take {take} and the last stone. You lose.", 0.0, True, False, {}
        obs = f"You took {text}. I take {take}. {self.stones} stones are left. Your move."
        return obs, 0.0, False, self.turns >= MAX_TURNS, {}

    def hint(self):
        return ("Positions with a multiple of 4 stones lose for the player to move: always take "
                "enough stones to leave your opponent a multiple of 4.")

    def solution(self):
        stones, moves = self.stones, []
        while True:
            take = stones % 4
            moves.append(f"\\boxed{{{take}}}")
            stones -= take
            if stones == 0:
                return moves
            stones -= stones % 4 or 1
