"""The designer role: skills, designer and hint prompts, code extraction, and one batched design.

SPADE's designer writes a whole environment as Python source for a target skill, grounded on a
corpus document and shown its memory of earlier environments. This module builds those prompts,
generates all designs of an iteration in ONE batched `policy.generate` call, extracts the code and
hands it to `sandbox.validate_env`; it never runs the code itself. It also builds the hint prompt
(the same policy reads an environment's source and writes a 1-3 sentence hint).

Omitted on purpose: the reference's long prompt variants (concept lists, self-traces, BFCL-style
multi-turn tool tasks, difficulty levels that barely change the text). Our prompt is short because
a 135M model with an 8k context must read it. Invalid designs are kept with their reasons (they
become training samples with a penalty); optional retries re-generate only the invalid slots.
"""
from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spade_mini.corpus import Corpus, Document
from spade_mini.memory import EnvRecord, Memory, env_title
from spade_mini.novelty import fingerprint, known_fingerprints

if TYPE_CHECKING:  # for annotations only: model.py imports torch, sandbox.py may be absent
    from spade_mini.model import Completion
    from spade_mini.sandbox import SandboxLimits, Validation

MAX_TURNS = 25  # turn cap of every episode (the reference's)
NO_CLASS = "no environment class in the reply"


@dataclass(frozen=True)
class Skill:
    setting: str  # "games" | "tool_use"
    key: str  # e.g. "logical_deduction"
    name: str  # e.g. "Logical Deduction"
    description: str


def _skills(setting: str, rows: list[tuple[str, str]]) -> tuple[Skill, ...]:
    return tuple(Skill(setting, key, key.replace("_", " ").title().replace("Api", "API"), desc) for key, desc in rows)


SKILLS: dict[str, tuple[Skill, ...]] = {
    "games": _skills("games", [
        ("pattern_recognition", "identifying patterns in sequences, numbers, or text"),
        ("logical_deduction", "drawing conclusions from given premises and rules"),
        ("strategic_planning", "multi-step planning and resource management"),
        ("mathematical_reasoning", "solving mathematical problems and equations"),
        ("spatial_reasoning", "understanding spatial relationships and mental rotation"),
        ("causal_inference", "understanding cause-effect relationships"),
        ("memory_recall", "remembering and using information from earlier turns"),
        ("optimization", "finding optimal solutions under constraints"),
        ("language_understanding", "understanding and manipulating language")]),
    "tool_use": _skills("tool_use", [
        ("api_orchestration", "chaining several state-changing API calls toward one goal"),
        ("data_retrieval", "querying for the needed data first, then acting on it"),
        ("state_modification", "making dependent changes whose final state is checked"),
        ("error_recovery", "noticing failed calls and recovering, e.g. by retrying or fixing arguments"),
        ("tool_selection", "choosing the right tool among similar alternatives"),
        ("multi_step_workflows", "completing ordered steps where each depends on the last")]),
}


class SkillError(ValueError):
    """An unknown setting or skill key; the message lists the valid ones."""


def skills_for(setting: str, active: list[str] | None = None) -> list[Skill]:
    """The skills of a setting ("games", "tool_use" or "mix"), optionally only the `active` keys."""
    if setting == "mix":  # interleave so a round robin alternates the two settings
        games, tools = SKILLS["games"], SKILLS["tool_use"]
        pool = [s for pair in zip(games, tools) for s in pair] + list(games[len(tools):])
    elif setting in SKILLS:
        pool = list(SKILLS[setting])
    else:
        raise SkillError(f"Unknown setting {setting!r}; use games, tool_use or mix.")
    if not active:
        return pool
    by_key = {s.key: s for s in pool}
    unknown = [key for key in active if key not in by_key]
    if unknown:
        raise SkillError(f"Unknown skill(s) {', '.join(unknown)} for setting {setting}; "
                         f"choose from: {', '.join(by_key)}.")
    return [by_key[key] for key in active]


def skill_schedule(skills: list[Skill], iteration: int, n: int, group: int = 1) -> list[Skill]:
    """`n` skills for this iteration, round robin over `skills`; each repeated `group` times in a
    row so the per-skill baseline of the designer reward has more than one design to average."""
    slots = -(-n // group)  # distinct skills this iteration
    start = iteration * slots
    picked = [skills[(start + i) % len(skills)] for i in range(slots)]
    return [skill for skill in picked for _ in range(group)][:n]


SYSTEM = "You write Python training environments for an agent. Reply with one ```python block."

GAME_EXAMPLE = r'''import random, re

class TargetSumEnv:
    """Reach an exact total by adding digits."""
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.target, self.total, self.turn = rng.randint(20, 40), 0, 0
        return self._obs("Add a digit 1-9 each turn, e.g. \\boxed{5}."), {}

    def _obs(self, msg):
        return f"{msg} Total {self.total}, target {self.target}, turns left {6 - self.turn}."

    def step(self, action):
        self.turn += 1
        m = re.fullmatch(r"\\boxed\{([1-9])\}", action.strip())
        if m:
            self.total += int(m.group(1))
        if self.total == self.target:
            return "Exact total reached!", 1.0, True, False, {}
        over = self.total > self.target or self.turn >= 6
        return self._obs("Added." if m else "Invalid move."), 0.0, over, False, {}

    def hint(self):
        return "Split the remaining difference over the turns left."'''

TOOL_EXAMPLE = r'''from tooluse import ToolUseEnv

class ShopEnv(ToolUseEnv):
    """Look up an item's price, buy it and report the price."""
    def _reset(self, rng):
        self.prices = {f"item{i}": rng.randint(2, 30) for i in range(5)}
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
        return "Check the wanted item's price, buy it, then answer with the price."'''

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

RULES = """- Observations give the agent everything it needs, including the answer format; never reveal the answer.
- Reward 1.0 with terminated=True on a win, else 0.0. Random actions should lose. End within {turns} turns.
- Optional hint(self) -> str: a strategy tip for this episode, not the answer."""


def designer_prompt(skill: Skill, document: Document | None, memory_block: str) -> list[dict]:
    """The designer chat (system + user) for one environment."""
    parts = []
    if document is not None:
        parts.append(f"<REFERENCE_DOCUMENT>\n{document.text}\n</REFERENCE_DOCUMENT>\n"
                     "Base the environment's theme and facts on this document; never mention it.")
    setting = "game" if skill.setting == "games" else "tool-use"
    parts.append(f"Write a {setting} environment that trains {skill.name}: {skill.description}. "
                 + CONTRACT[skill.setting] + "\n" + RULES.format(turns=MAX_TURNS))
    if memory_block:
        parts.append(memory_block)
    if "<REFERENCE_ENVIRONMENTS>" not in memory_block:  # references are whole environments
        example = GAME_EXAMPLE if skill.setting == "games" else TOOL_EXAMPLE
        parts.append(f"A short complete example:\n```python\n{example}\n```")
    parts.append(f"Now write a NEW environment for {skill.name} as one ```python block.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


_PY_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
_BARE_BLOCK = re.compile(r"```[ \t]*\n(.*?)(?:```|\Z)", re.S)
_ENV_CLASS = re.compile(r"^\s*class\s+\w*Env\b", re.M)


def extract_code(text: str) -> str | None:
    """The environment source in a reply: the first ```python block (the first one that defines
    an *Env class, if several), else a bare ``` block, else the whole reply if it defines an *Env
    class; None otherwise. An unterminated final block counts (the reply may be cut off)."""
    for pattern in (_PY_BLOCK, _BARE_BLOCK):
        blocks = [b.strip() for b in pattern.findall(text) if b.strip()]
        if blocks:
            with_class = [b for b in blocks if _ENV_CLASS.search(b)]
            return (with_class or blocks)[0] + "\n"
    return text.strip() + "\n" if _ENV_CLASS.search(text) else None


HINT_SYSTEM = {
    "games": ("You read the source code of a text game and write a hint for a player who cannot "
              "see it. Write 1-3 sentences (under 100 words): the strategy and the answer format "
              "(\\boxed{...}). Never state the exact answer or hidden values."),
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


def generate_hints(policy, sources: list[str], settings: list[str], max_new_tokens: int,
                   temperature: float = 0.3) -> list[str]:
    """One hint per environment source, in ONE batched call (hint tokens are never trained)."""
    if not sources:
        return []
    chats = [hint_prompt(src, setting) for src, setting in zip(sources, settings, strict=True)]
    from spade_mini.model import acting_as
    with acting_as(policy, "designer"):  # reading environment code is the designer's side
        completions = policy.generate(chats, max_new_tokens, temperature=temperature)
    return [re.sub(r"^\s*hint\s*:\s*", "", c.text.strip(), flags=re.I) for c in completions]


@dataclass
class Design:
    id: str
    iteration: int
    skill: Skill
    document_id: str | None
    prompt: list[dict]
    completion: Completion
    source: str | None  # None when the reply held no environment class
    validation: Validation | None  # None when there was no code to validate
    valid: bool
    reasons: list[str]  # why it is invalid (empty when valid)
    prompt_tokens: int
    attempt: int  # 1 for the first try of this slot
    stage: str = "valid"  # how far validation got: "valid", or where it failed (regret.INVALID_STAGES)
    reward: float | None = None  # the designer reward it earned, set by the loop (None: dropped)


def design_environments(policy, skills: list[Skill], corpus: Corpus | None, memory: Memory | None,
                        rng: random.Random, *, max_new_tokens: int, temperature: float,
                        iteration: int, limits: SandboxLimits | None = None, retries: int = 0,
                        workers: int = 2, references: int = 2, first_slot: int = 0) -> list[Design]:
    """One design per entry of `skills`; invalid slots are re-generated up to `retries` times
    with a fresh document, and the last attempt of each slot is returned. A design that copies
    a known environment (novelty.py) is invalid with reason `duplicate`. Design ids number the
    slots from `first_slot` (a data-parallel rank designs a block of the iteration's slots)."""
    from spade_mini.model import acting_as
    known = known_fingerprints(_known_sources(memory))
    designs: list[Design | None] = [None] * len(skills)
    pending = list(range(len(skills)))
    for attempt in range(1, retries + 2):
        chats, doc_ids = [], []
        for slot in pending:
            doc = corpus.sample(rng) if corpus is not None else None
            block = memory.render(memory.select(skills[slot].key, rng, references)) if memory else ""
            chats.append(designer_prompt(skills[slot], doc, block))
            doc_ids.append(doc.id if doc else None)
        with acting_as(policy, "designer"):
            completions = policy.generate(chats, max_new_tokens, temperature=temperature)
        sources = [extract_code(c.text) for c in completions]
        validations = _validate_all(sources, limits, workers)
        for i, slot in enumerate(pending):
            validation, completion = validations[i], completions[i]
            design_id = f"it{iteration:04d}-{first_slot + slot:02d}"
            reasons = [NO_CLASS] if validation is None else list(validation.reasons)
            stage = "no_code" if validation is None else validation.stage
            if stage == "valid":
                fp = fingerprint(sources[i])
                if fp in known:
                    stage, reasons = "duplicate", [f"duplicate: the same environment as {known[fp]} "
                                                   "up to names, comments and docstrings"]
                else:
                    known[fp] = design_id  # a later slot copying this one is a duplicate too
            valid = stage == "valid"
            if not valid and not completion.finished:
                reasons.append(f"reply cut off at {max_new_tokens} new tokens")
            designs[slot] = Design(
                design_id, iteration, skills[slot], doc_ids[i], chats[i], completion, sources[i],
                validation, valid, [] if valid else reasons, len(completion.prompt_ids), attempt,
                stage)
        pending = [slot for slot in pending if not designs[slot].valid]
        if not pending:
            break
    return designs


def _known_sources(memory: Memory | None) -> list[tuple[str, str]]:
    """What a new design must differ from: the prompt's examples, the bundled examples, and every
    valid environment in memory."""
    from spade_mini.envs import EXAMPLES
    known = [("the prompt's example", GAME_EXAMPLE), ("the prompt's example", TOOL_EXAMPLE)]
    known += [(f"example {e.name}", src) for e in EXAMPLES for src in (e.source, e.design_source)]
    if memory is not None:
        known += [(r.id, r.source) for r in memory.records if r.valid]
    return known


def _validate_all(sources: list[str | None], limits: SandboxLimits | None,
                  workers: int) -> list[Validation | None]:
    # Threads here only wait on sandbox child processes; the untrusted code runs in the child.
    from spade_mini.sandbox import validate_env

    def one(source):
        return None if source is None else validate_env(source, limits=limits, max_turns=MAX_TURNS)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, sources))


def design_record(design: Design, no_hint_solve_rate: float | None = None,
                  hint_solve_rate: float | None = None, regret: float | None = None) -> EnvRecord:
    """The memory record of a design, with its play stats once known."""
    return EnvRecord(design.id, design.iteration, design.skill.setting, design.skill.key,
                     env_title(design.source) if design.source else "no code", design.source or "",
                     design.valid, list(design.reasons), no_hint_solve_rate, hint_solve_rate,
                     regret)
