import random


class CopyCodeEnv:
    """Read a locker code out of a note that also gives a room number."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.code = str(rng.choice([n for n in range(1000, 10000) if n != 5050]))
        parts = [f"room {rng.randint(10, 99)}", f"locker code {self.code}"]
        rng.shuffle(parts)
        return (f"Example: room 12, locker code 5050. Locker code? \\boxed{{5050}}\n"
                f"Now: {parts[0]}, {parts[1]}. Locker code?"), {}

    def step(self, action):
        won = action.strip() == f"\\boxed{{{self.code}}}"
        return ("Correct!" if won else f"Wrong: the code was {self.code}."), float(won), True, False, {}

    def hint(self):
        return "The locker code is the four-digit number; the two-digit number is the room."

    def solution(self):
        return [f"\\boxed{{{self.code}}}"]
