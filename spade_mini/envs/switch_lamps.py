import random


class SwitchLampsEnv:
    """Flip switches to find out which lamp each one lights; each level adds a switch."""
    levels = 4

    def reset(self, seed=None, options=None):
        n = 4 + (options or {}).get("level", 0)
        lamps = "ABCDEFG"[:n]
        self.wiring = "".join(random.Random(seed).sample(lamps, n))  # lamps of switches 1-n
        self.lit, self.left = set(), 2 * n
        return (f"Switches 1-{n} each light one lamp A-{lamps[-1]}. Flip switch 2 with \\boxed{{2}}; in {self.left} actions, "
                f"answer the lamps of switches 1-{n} like \\boxed{{{'BDACFEG'[:n]}}}."), {}

    def step(self, action):
        self.left -= 1
        text = action.strip().removeprefix("\\boxed{").removesuffix("}")
        if text in map(str, range(1, len(self.wiring) + 1)):
            self.lit ^= {self.wiring[int(text) - 1]}
            lit = "".join(sorted(self.lit)) or "none"
            return f"Lit lamps: {lit}. {self.left} actions left.", 0.0, self.left == 0, False, {}
        won = text == self.wiring
        return ("Correct!" if won else "Wrong wiring."), float(won), True, False, {}

    def hint(self):
        return "Turn on one switch at a time and note which new lamp lights."

    def solution(self):
        return [f"\\boxed{{{switch}}}" for switch in range(1, len(self.wiring))] + [f"\\boxed{{{self.wiring}}}"]
