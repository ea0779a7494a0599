"""Discover which switch controls which lamp by experimenting (causal inference)."""
import random
import re

MAX_TURNS = 25


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class SwitchLampsEnv:
    N, MAX_ACTIONS = 4, 8
    LAMPS = "ABCD"

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.wiring = list(self.LAMPS)  # wiring[i] is the lamp switch i+1 controls
        self.rng.shuffle(self.wiring)
        self.on = [False] * self.N  # switch positions
        self.actions = 0
        self.done = False
        obs = (f"There are {self.N} switches (1-{self.N}) and {self.N} lamps "
               f"({', '.join(self.LAMPS)}); each switch controls exactly one lamp, and all are off. "
               "Flip a switch with \\boxed{flip 2} to see which lamps are lit. When you know the "
               "wiring, answer the lamp of switch 1, 2, 3, 4 in order, e.g. \\boxed{answer BDAC}. "
               f"You have {self.MAX_ACTIONS} actions; a wrong answer ends the game.")
        return obs, {}

    def lit(self):
        lamps = sorted(self.wiring[i] for i in range(self.N) if self.on[i])
        return ", ".join(lamps) if lamps else "none"

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.actions += 1
        text = unbox(action).lower()
        flip = re.fullmatch(r"flip\s*(\d)", text)
        answer = re.fullmatch(r"answer\s*([a-d]{4})", text)
        if answer:
            self.done = True
            if answer.group(1).upper() == "".join(self.wiring):
                return "Correct wiring. You win!", 1.0, True, False, {}
            return f"Wrong: the wiring was {''.join(self.wiring)}.", 0.0, True, False, {}
        if flip and 1 <= int(flip.group(1)) <= self.N:
            switch = int(flip.group(1)) - 1
            self.on[switch] = not self.on[switch]
            obs = f"Switch {switch + 1} is now {'on' if self.on[switch] else 'off'}. Lit lamps: {self.lit()}."
        else:
            obs = "Use \\boxed{flip N} or \\boxed{answer XXXX}."
        left = self.MAX_ACTIONS - self.actions
        if left == 0:
            self.done = True
            return obs + " Out of actions.", 0.0, True, False, {}
        return obs + f" Actions left: {left}.", 0.0, False, self.actions >= MAX_TURNS, {}

    def hint(self):
        return ("Turn on one switch at a time and note which lamp lights up that was not lit "
                "before; three flips are enough, because the last lamp belongs to the last switch.")

    def solution(self):
        return ["\\boxed{flip 1}", "\\boxed{flip 2}", "\\boxed{flip 3}",
                f"\\boxed{{answer {''.join(self.wiring)}}}"]
