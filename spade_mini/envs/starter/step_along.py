import random


class StepAlongEnv:
    """Squares in a row are numbered; move some squares left or right and say where you are."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.square = 5  # the worked example's answer: drawn again
        while self.square == 5:
            self.start, moves, way = rng.randint(5, 15), rng.randint(1, 4), rng.choice(["left", "right"])
            self.square = self.start + (moves if way == "right" else -moves)
        return (f"Example: on square 3, you move 2 squares right. Which square now? \\boxed{{5}}\n"
                f"Now: squares are numbered 1 to 20 from left to right. On square {self.start}, you move "
                f"{moves} squares {way}. Which square now?"), {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.square}}}"
        return ("Correct!" if won else f"Wrong: it is {self.square}."), float(won), True, False, {}

    def hint(self):
        return "Right adds to the number of the square; left takes away from it."

    def solution(self):
        return [f"\\boxed{{{self.square}}}"]
