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
from spade_mini.designer.novelty import fingerprint, known_fingerprints
from spade_mini.designer.prompts import GAME_EXAMPLE, TOOL_EXAMPLE, designer_prompt, edit_prompt, repair_prompt
from spade_mini.designer.skills import Skill
from spade_mini.envs import MAX_TURNS, STAGES

if TYPE_CHECKING:  # for annotations only: the policy imports torch
    from spade_mini.policy import Completion
    from spade_mini.sandbox import SandboxLimits, Validation

NO_CLASS = "no environment class in the reply"

# The stages at which an attempt failed as a bug that its own code and validation's words can fix:
# every validation stage (a parse error, a NameError in step, a solution that loses, too few
# instances), not a reply without code, nor a copy of a known environment.
REPAIRABLE = STAGES[:-1]


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


def design_environments(policy, skills: list[Skill], corpus: Corpus | None, memory: Memory | None,
                        rng: random.Random, *, max_new_tokens: int, temperature: float,
                        iteration: int, limits: SandboxLimits | None = None, retries: int = 0,
                        workers: int = 2, references: int = DEFAULTS.memory_references,
                        first_slot: int = 0, require_solution: bool = DEFAULTS.require_solution,
                        until_valid: int = 0, max_attempts: int = 0, max_seconds: float = 0.0,
                        max_turns: int = MAX_TURNS, turn_tokens: int | None = None,
                        action_fits=None, min_instances: int = 0, levels: bool = True,
                        repair: bool = False, edit_from: list[tuple] = (), edits: int = 0) -> list[Design]:
    """One design per entry of `skills`, then invalid slots re-generated with a fresh document:
    up to `retries` times, or (with `until_valid` > 0) until that many designs are valid, at most
    `max_attempts` designs in all (0: three per slot) and no new batch after `max_seconds` (0: no
    limit). EVERY attempt is returned, in the order written (a slot's invalid tries too: each is
    a designer sample and a memory record). A design that copies a known environment
    (novelty.py) is invalid with reason `duplicate`. Validation plays `max_turns` turns at most
    (the run's cap) and refuses a solution() action that `action_fits(action)` says no to (the
    run's turn budget; it returns a reason or None), and one with fewer than `min_instances`
    distinct instances (the run's K; sandbox/instances.py). `levels`: the prompt asks for
    difficulty levels (prompts.py). `repair`: a slot whose fresh attempt failed as a bug (a stage
    of REPAIRABLE) gets its next attempt as a repair of that code (prompts.repair_prompt), once;
    then fresh attempts again. `edits`: the first attempts of that many slots edit an environment
    drawn from `edit_from` ((id, source, level, rate, setting) of the active pool; one of the
    slot's setting, so its contract is the one the prompt states) into a variant
    (prompts.edit_prompt); an edit that changes only its parent's names and numbers is a
    `duplicate`. Design ids number the slots from
    `first_slot` (a data-parallel rank designs a block of the iteration's slots); a slot's later
    attempts add `-a<attempt>`."""
    from spade_mini.policy import acting_as
    known = known_fingerprints(_known_sources(memory))
    cap = max_attempts or 3 * len(skills)
    started = time.monotonic()
    designs: list[Design] = []
    last_of: dict[int, Design] = {}  # each slot's latest attempt
    edited: dict[str, str] = {}  # the pool environments edited: id -> source
    pending = list(range(len(skills)))
    attempt = 0
    while pending:
        attempt += 1
        if until_valid > 0:
            pending = pending[:cap - len(designs)]
        chats, doc_ids, origins = [], [], []  # origins: (written_as, parent) per chat
        for slot in pending:
            last = last_of.get(slot)
            same_setting = [e for e in edit_from if e[4] == skills[slot].setting]  # the contract it is told
            if last is None and slot < edits and same_setting:
                parent_id, parent_source, level, rate, _ = same_setting[rng.randrange(len(same_setting))]
                doc = corpus.sample(rng) if corpus is not None else None
                chats.append(edit_prompt(skills[slot], parent_source, level, rate, doc, turns=max_turns,
                                         turn_tokens=turn_tokens, levels=levels))
                doc_ids.append(doc.id if doc else None)
                origins.append(("edit", parent_id))
                edited[parent_id] = parent_source
                continue
            if repair and last is not None and last.written_as == "fresh" and last.stage in REPAIRABLE:
                chats.append(repair_prompt(skills[slot], last.source, last.stage, last.reasons, turns=max_turns,
                                           turn_tokens=turn_tokens, levels=levels))
                doc_ids.append(None)
                origins.append(("repair", last.id))
                continue
            doc = corpus.sample(rng) if corpus is not None else None
            block = memory.render(memory.select(skills[slot].key, rng, references)) if memory else ""
            chats.append(designer_prompt(skills[slot], doc, block, turns=max_turns, turn_tokens=turn_tokens,
                                         levels=levels))
            doc_ids.append(doc.id if doc else None)
            origins.append(("fresh", None))
        with acting_as(policy, "designer"):
            completions = write(policy, chats, max_new_tokens, temperature)
        sources = [extract_code(c.text) for c in completions]
        validations = _validate_all(sources, limits, workers, require_solution,
                                    [random.Random(rng.randrange(2**63)) for _ in sources],
                                    max_turns, action_fits, min_instances)
        written = []
        for i, slot in enumerate(pending):
            validation, completion = validations[i], completions[i]
            design_id = f"it{iteration:04d}-{first_slot + slot:02d}" + (f"-a{attempt}" if attempt > 1 else "")
            reasons = [NO_CLASS] if validation is None else list(validation.reasons)
            stage = "no_code" if validation is None else validation.stage
            written_as, parent = origins[i]
            if stage == "valid" and written_as == "edit" and \
                    fingerprint(sources[i], numbers=False) == fingerprint(edited[parent], numbers=False):
                stage, reasons = "duplicate", [f"duplicate: an edit that changes only the names and numbers of {parent}"]
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
            written.append(Design(
                design_id, iteration, skills[slot], doc_ids[i], chats[i], completion, sources[i],
                validation, valid, [] if valid else reasons, len(completion.prompt_ids), attempt,
                stage, written_as=written_as, parent=parent))
            last_of[slot] = written[-1]
        designs += written
        pending = [slot for slot, d in zip(pending, written) if not d.valid]
        if until_valid <= 0:
            if attempt > retries:
                break
        elif (sum(d.valid for d in designs) >= until_valid or len(designs) >= cap
              or (max_seconds > 0 and time.monotonic() - started >= max_seconds)):
            break
    return designs


def write(policy, chats: list[list[dict]], max_new_tokens: int, temperature: float) -> list[Completion]:
    """The designer's batch: in the decoding loop, each row stopping once its environment's block
    has closed (Policy.generate_until), or with `generate` for a policy without that loop. The
    class is asked, not the object: a wrapper that forwards unknown names to a Policy (a scripted
    designer in the tests) writes with its own `generate`."""
    if getattr(type(policy), "generate_until", None) is None:
        return policy.generate(chats, max_new_tokens, temperature=temperature)
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


def _validate_all(sources: list[str | None], limits: SandboxLimits | None, workers: int,
                  require_solution: bool, rngs: list[random.Random], max_turns: int = MAX_TURNS,
                  action_fits=None, min_instances: int = 0) -> list[Validation | None]:
    # Threads here only wait on sandbox child processes; the untrusted code runs in the child.
    # Each validation draws its seeds from a stream of its own, as play draws its seeds.
    from spade_mini.sandbox import validate_env

    def one(source, rng):
        # episodes must end within the contract's cap; the solution must win within the run's
        return None if source is None else validate_env(source, limits=limits, play_turns=max_turns,
                                                           require_solution=require_solution, rng=rng,
                                                           action_fits=action_fits,
                                                           min_instances=min_instances)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, sources, rngs))


def design_record(design: Design, no_hint_solve_rate: float | None = None,
                  hint_solve_rate: float | None = None, regret: float | None = None) -> EnvRecord:
    """The memory record of a design, with its play stats once known."""
    return EnvRecord(design.id, design.iteration, design.skill.setting, design.skill.key,
                     env_title(design.source) if design.source else "no code", design.source or "",
                     design.valid, list(design.reasons), no_hint_solve_rate, hint_solve_rate,
                     regret, levels=design.validation.levels if design.valid and design.validation else 1,
                     written_as=design.written_as, parent=design.parent)
