import random


class SmallerNumberEnv:
    """Say which of a few numbers is the smallest."""
    levels = 4

    def reset(self, seed=None, options=None):
        level = (options or {}).get("level", 0)
        numbers = [n for n in range(10 ** (level + 1), 10 ** (level + 2)) if n not in (45, 71)]
        self.pair = random.Random(seed).sample(numbers, 2 + level)
        shown = f"{', '.join(map(str, self.pair[:-1]))} or {self.pair[-1]}"
        return (f"Example: which is smaller, 71 or 45? \\boxed{{45}}\n"
                f"Now: which is smaller, {shown}?"), {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{min(self.pair)}}}"
        return ("Correct!" if won else f"Wrong: {min(self.pair)} is smaller."), float(won), True, False, {}

    def hint(self):
        return "Compare the highest digits first; only when they are equal look at the next ones."

    def solution(self):
        return [f"\\boxed{{{min(self.pair)}}}"]
