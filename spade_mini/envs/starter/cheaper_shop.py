import random


class CheaperShopEnv:
    """A few sellers, each with a price: buy from the one who asks least."""
    levels = 4

    def reset(self, seed=None, options=None):
        rng, level = random.Random(seed), (options or {}).get("level", 0)
        sellers = rng.sample("Ann Bob Cal Dee Eve Max".split(), 3 + level)
        prices = rng.sample(range(2, 20 + 40 * level), 3 + level)
        self.best = sellers[prices.index(min(prices))]
        offers = ", ".join(f"{s} asks {p} coins" for s, p in zip(sellers, prices))
        return (f"Example: Joe asks 9 coins, Mia asks 4 coins. Cheapest? \\boxed{{Mia}}\n"
                f"Now: {offers}. Cheapest?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.best.lower()}}}"
        return ("Correct!" if won else f"Wrong: {self.best} is cheapest."), float(won), True, False, {}

    def hint(self):
        return "Compare the prices one by one and keep the seller who asks the least so far."

    def solution(self):
        return [f"\\boxed{{{self.best}}}"]
