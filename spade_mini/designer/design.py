"""The designer role: code extraction and one batched design of an iteration.

SPADE's designer writes a whole environment as Python source for a target skill, grounded on a
corpus document and shown its memory of earlier environments (the chats are in prompts.py). This
module generates all designs of an iteration in ONE batched `policy.generate` call, extracts the
code and hands it to `sandbox.validate_env`; it never runs the code itself. Hints: hints.py.

Invalid designs are kept with their reasons (they become training samples with a graded
penalty); retries, or designing until K are valid, re-generate only the invalid slots, and
every attempt is kept.
"""
from __future__ import annotations

import random
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spade_mini.config import DEFAULTS
from spade_mini.designer.corpus import Corpus
from spade_mini.designer.memory import EnvRecord, Memory, env_title
from spade_mini.gate.exact import fingerprint, known_fingerprints
from spade_mini.designer.prompts import GAME_EXAMPLE, TOOL_EXAMPLE, designer_prompt
from spade_mini.designer.skills import SKILLS, Skill
from spade_mini.gate import Archive, GateSettings, admit
from spade_mini.shape import design_cap

if TYPE_CHECKING:  # for annotations only: the policy imports torch
    from spade_mini.policy import Completion
    from spade_mini.sandbox import Validation

NO_CLASS = "no environment class in the reply"

_PY_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
_BARE_BLOCK = re.compile(r"```[ \t]*\n(.*?)(?:```|\Z)", re.S)
FENCE_END = "`"  # the last character of a closing fence: the designer's row is checked after a token holding it
_CLOSED_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.S | re.I)
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


def env_block_closed(text: str) -> bool:
    """Whether a reply so far holds a closed ``` block that defines an *Env class: all that
    extract_code reads is written, so the designer's row can stop (Policy.generate_until)."""
    return text.rstrip().endswith("```") and any(_ENV_CLASS.search(b) for b in _CLOSED_BLOCK.findall(text))


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


@dataclass(frozen=True)
class DesignSettings:
    """What one regeneration needs of the flags (settings.design_settings builds it from a Config)."""
    max_new_tokens: int = DEFAULTS.design_max_new_tokens
    temperature: float = DEFAULTS.temperature
    references: int = DEFAULTS.memory_references  # same-skill references a prompt shows
    until_valid: int = 0     # write invalid slots again until this many are valid (0: `retries` more passes)
    retries: int = 0
    cap: int = 0             # designs written at most, valid or not (0: shape.ATTEMPTS_PER_SLOT a slot)
    max_seconds: float = 0.0  # no new call after this many seconds (0: no limit)
    levels: bool = True      # the prompt asks for difficulty levels
    gate: GateSettings = GateSettings()
    novelty: bool = True     # the gate's re-skin check against the archive (off: exact copies only)
    workers: int = 2         # validations at once (threads that wait on sandbox children)
    shared_first: bool = False  # the prompt opens with the contract and example (prompts.designer_prompt)


def design_environments(policy, skills: list[Skill], corpus: Corpus | None, memory: Memory | None,
                        rng: random.Random, settings: DesignSettings = DesignSettings(), *, iteration: int,
                        first_slot: int = 0, archive: Archive | None = None) -> list[Design]:
    """One design per entry of `skills`, then invalid slots written again with a fresh document:
    `settings.retries` more times, or (with `until_valid` > 0) until that many are valid, at most
    `cap` designs in all (0: shape.design_cap's) and no new call after `max_seconds` (0: no limit).
    EVERY attempt is returned, in the order written (each is a designer sample and a memory
    record). A valid design passed the gate (spade_mini/gate: validation under the run's turn cap,
    turn budget and K; the observation, the hint and the question; no re-skin of `archive`, which
    every valid design then joins) and is no exact copy of a known environment or of an earlier
    slot (else stage `duplicate`). Ids number the slots from `first_slot` (a data-parallel rank
    designs a block of them); a slot's later attempts add `-a<attempt>`."""
    known = known_fingerprints(_known_sources(memory))
    archive = archive if settings.novelty else None
    cap = min(design_cap(len(skills), settings.cap, settings.until_valid, settings.retries), settings.cap or 10**9)
    started, designs = time.monotonic(), []
    pending, attempt = list(range(len(skills))), 0
    while pending:
        attempt += 1
        pending = pending[:cap - len(designs)]
        chats, doc_ids = [], []
        for slot in pending:
            chat, doc_id = _prompt(skills[slot], corpus, memory, rng, settings)
            chats.append(chat), doc_ids.append(doc_id)
        with policy.acting_as("designer"):
            completions = write(policy, chats, settings.max_new_tokens, settings.temperature)
        sources = [extract_code(c.text) for c in completions]
        validations = _validate_all(sources, settings, policy, [random.Random(rng.randrange(2**63)) for _ in sources],
                                    archive)
        written = []
        for i, slot in enumerate(pending):
            design_id = f"it{iteration:04d}-{first_slot + slot:02d}" + (f"-a{attempt}" if attempt > 1 else "")
            written.append(_judge(Design(design_id, iteration, skills[slot], doc_ids[i], chats[i], completions[i],
                                         sources[i], validations[i], False, [], len(completions[i].prompt_ids),
                                         attempt), known, settings.max_new_tokens, archive))
        designs += written
        pending = [slot for slot, d in zip(pending, written) if not d.valid]
        if settings.until_valid <= 0:
            if attempt > settings.retries:
                break
        elif (sum(d.valid for d in designs) >= settings.until_valid or len(designs) >= cap
              or (settings.max_seconds > 0 and time.monotonic() - started >= settings.max_seconds)):
            break
    return designs


def _prompt(skill: Skill, corpus, memory, rng, settings: DesignSettings) -> tuple[list[dict], str | None]:
    """(chat, document id) of a slot's next attempt: a fresh document, the memory's references and
    its coverage of the setting's skills."""
    gate = settings.gate
    doc = corpus.sample(rng) if corpus is not None else None
    block = "" if memory is None else "\n\n".join(filter(None, (
        memory.render(memory.select(skill.key, rng, settings.references)),
        memory.coverage(skill.setting, [s.key for s in SKILLS[skill.setting]]))))
    return (designer_prompt(skill, doc, block, turns=gate.play_turns, turn_tokens=gate.turn_tokens,
                            levels=settings.levels, shared_first=settings.shared_first),
            doc.id if doc else None)


def _judge(design: Design, known: dict, max_new_tokens: int, archive: Archive | None) -> Design:
    """The design's stage and reasons, from its admission and the copy checks; a valid design
    joins `known` and the archive (a later slot copying it is a duplicate too)."""
    validation, source = design.validation, design.source
    reasons = [NO_CLASS] if validation is None else list(validation.reasons)
    stage = "no_code" if validation is None else validation.stage
    if stage == "valid":
        fp = fingerprint(source)
        if fp in known:
            stage, reasons = "duplicate", [f"duplicate: the same environment as {known[fp]} "
                                           "up to names, comments and docstrings"]
        else:
            known[fp] = design.id
            if archive is not None:
                archive.add(design.id, source)
    design.valid, design.stage = stage == "valid", stage
    if not design.valid and not design.completion.finished:
        reasons.append(f"reply cut off at {max_new_tokens} new tokens")
    design.reasons = [] if design.valid else reasons
    return design


def write(policy, chats: list[list[dict]], max_new_tokens: int, temperature: float) -> list[Completion]:
    """The designer's batch: in the decoding loop, each row stopping once its environment's block
    has closed (Roles.generate_until)."""
    return policy.generate_until(chats, max_new_tokens, temperature, until=env_block_closed, when=FENCE_END)


def _known_sources(memory: Memory | None) -> list[tuple[str, str]]:
    """What a new design must differ from: the prompt's examples (with and without levels), the
    bundled examples, the held-out environments (a rewrite of one would train on what the curve
    measures), and every valid environment in memory."""
    from spade_mini.designer.prompts import one_level
    from spade_mini.envs import ALL_EXAMPLES, ALL_HELDOUT
    known = [("the prompt's example", src) for ex in (GAME_EXAMPLE, TOOL_EXAMPLE) for src in (ex, one_level(ex))]
    known += [(f"example {e.name}", src) for e in ALL_EXAMPLES for src in (e.source, e.without_solution)]
    known += [(f"held-out {e.name}", src) for e in ALL_HELDOUT for src in (e.source, e.without_solution)]
    if memory is not None:
        known += [(r.id, r.source) for r in memory.records if r.valid]
    return known


def _validate_all(sources: list[str | None], settings: DesignSettings, policy,
                  rngs: list[random.Random], archive: Archive | None = None) -> list[Validation | None]:
    # Threads here only wait on sandbox child processes; the untrusted code runs in the child.
    # Each validation draws its seeds from a stream of its own, as play draws its seeds.
    def one(source, rng):
        return None if source is None else admit(source, settings.gate, rng, count_tokens=policy.count_tokens,
                                                 archive=archive)

    with ThreadPoolExecutor(max_workers=max(1, settings.workers)) as pool:
        return list(pool.map(one, sources, rngs))


def design_record(design: Design, no_hint_solve_rate: float | None = None,
                  hint_solve_rate: float | None = None, regret: float | None = None) -> EnvRecord:
    """The memory record of a design, with its play stats once known."""
    return EnvRecord(design.id, design.iteration, design.skill.setting, design.skill.key,
                     env_title(design.source) if design.source else "no code", design.source or "",
                     design.valid, list(design.reasons), no_hint_solve_rate, hint_solve_rate,
                     regret, levels=design.validation.levels if design.valid and design.validation else 1,
                     shape=design.validation.shape if design.valid and design.validation else {})
