"""The designer role: skills, code extraction, hints, and one batched design (prompts: prompts.py).

SPADE's designer writes a whole environment as Python source for a target skill, grounded on a
corpus document and shown its memory of earlier environments (the chats are in prompts.py). This
module generates all designs of an iteration in ONE batched `policy.generate` call, extracts the
code and hands it to `sandbox.validate_env`; it never runs the code itself. It also writes the
hints (the same policy reads an environment's source and writes a 1-3 sentence hint).

Invalid designs are kept with their reasons (they become training samples with a graded
penalty); optional retries re-generate only the invalid slots.
"""
from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spade_mini.corpus import Corpus
from spade_mini.memory import EnvRecord, Memory, env_title
from spade_mini.novelty import fingerprint, known_fingerprints
from spade_mini.prompts import GAME_EXAMPLE, MAX_TURNS, TOOL_EXAMPLE, designer_prompt, hint_prompt

if TYPE_CHECKING:  # for annotations only: model.py imports torch, sandbox.py may be absent
    from spade_mini.model import Completion
    from spade_mini.sandbox import SandboxLimits, Validation

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
    stage: str = "valid"  # how far validation got: "valid", or where it failed (invalidity.INVALID_STAGES)
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
