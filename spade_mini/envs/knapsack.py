import itertools
import random


class KnapsackEnv:
    """The most value a bag can hold: weight 10 and five items, more of both each level."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, level = random.Random(seed), (options or {}).get("level", 0)
        items = [(rng.randint(2, 9), rng.randint(1, 12)) for _ in range(5 + 2 * level)]  # (weight, value)
        limit = 10 + 5 * level
        subsets = [s for k in range(len(items) + 1) for s in itertools.combinations(items, k)]
        self.best = max(sum(v for _, v in s) for s in subsets if sum(w for w, _ in s) <= limit)
        self.tries = 3
        listing = ", ".join(f"{w}/{v}" for w, v in items)
        return f"Items as weight/value: {listing}. Most total value within weight {limit}? Like \\boxed{{17}}; 3 tries.", {}

    def step(self, action):
        self.tries -= 1
        if action.strip() == f"\\boxed{{{self.best}}}":
            return "Optimal!", 1.0, True, False, {}
        return "Not the best value.", 0.0, self.tries == 0, False, {}

    def hint(self):
        return "Prefer items with a high value per weight; compare every pair and triple."

    def solution(self):
        return [f"\\boxed{{{self.best}}}"]
