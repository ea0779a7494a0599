"""Find the one heavier coin with a balance scale in few weighings (logical deduction)."""
import random
import re

MAX_TURNS = 25


def unbox(action):
    """The text inside \\boxed{...}, or the raw action when there is no box."""
    match = re.search(r"\\boxed\{(.*)\}", action, re.S)
    return (match.group(1) if match else action).strip()


class HeavyCoinEnv:
    COINS, MAX_WEIGHINGS = 9, 2

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.heavy = self.rng.randint(1, self.COINS)
        self.weighings = 0
        self.turns = 0
        self.done = False
        obs = (f"There are {self.COINS} coins numbered 1-{self.COINS}; exactly one is heavier. "
               "Weigh two groups with \\boxed{weigh 1,2,3 vs 4,5,6} and I tell you which side is "
               f"heavier. You may weigh {self.MAX_WEIGHINGS} times. Then name the heavy coin with "
               "\\boxed{answer 7}. A wrong answer ends the game.")
        return obs, {}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turns += 1
        text = unbox(action).lower()
        weigh = re.fullmatch(r"weigh\s*([\d,\s]+?)\s*vs\s*([\d,\s]+)", text)
        answer = re.fullmatch(r"answer\s*(\d+)", text)
        if answer:
            self.done = True
            if int(answer.group(1)) == self.heavy:
                return f"Correct, coin {self.heavy} is the heavy one!", 1.0, True, False, {}
            return f"Wrong: coin {self.heavy} was heavy.", 0.0, True, False, {}
        if not weigh:
            obs = "Use \\boxed{weigh 1,2 vs 3,4} or \\boxed{answer N}."
        elif self.weighings >= self.MAX_WEIGHINGS:
            obs = "No weighings left; give your answer."
        else:
            left = {int(n) for n in re.findall(r"\d+", weigh.group(1))}
            right = {int(n) for n in re.findall(r"\d+", weigh.group(2))}
            self.weighings += 1
            side = "left" if self.heavy in left else "right" if self.heavy in right else ""
            obs = f"The {side} side is heavier." if side else "The scale balances."
            obs += f" Weighings left: {self.MAX_WEIGHINGS - self.weighings}."
        return obs, 0.0, False, self.turns >= MAX_TURNS, {}

    def hint(self):
        return ("Split the coins into three equal groups and weigh two of them: the heavy coin is "
                "in the heavier group, or in the third group if they balance. Repeat on that group.")

    def solution(self):
        group = (self.heavy - 1) // 3  # which block of three holds the heavy coin
        first = [str(c) for c in range(3 * group + 1, 3 * group + 4)]
        return ["\\boxed{weigh 1,2,3 vs 4,5,6}", f"\\boxed{{weigh {first[0]} vs {first[1]}}}",
                f"\\boxed{{answer {self.heavy}}}"]
