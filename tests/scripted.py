"""Scripted roles around the tiny model, for tests of the active pool: a designer that writes
parity games (each with its own number range, so none is a duplicate) and an agent that answers
a random bit. The agent wins about half its episodes, so every parity game is informative and
joins the pool. Both draw from torch's generator, which a checkpoint restores: a resumed run
draws what the uninterrupted run drew. tests/scripted_train.py runs train.py with them."""
import re

import torch

from spade_mini.designer.prompts import SYSTEM
from spade_mini.policy import Completion

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


class ScriptedRoles:
    """The tiny policy underneath (log-probs, updates, checkpoints); designer prompts get parity
    games, agent turns a random bit in the box."""

    def __init__(self, policy, levels: bool = False):
        self.policy = policy
        self.levels = levels  # the designer writes LEVEL_GAME games

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def _reply(self, chat, text):
        ids = self.policy.tokenizer(text, add_special_tokens=False)["input_ids"]
        return Completion(text, self.policy.prompt_ids(chat), ids + [self.policy.pad_id], True)

    def generate(self, chats, max_new_tokens, temperature=None, tools=None):
        if chats and chats[0][0]["content"] == SYSTEM:
            lows = torch.randint(10, 10**6, (len(chats),)).tolist()
            return [self._reply(c, f"```python\n{parity_source(low, self.levels)}```") for c, low in zip(chats, lows)]
        if temperature == 0:  # the drift probe's greedy replies: the model's own
            return self.policy.generate(chats, max_new_tokens, temperature)
        bits = torch.randint(0, 2, (len(chats),)).tolist()
        if self.levels:  # the last digit on heads, the next digit on tails
            digits = [int(re.findall(r"last digit of (\d+)", c[-1]["content"])[-1]) % 10 for c in chats]
            return [self._reply(c, "\\boxed{%d}" % ((d + 1 - b) % 10)) for c, d, b in zip(chats, digits, bits)]
        return [self._reply(c, "\\boxed{%d}" % b) for c, b in zip(chats, bits)]

    def continue_chats(self, chats, max_new_tokens, temperature=None, keys=None):
        return self.generate(chats, max_new_tokens, temperature)


class InvalidFirst(ScriptedRoles):
    """The designer's first `invalid` replies hold no environment; parity games after them."""

    def __init__(self, policy, invalid: int):
        super().__init__(policy)
        self.invalid = invalid

    def generate(self, chats, max_new_tokens, temperature=None, tools=None):
        if not (chats and chats[0][0]["content"] == SYSTEM):
            return super().generate(chats, max_new_tokens, temperature, tools)
        out = []
        for chat in chats:
            if self.invalid > 0:
                self.invalid -= 1
                out.append(self._reply(chat, "No code here, sorry."))
            else:
                out += super().generate([chat], max_new_tokens, temperature, tools)
        return out
