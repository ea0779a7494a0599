import random


class GridWalkEnv:
    """Reach G through gaps in two walls."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.grid, self.left = list("R....\n#####\n.....\n#####\n....G"), 20  # cell = 6 * row + col
        for wall in (6, 18):
            self.grid[wall + rng.randrange(5)] = "."
        return "Reach G in 20 moves: \\boxed{down}, left or right.\n" + "".join(self.grid), {}

    def step(self, action):
        self.left -= 1
        pos = self.grid.index("R")
        new = pos + {"\\boxed{down}": 6, "\\boxed{left}": -1, "\\boxed{right}": 1}.get(action.strip(), 0)
        if new in range(29) and self.grid[new] in ".G":
            self.grid[pos], self.grid[new] = ".", "R"
        won = "G" not in self.grid
        return "".join(self.grid), float(won), won or self.left == 0, False, {}

    def hint(self):
        return "Line up with a wall's gap before you step through it."

    def solution(self):
        # Walk sideways to each gap's column (and last to G's), stepping down twice in between.
        moves, col = [], 0
        for target in (self.grid.index(".", 6) - 6, self.grid.index(".", 18) - 18, 4):
            moves += ["right"] * (target - col) + ["left"] * (col - target) + ["down", "down"]
            col = target
        return [f"\\boxed{{{move}}}" for move in moves[:-2]]
