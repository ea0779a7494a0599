"""Keep a running total through a chain of arithmetic operations (mathematical reasoning)."""
import random
import re

MAX_TURNS = 25


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class ArithmeticChainEnv:
    STEPS = 4

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        value = self.rng.randint(2, 20)
        self.start, self.ops, self.values = value, [], []
        for _ in range(self.STEPS):
            op = self.rng.choice(["add", "subtract", "multiply"])
            n = self.rng.randint(2, 4) if op == "multiply" else self.rng.randint(3, 15)
            value = value + n if op == "add" else value - n if op == "subtract" else value * n
            self.ops.append((op, n))
            self.values.append(value)
        self.index = 0
        self.done = False
        obs = (f"Start with the number {self.start}. I will give you {self.STEPS} operations one "
               "at a time; after each, answer the new value. A wrong value ends the game. "
               f"Operation 1: {self.describe(0)}. Answer with a number, e.g. \\boxed{{25}}.")
        return obs, {}

    def describe(self, i):
        op, n = self.ops[i]
        return {"add": f"add {n}", "subtract": f"subtract {n}", "multiply": f"multiply by {n}"}[op]

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        text = unbox(action).replace(" ", "")
        expected = self.values[self.index]
        if text != str(expected):
            self.done = True
            return f"Wrong: the value was {expected}.", 0.0, True, False, {}
        self.index += 1
        if self.index == self.STEPS:
            self.done = True
            return f"Correct! The final value is {expected}.", 1.0, True, False, {}
        obs = (f"Correct, the value is {expected}. Operation {self.index + 1}: "
               f"{self.describe(self.index)}. What is the new value?")
        return obs, 0.0, False, False, {}

    def hint(self):
        return ("Write down the current value, apply only the newest operation to it, and check "
                "the result once more before answering with the number alone.")

    def solution(self):
        return [f"\\boxed{{{v}}}" for v in self.values]
