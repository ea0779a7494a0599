import random

MOVES = {"add": lambda n: n + 3, "double": lambda n: 2 * n, "subtract": lambda n: n - 1}


class PlanAheadEnv:
    """Reach a target in a few moves: say which move must come first."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, moves = random.Random(seed), 2 + (options or {}).get("level", 0)
        while True:
            start, plan = rng.randint(2, 9), [rng.choice(sorted(MOVES)) for _ in range(moves)]
            target = start
            for move in plan:
                target = MOVES[move](target)
            firsts = {m for m in MOVES if self._reaches(MOVES[m](start), target, moves - 1)}
            if firsts == {plan[0]}:  # exactly one first move reaches the target in time
                break
        self.first = plan[0]
        return (f"Example: start 4; moves add 3, double, subtract 1; reach 14 in 2 moves. First move? \\boxed{{add}}\n"
                f"Now: start {start}; moves add 3, double, subtract 1; reach {target} in {moves} moves. First move?"), {}

    def _reaches(self, value, target, left):
        if left == 0:
            return value == target
        return any(self._reaches(move(value), target, left - 1) for move in MOVES.values())

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.first}}}"
        return ("Correct!" if won else f"Wrong: first {self.first}."), float(won), True, False, {}

    def hint(self):
        return "Work backwards from the target: which number one move before it can the start reach?"

    def solution(self):
        return [f"\\boxed{{{self.first}}}"]
