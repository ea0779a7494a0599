"""Continue a number sequence for three terms, one per turn (pattern recognition)."""
import random
import re

MAX_TURNS = 25


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class SequenceNextEnv:
    SHOWN, ASKED = 5, 3

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.kind = self.rng.choice(["add", "multiply", "alternate", "square"])
        a, d = self.rng.randint(1, 9), self.rng.randint(2, 6)
        terms, n = [], self.SHOWN + self.ASKED
        for i in range(n):
            if self.kind == "add":
                terms.append(a + d * i)
            elif self.kind == "multiply":
                terms.append(a * 2 ** i)
            elif self.kind == "alternate":  # add d, then add 1, then add d, ...
                terms.append(a + (i + 1) // 2 * d + i // 2)
            else:
                terms.append((i + 1) ** 2 + a)
        self.terms = terms
        self.found = 0
        self.done = False
        shown = ", ".join(map(str, terms[:self.SHOWN]))
        obs = (f"Here is the start of a number sequence: {shown}, ... Give the next "
               f"{self.ASKED} terms, one term per turn; a wrong term ends the game. "
               "Answer with one number, e.g. \\boxed{17}.")
        return obs, {}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        text = unbox(action)
        expected = self.terms[self.SHOWN + self.found]
        if text != str(expected):
            self.done = True
            return f"Wrong: the next term was {expected}.", 0.0, True, False, {}
        self.found += 1
        if self.found == self.ASKED:
            self.done = True
            return "Correct! You continued the sequence.", 1.0, True, False, {}
        known = ", ".join(map(str, self.terms[:self.SHOWN + self.found]))
        return f"Correct. The sequence so far: {known}, ... Next term?", 0.0, False, False, {}

    def hint(self):
        rules = {"add": "the difference between neighbours is constant",
                 "multiply": "each term is a fixed multiple of the one before",
                 "alternate": "the differences alternate between two values",
                 "square": "each term is a square number plus a constant"}
        return f"Look at the differences between neighbouring terms: {rules[self.kind]}."

    def solution(self):
        return [f"\\boxed{{{t}}}" for t in self.terms[self.SHOWN:]]
