"""Track position and heading through turn-and-walk instructions (spatial reasoning)."""
import random
import re

MAX_TURNS = 25
HEADINGS = ["north", "east", "south", "west"]
STEPS = {"north": (0, 1), "east": (1, 0), "south": (0, -1), "west": (-1, 0)}


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class CompassWalkEnv:
    LEGS = 3

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        heading, x, y = 0, 0, 0
        self.legs, self.answers = [], []
        for _ in range(self.LEGS):
            turn = self.rng.choice(["left", "right", "around"])
            heading = (heading + {"left": -1, "right": 1, "around": 2}[turn]) % 4
            n = self.rng.randint(1, 5)
            dx, dy = STEPS[HEADINGS[heading]]
            x, y = x + n * dx, y + n * dy
            self.legs.append(f"turn {turn}, then walk {n} steps")
            self.answers.append(f"{x},{y}")
        self.index = 0
        self.done = False
        obs = ("You stand at (0,0) facing north; x grows to the east, y grows to the north. After "
               "each instruction, answer your position as x,y, e.g. \\boxed{-2,3}. A wrong "
               f"position ends the game. Instruction 1: {self.legs[0]}.")
        return obs, {}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        text = re.sub(r"[\s()]", "", unbox(action))
        expected = self.answers[self.index]
        if text != expected:
            self.done = True
            return f"Wrong: you were at ({expected}).", 0.0, True, False, {}
        self.index += 1
        if self.index == self.LEGS:
            self.done = True
            return f"Correct! You end at ({expected}).", 1.0, True, False, {}
        obs = f"Correct. Instruction {self.index + 1}: {self.legs[self.index]}."
        return obs, 0.0, False, False, {}

    def hint(self):
        return ("Keep your heading and position written down: turning left from north faces west, "
                "right faces east, around faces south; walking east adds to x, north adds to y.")

    def solution(self):
        return [f"\\boxed{{{a}}}" for a in self.answers]
