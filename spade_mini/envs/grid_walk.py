import random


class GridWalkEnv:
    """Reach G through gaps in two walls; each level adds a column."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, width = random.Random(seed), 5 + (options or {}).get("level", 0)
        row = "." * width + "\n"
        self.grid = list("R" + row[1:] + ("#" * width + "\n" + row) * 2)[:-2] + ["G"]
        self.down, self.left = len(row), min(4 * width, 25)
        for wall in (self.down, 3 * self.down):
            self.grid[wall + rng.randrange(width)] = "."
        return f"Reach G in {self.left} moves: \\boxed{{down}}, left or right.\n" + "".join(self.grid), {}

    def step(self, action):
        self.left -= 1
        pos = self.grid.index("R")
        new = pos + {"\\boxed{down}": self.down, "\\boxed{left}": -1, "\\boxed{right}": 1}.get(action.strip(), 0)
        if new in range(len(self.grid)) and self.grid[new] in ".G":
            self.grid[pos], self.grid[new] = ".", "R"
        won = "G" not in self.grid
        return "".join(self.grid), float(won), won or self.left == 0, False, {}

    def hint(self):
        return "Line up with a wall's gap before you step through it."

    def solution(self):
        # Walk to each gap's column (last to G's), stepping down twice in between.
        moves, col = [], 0
        for target in [self.grid.index(".", wall) - wall for wall in (self.down, 3 * self.down)] + [self.down - 2]:
            moves += ["right"] * (target - col) + ["left"] * (col - target) + ["down", "down"]
            col = target
        return [f"\\boxed{{{move}}}" for move in moves[:-2]]
