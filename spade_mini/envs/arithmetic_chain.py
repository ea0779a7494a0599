import random


class ArithmeticChainEnv:
    """Report the running value after each of four operations (two more, and larger, each level)."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, level = random.Random(seed), (options or {}).get("level", 0)
        self.value = rng.randint(2, 20)
        self.ops = [(rng.choice("+-*"), rng.randint(2, 5 + level)) for _ in range(4 + 2 * level)]
        return "Start with %d, then apply %s %d. Answer the new value like \\boxed{25}." % (self.value, *self.ops[0]), {}

    def step(self, action):
        op, n = self.ops.pop(0)
        self.value = self.value + n if op == "+" else self.value - n if op == "-" else self.value * n
        if action.strip() != f"\\boxed{{{self.value}}}":
            return f"Wrong: the value was {self.value}.", 0.0, True, False, {}
        if not self.ops:
            return "Correct, that was the last one!", 1.0, True, False, {}
        return "Correct. Now apply %s %d." % self.ops[0], 0.0, False, False, {}

    def hint(self):
        return "Apply only the newest operation to the value you last answered."

    def solution(self):
        value, moves = self.value, []
        for op, n in self.ops:
            value = value + n if op == "+" else value - n if op == "-" else value * n
            moves.append(f"\\boxed{{{value}}}")
        return moves
