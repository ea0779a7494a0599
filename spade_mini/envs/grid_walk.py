"""Walk a small grid with walls from a start cell to a goal cell (spatial reasoning)."""
import collections
import random
import re

MAX_TURNS = 25
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class GridWalkEnv:
    SIZE, WALLS = 5, 5

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        while True:  # redraw until the goal is reachable and not adjacent to the start
            cells = [(r, c) for r in range(self.SIZE) for c in range(self.SIZE)]
            self.rng.shuffle(cells)
            self.pos, self.goal = cells[0], cells[1]
            self.walls = set(cells[2:2 + self.WALLS])
            path = self.shortest_path()
            if path and len(path) >= 3:
                break
        self.budget = len(path) + 4
        self.turns = 0
        self.done = False
        obs = ("Move the robot R to the goal G on this grid; # is a wall, . is free. Rows count "
               f"down from the top. You have {self.budget} moves; walking into a wall or the edge "
               "wastes the move. Answer one move per turn: \\boxed{up}, \\boxed{down}, "
               "\\boxed{left} or \\boxed{right}.\n" + self.render())
        return obs, {}

    def render(self):
        def mark(cell):
            return ("R" if cell == self.pos else "G" if cell == self.goal
                    else "#" if cell in self.walls else ".")
        return "\n".join("".join(mark((r, c)) for c in range(self.SIZE)) for r in range(self.SIZE))

    def free(self, cell):
        return cell not in self.walls and 0 <= cell[0] < self.SIZE and 0 <= cell[1] < self.SIZE

    def shortest_path(self):
        """Breadth-first search from the robot to the goal; the list of move names."""
        queue, seen = collections.deque([(self.pos, [])]), {self.pos}
        while queue:
            (r, c), path = queue.popleft()
            if (r, c) == self.goal:
                return path
            for name, (dr, dc) in MOVES.items():
                cell = (r + dr, c + dc)
                if cell not in seen and self.free(cell):
                    seen.add(cell)
                    queue.append((cell, path + [name]))
        return None

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turns += 1
        move = unbox(action).lower()
        if move in MOVES:
            cell = (self.pos[0] + MOVES[move][0], self.pos[1] + MOVES[move][1])
            self.pos = cell if self.free(cell) else self.pos
        else:
            move = f"'{move}' (not a move)"
        if self.pos == self.goal:
            self.done = True
            return "You reached the goal!", 1.0, True, False, {}
        left = self.budget - self.turns
        obs = f"You tried {move}. Moves left: {left}.\n" + self.render()
        if left == 0:
            self.done = True
            return obs + "\nOut of moves.", 0.0, True, False, {}
        return obs, 0.0, False, self.turns >= MAX_TURNS, {}

    def hint(self):
        return ("Find the row and column of R and G first, then plan a route around the # walls "
                "before moving; each move changes the row or the column by one.")

    def solution(self):
        return [f"\\boxed{{{move}}}" for move in self.shortest_path()]
