import random


class InsideWhatEnv:
    """An object is in a container that stands on furniture: name the container."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        thing, self.box, spot = [rng.choice(w.split()) for w in ("key ring coin pen", "bag cup jar tin", "table bed chair")]
        return (f"Example: the ball is in the net, which is on the wall. The ball is in? \\boxed{{net}}\n"
                f"Now: the {thing} is in the {self.box}, which is on the {spot}. The {thing} is in?"), {}

    def step(self, action):
        won = action.strip().lower() == f"\\boxed{{{self.box}}}"
        return ("Correct!" if won else f"Wrong: it is in the {self.box}."), float(won), True, False, {}

    def hint(self):
        return "Answer the thing it is inside, not the furniture that thing stands on."

    def solution(self):
        return [f"\\boxed{{{self.box}}}"]
