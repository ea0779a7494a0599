import random


class SwitchLampsEnv:
    """Flip switches to find out which lamp each one lights."""
    def reset(self, seed=None):
        self.wiring = "".join(random.Random(seed).sample("ABCD", 4))  # lamps of switches 1-4
        self.lit, self.left = set(), 8
        return ("Switches 1-4 each light one lamp A-D. Flip switch 2 with \\boxed{2}; in 8 actions, "
                "answer the lamps of switches 1-4 like \\boxed{BDAC}."), {}

    def step(self, action):
        self.left -= 1
        text = action.strip().removeprefix("\\boxed{").removesuffix("}")
        if text in ("1", "2", "3", "4"):
            self.lit ^= {self.wiring[int(text) - 1]}
            lit = "".join(sorted(self.lit)) or "none"
            return f"Lit lamps: {lit}. {self.left} actions left.", 0.0, self.left == 0, False, {}
        won = text == self.wiring
        return ("Correct!" if won else "Wrong wiring."), float(won), True, False, {}

    def hint(self):
        return "Turn on one switch at a time and note which new lamp lights."

    def solution(self):
        return ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}", f"\\boxed{{{self.wiring}}}"]
