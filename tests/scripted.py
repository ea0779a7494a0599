"""The tests' scripts for the one set of `Roles` doubles (spade_mini/policy/scripted.py, the
scripted designer and the scripted player): the parity games that tests/scripted_train.py runs
train.py with (`parity_roles`), a designer whose games the agent, answering a random bit, wins
about half the time, so every game is informative and joins the pool. Both draw from torch's
generator, which a checkpoint restores."""
import re

import torch

from spade_mini.policy import ScriptedDesigner, ScriptedPlayer  # noqa: F401  (the tests import them from here too)

PARITY = '''import random

class ParityEnv:
    """Say whether the number shown is even (0) or odd (1)."""
    def reset(self, seed=None):
        self.n = random.Random(seed).randint(LOW, LOW + 999)
        return "Is %d even or odd? Answer \\\\boxed{0} for even, \\\\boxed{1} for odd." % self.n, {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%d}" % (self.n % 2)
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def hint(self):
        return "Look at the last digit."

    def solution(self):
        return ["\\\\boxed{%d}" % (self.n % 2)]
'''


# A game with 4 levels for the pool's level moves: the last digit of a number (ten answers, so no
# constant action wins every validation seed); a level only moves the number's range. The scripted
# agent knows the digit and gives it on a coin flip, so every level stays at one half and a small
# --pool-window makes the pool raise and lower levels often.
LEVEL_GAME = '''import random

class LastDigitEnv:
    """Say the last digit of the number shown."""
    levels = 4

    def reset(self, seed=None, options=None):
        level = (options or {}).get("level", 0)
        self.n = random.Random(seed).randint(LOW + 10**7 * level, LOW + 10**7 * level + 999)
        return "What is the last digit of %d? Answer with the digit in \\\\boxed{}." % self.n, {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%d}" % (self.n % 10)
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def hint(self):
        return "Read the number's units."

    def solution(self):
        return ["\\\\boxed{%d}" % (self.n % 10)]
'''


def parity_source(low: int, levels: bool = False) -> str:
    return (LEVEL_GAME if levels else PARITY).replace("LOW", str(low))


def parity_roles(policy, levels: bool = False) -> ScriptedPlayer:
    """Designer prompts get parity games (each with its own number range from torch's generator,
    so none is a duplicate; LEVEL_GAME games with `levels`); the agent answers a random bit (with
    levels: the last digit on heads, the next digit on tails)."""
    def design(chat):
        return f"```python\n{parity_source(int(torch.randint(10, 10**6, (1,))), levels)}```"

    def act(chat):
        bit = int(torch.randint(0, 2, (1,)))
        asked = re.findall(r"last digit of (\d+)", chat[-1]["content"])  # the pool's examples ask other things
        if levels and asked:
            return "\\boxed{%d}" % ((int(asked[-1]) % 10 + 1 - bit) % 10)
        return "\\boxed{%d}" % bit
    return ScriptedPlayer(policy, act, design, model_when_greedy=True)


def invalid_first(policy, invalid: int) -> ScriptedPlayer:
    """Parity roles whose designer's first `invalid` replies hold no environment."""
    roles, left = parity_roles(policy), [invalid]
    parity = roles.replies

    def design(chat):
        if left[0] > 0:
            left[0] -= 1
            return "No code here, sorry."
        return parity(chat)
    roles.replies = design
    return roles



def parts(record) -> tuple:
    """An iteration's record as (row, designs, playables, episodes, scores)."""
    return record.row, record.designs, record.playables, record.episodes, record.scores
