"""Pick items of greatest total value within a weight limit (optimization)."""
import itertools
import random
import re

MAX_TURNS = 25


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class KnapsackEnv:
    ITEMS, MAX_TRIES = 5, 3

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.weights = [self.rng.randint(1, 9) for _ in range(self.ITEMS)]
        self.values = [self.rng.randint(1, 12) for _ in range(self.ITEMS)]
        self.capacity = sum(self.weights) // 2
        self.best = max(self.value(s) for s in self.subsets() if self.weight(s) <= self.capacity)
        self.tries = 0
        self.done = False
        table = "\n".join(f"item {i + 1}: weight {w}, value {v}"
                          for i, (w, v) in enumerate(zip(self.weights, self.values)))
        obs = (f"Choose items with total weight at most {self.capacity} and the largest possible "
               f"total value. You have {self.MAX_TRIES} tries; I tell you the value of each valid "
               "choice. Answer with item numbers separated by commas, e.g. \\boxed{1,3}.\n" + table)
        return obs, {}

    def subsets(self):
        items = range(1, self.ITEMS + 1)
        return [set(c) for k in range(self.ITEMS + 1) for c in itertools.combinations(items, k)]

    def weight(self, chosen):
        return sum(self.weights[i - 1] for i in chosen)

    def value(self, chosen):
        return sum(self.values[i - 1] for i in chosen)

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.tries += 1
        chosen = {int(n) for n in re.findall(r"\d+", unbox(action))}
        if not chosen or not chosen <= set(range(1, self.ITEMS + 1)):
            obs = f"Name items between 1 and {self.ITEMS}."
        elif self.weight(chosen) > self.capacity:
            obs = f"Too heavy: weight {self.weight(chosen)} is over {self.capacity}."
        elif self.value(chosen) == self.best:
            self.done = True
            return f"Optimal! Total value {self.best}.", 1.0, True, False, {}
        else:
            obs = f"Valid, total value {self.value(chosen)}, but a better choice exists."
        left = self.MAX_TRIES - self.tries
        if left == 0:
            self.done = True
            return obs + " Out of tries.", 0.0, True, False, {}
        return obs + f" Tries left: {left}.", 0.0, False, self.tries >= MAX_TURNS, {}

    def hint(self):
        return ("With only five items you can check combinations: prefer items with a high value "
                "per unit of weight, then see whether swapping one item raises the total.")

    def solution(self):
        best = next(s for s in self.subsets()
                    if self.weight(s) <= self.capacity and self.value(s) == self.best)
        return ["\\boxed{" + ",".join(map(str, sorted(best))) + "}"]
