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
from spade_mini.designer.prompts import GAME_EXAMPLE, TOOL_EXAMPLE, designer_prompt, edit_prompt, repair_prompt
from spade_mini.designer.skills import SKILLS, Skill
from spade_mini.envs import ADMISSION_STAGES, STAGES
from spade_mini.gate import Archive, GateSettings, admit
from spade_mini.shape import design_cap

if TYPE_CHECKING:  # for annotations only: the policy imports torch
    from spade_mini.policy import Completion
    from spade_mini.sandbox import Validation

NO_CLASS = "no environment class in the reply"

# The stages at which an attempt failed as a bug that its own code and the gate's words can fix:
# every validation stage (a parse error, a NameError in step, a solution that loses, too few
# instances) and every text check (an answer shown, a leaky hint, a question it does not pay),
# not a reply without code, nor a copy of a known environment.
REPAIRABLE = (*STAGES[:-1], *ADMISSION_STAGES)


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
    written_as: str = "fresh"  # "fresh" (the designer prompt), "repair" (its parent's code and
    #                            validation's words) or "edit" (a variant of a pool environment)
    parent: str | None = None  # the design a repair repairs, or the pool environment an edit edits


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
    repair: bool = False     # a slot's next attempt after a bug repairs its code, once
    edit_share: float = 0.0  # the share of slots whose first attempt edits a pool environment
    gate: GateSettings = GateSettings()
    novelty: bool = True     # the gate's re-skin check against the archive (off: exact copies only)
    workers: int = 2         # validations at once (threads that wait on sandbox children)
    shared_first: bool = False  # the prompt opens with the contract and example (prompts.designer_prompt)


def design_environments(policy, skills: list[Skill], corpus: Corpus | None, memory: Memory | None,
                        rng: random.Random, settings: DesignSettings = DesignSettings(), *, iteration: int,
                        first_slot: int = 0, edit_from: list[tuple] = (), archive: Archive | None = None) -> list[Design]:
    """One design per entry of `skills`, then invalid slots written again with a fresh document:
    `settings.retries` more times, or (with `until_valid` > 0) until that many are valid, at most
    `cap` designs in all (0: shape.design_cap's) and no new call after `max_seconds` (0: no limit).
    EVERY attempt is returned, in the order written (each is a designer sample and a memory
    record). A valid design passed the gate (spade_mini/gate: validation under the run's turn cap,
    turn budget and K; the observation, the hint and the question; no re-skin of `archive`, which
    every valid design then joins) and is no exact copy of a known environment or of an earlier
    slot (else stage `duplicate`). `repair`: a slot
    whose fresh attempt failed as a bug (a stage of REPAIRABLE) has its next attempt repair that
    code (prompts.repair_prompt), once. `edit_share`: the first attempts of that share of the slots
    edit an environment drawn from `edit_from` ((id, source, level, rate, setting) of the pool,
    of the slot's setting) into a variant; an edit that changes only its parent's names and
    numbers is a `duplicate`. Ids number the slots from `first_slot` (a data-parallel rank
    designs a block of them); a slot's later attempts add `-a<attempt>`."""
    known = known_fingerprints(_known_sources(memory))
    archive = archive if settings.novelty else None
    cap = min(design_cap(len(skills), settings.cap, settings.until_valid, settings.retries), settings.cap or 10**9)
    started, designs, last_of, edited = time.monotonic(), [], {}, {}  # last_of: each slot's latest attempt
    pending, attempt = list(range(len(skills))), 0
    edits = round(settings.edit_share * len(skills))
    while pending:
        attempt += 1
        pending = pending[:cap - len(designs)]
        chats, doc_ids, origins = [], [], []  # origins: (written_as, parent) per chat
        for slot in pending:
            chat, doc_id, origin = _prompt(skills[slot], last_of.get(slot), slot < edits, corpus, memory, rng,
                                           settings, edit_from, edited)
            chats.append(chat), doc_ids.append(doc_id), origins.append(origin)
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
                                         attempt, written_as=origins[i][0], parent=origins[i][1]),
                                  known, edited, settings.max_new_tokens, archive))
            last_of[slot] = written[-1]
        designs += written
        pending = [slot for slot, d in zip(pending, written) if not d.valid]
        if settings.until_valid <= 0:
            if attempt > settings.retries:
                break
        elif (sum(d.valid for d in designs) >= settings.until_valid or len(designs) >= cap
              or (settings.max_seconds > 0 and time.monotonic() - started >= settings.max_seconds)):
            break
    return designs


def _prompt(skill: Skill, last: Design | None, may_edit: bool, corpus, memory, rng, settings: DesignSettings,
            edit_from, edited: dict) -> tuple[list[dict], str | None, tuple[str, str | None]]:
    """(chat, document id, (written_as, parent)) of a slot's next attempt: an edit of a pool
    environment (a first attempt of an editing slot), a repair of its last attempt, or fresh."""
    gate = settings.gate
    same_setting = [e for e in edit_from if e[4] == skill.setting]  # the contract it is told
    if last is None and may_edit and same_setting:
        parent_id, parent_source, level, rate, _ = same_setting[rng.randrange(len(same_setting))]
        doc = corpus.sample(rng) if corpus is not None else None
        edited[parent_id] = parent_source
        return (edit_prompt(skill, parent_source, level, rate, doc, turns=gate.play_turns, turn_tokens=gate.turn_tokens,
                            levels=settings.levels), doc.id if doc else None, ("edit", parent_id))
    if settings.repair and last is not None and last.written_as == "fresh" and last.stage in REPAIRABLE:
        return (repair_prompt(skill, last.source, last.stage, last.reasons, turns=gate.play_turns,
                              turn_tokens=gate.turn_tokens, levels=settings.levels), None, ("repair", last.id))
    doc = corpus.sample(rng) if corpus is not None else None
    block = "" if memory is None else "\n\n".join(filter(None, (
        memory.render(memory.select(skill.key, rng, settings.references)),
        memory.coverage(skill.setting, [s.key for s in SKILLS[skill.setting]]))))
    return (designer_prompt(skill, doc, block, turns=gate.play_turns, turn_tokens=gate.turn_tokens,
                            levels=settings.levels, shared_first=settings.shared_first),
            doc.id if doc else None, ("fresh", None))


def _judge(design: Design, known: dict, edited: dict, max_new_tokens: int, archive: Archive | None) -> Design:
    """The design's stage and reasons, from its admission and the copy checks; a valid design
    joins `known` and the archive (a later slot copying it is a duplicate too)."""
    validation, source = design.validation, design.source
    reasons = [NO_CLASS] if validation is None else list(validation.reasons)
    stage = "no_code" if validation is None else validation.stage
    if stage == "valid" and design.written_as == "edit" and \
            fingerprint(source, numbers=False) == fingerprint(edited[design.parent], numbers=False):
        stage, reasons = "duplicate", [f"duplicate: an edit that changes only the names and numbers of {design.parent}"]
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
                     written_as=design.written_as, parent=design.parent,
                     shape=design.validation.shape if design.valid and design.validation else {})
