"""The designer's and the hint writer's prompts: the text a designer reads before it writes.

The designer chat states the environment contract of one setting (games answer in \\boxed{};
tool-use environments subclass ToolUseEnv), the rules every environment follows, a corpus
document to ground it, the memory's references, and a short complete example when the memory
shows none. The hint chat gives the same policy an environment's source and asks for a 1-3
sentence strategy tip that never states the answer.

Levels: the prompt asks for difficulty levels (a class attribute `levels`, reset's
options={"level": n}) and says what a level must change; the active pool raises a level once
the agent wins it (pool.py). `levels=False` gives the prompt without them (for the bench that
compares the two). Omitted on purpose: the reference's long prompt variants (concept lists,
self-traces, BFCL-style multi-turn tool tasks). Our prompt is short because a 135M model with an
8k context must read it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from spade_mini.designer.skills import Skill
from spade_mini.envs import MAX_TURNS

if TYPE_CHECKING:  # for annotations only
    from spade_mini.designer.corpus import Document

SYSTEM = "You write Python training environments for an agent. Reply with one ```python block."

GAME_EXAMPLE = r'''import random, re

class TargetSumEnv:
    """Reach an exact total by adding digits."""
    levels = 4  # each level leaves fewer turns to spare

    def reset(self, seed=None, options=None):
        rng = random.Random(seed)
        level = (options or {}).get("level", 0)
        self.target, self.total, self.turn = rng.randint(20, 40 - 5 * level), 0, 0
        self.turns = 6 - level
        return self._obs("Add a digit 1-9 each turn, e.g. \\boxed{5}."), {}

    def _obs(self, msg):
        return f"{msg} Total {self.total}, target {self.target}, turns left {self.turns - self.turn}."

    def step(self, action):
        self.turn += 1
        m = re.fullmatch(r"\\boxed\{([1-9])\}", action.strip())
        if m:
            self.total += int(m.group(1))
        if self.total == self.target:
            return "Exact total reached!", 1.0, True, False, {}
        over = self.total > self.target or self.turn >= self.turns
        return self._obs("Added." if m else "Invalid move."), 0.0, over, False, {}

    def hint(self):
        return "Split the remaining difference over the turns left."

    def solution(self):
        left, moves = self.target - self.total, []
        while left > 0:
            moves.append(f"\\boxed{{{min(9, left)}}}")
            left -= min(9, left)
        return moves'''

TOOL_EXAMPLE = r'''import json
from tooluse import ToolUseEnv

class ShopEnv(ToolUseEnv):
    """Look up an item's price, buy it and report the price."""
    levels = 4  # more items to search at each level

    def _reset(self, rng):
        self.prices = {f"item{i}": rng.randint(2, 30) for i in range(5 + 5 * self.level)}
        self.wanted, self.bought = rng.choice(sorted(self.prices)), None
        return f"Buy {self.wanted}, then answer with the price you paid."

    def tool_price(self, item: str) -> str:
        """Look up the price of an item."""
        return str(self.prices[item])

    def tool_buy(self, item: str) -> str:
        """Buy one item."""
        self.bought = item
        return f"Bought {item}."

    def _check_answer(self, answer):
        return self.bought == self.wanted and answer == str(self.prices[self.wanted])

    def hint(self):
        return "Check the wanted item's price, buy it, then answer with the price."

    def solution(self):
        call = {"name": "buy", "arguments": {"item": self.wanted}}
        return [f"<tool_call>{json.dumps(call)}</tool_call>", f"<answer>{self.prices[self.wanted]}</answer>"]'''

CONTRACT = {
    "games": ("The agent answers each turn with \\boxed{...}; step receives it as \\boxed{x}.\n"
              "Rules:\n"
              "- One class whose name ends in Env, built with no arguments; standard library only.\n"
              "- reset(self, seed=None) -> (observation: str, info: dict) fixes one task per "
              "episode; use random.Random(seed) so the same seed gives the same episode.\n"
              "- step(self, action: str) -> (observation: str, reward: float, terminated: bool, "
              "truncated: bool, info: dict); every action changes the state."),
    "tool_use": ('The agent calls tools with <tool_call>{"name": ..., "arguments": {...}}'
                 "</tool_call> and finishes with <answer>...</answer>.\n"
                 "Rules:\n"
                 "- One class whose name ends in Env that subclasses ToolUseEnv (from tooluse "
                 "import ToolUseEnv); standard library only.\n"
                 "- _reset(self, rng) builds one task per episode with rng (a random.Random of "
                 "the seed) and returns the task text.\n"
                 "- Each tool is a method tool_<name> with typed arguments and a docstring; it "
                 "reads or changes the state and returns a string. Raise an error on a bad call.\n"
                 "- _check_answer(self, answer: str) -> bool judges the final <answer>."),
}

LEVELS = {
    "games": "- Give it levels = 4 and read level = (options or {}).get(\"level\", 0) in reset(self, seed=None, options=None)",
    "tool_use": "- Give it levels = 4 and read self.level (0 to 3) in _reset",
}
LEVEL_RULE = (": level 0 is the easiest, each level the same task made harder (bigger sizes, more steps, "
              "more distractors); every level is won by solution() within the turns.")

RULES = """- Observations give the agent everything it needs, including the answer format; never reveal the answer (an example line works another instance).
- step pays exactly what the question asks. Reward 1.0 with terminated=True on a win, else 0.0. Random actions should lose. End within {turns} turns.
- Optional hint(self) -> str: how to find the answer, never the answer nor its first letter or digit.
- Last method: solution(self) -> list[str], the agent's winning actions for this episode, in order."""


def designer_prompt(skill: Skill, document: Document | None, memory_block: str,
                    turns: int = MAX_TURNS, turn_tokens: int | None = None, levels: bool = True,
                    shared_first: bool = False) -> list[dict]:
    """The designer chat (system + user) for one environment; `turns` is the run's turn cap and
    `turn_tokens` the agent's token budget for one reply (the contract told is the one played);
    `levels`: ask for difficulty levels. `shared_first`: the setting's contract and the example
    open the prompt, the same tokens for every row of a design call (its keys and values are
    computed once a call, policy.continue_chats), and the example is always shown; else the
    document and the skill come first and the example only when no reference is."""
    setting = "game" if skill.setting == "games" else "tool-use"
    contract = (CONTRACT[skill.setting] + "\n" + RULES.format(turns=turns)
                + (f"\n- The agent writes at most {turn_tokens} tokens a turn: keep every winning "
                   "action that short." if turn_tokens else "")
                + ("\n" + LEVELS[skill.setting] + LEVEL_RULE if levels else ""))
    example = GAME_EXAMPLE if skill.setting == "games" else TOOL_EXAMPLE
    example = f"A short complete example:\n```python\n{example if levels else one_level(example)}\n```"
    document = (f"<REFERENCE_DOCUMENT>\n{document.text}\n</REFERENCE_DOCUMENT>\n"
                "Base the environment's theme and facts on this document; never mention it.") if document else ""
    trains = f"{skill.name}: {skill.description}."
    if shared_first:
        parts = [f"Write a {setting} environment. {contract}", example, document,
                 f"The environment trains {trains}", memory_block]
    else:
        shown = "<REFERENCE_ENVIRONMENTS>" in memory_block  # references are whole environments
        parts = [document, f"Write a {setting} environment that trains {trains[:-1]}. {contract}", memory_block,
                 "" if shown else example]
    parts.append(f"Now write a NEW environment for {skill.name} as one ```python block.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(filter(None, parts))}]


def one_level(example: str) -> str:
    """A prompt example without its levels (level 0 everywhere), for the prompt without them."""
    lines = [line for line in example.splitlines() if not line.strip().startswith(("levels =", "level ="))]
    text = "\n".join(lines).replace("seed=None, options=None", "seed=None").replace(" - 5 * level", "")
    return text.replace("6 - level", "6").replace(" + 5 * self.level", "").replace("\n\n    def reset", "\n    def reset").replace("\n\n    def _reset", "\n    def _reset")


HINT_SYSTEM = {
    "games": ("You read the source code of a text game and write a hint for a player who cannot "
              "see it. Write 1-3 sentences (under 100 words): the strategy and the answer format "
              "(\\boxed{...}). Never state the exact answer, its first letter or digit, or hidden values."),
    "tool_use": ("You read the source code of a tool-use environment and write a hint for an agent "
                 "who cannot see it. Write 1-3 sentences (under 100 words): which tools to call in "
                 "which order and the final <answer> format. Stay value-free: use placeholders "
                 "like <item>, never concrete values or the answer."),
}


def hint_prompt(source: str, setting: str) -> list[dict]:
    user = f"Environment code:\n```python\n{source}\n```\nWrite the hint."
    return [{"role": "system", "content": HINT_SYSTEM[setting]}, {"role": "user", "content": user}]


def with_hint(obs: str, hint: str) -> str:
    """The first observation of a hint-arm episode."""
    return f"{obs}\n\nHINT: {hint}"
