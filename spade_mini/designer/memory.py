"""The environment memory: what the designer has made before, and how it went.

SPADE keeps the last 200 environments with their skill, code head, solve rate and regret. Each
designer prompt shows up to 2 same-skill *references* (valid, no-hint solve rate inside a band,
ranked by regret, asking for a DIFFERENT environment) and up to 1 *avoid* example (too easy or too
hard). The memory is seeded with the hand-written example environments (never the held-out ones).

Differences from the reference, on purpose: the avoid example carries its stats and a one-line
summary (the reference shows only a file stem, which tells the designer almost nothing); seeded
examples whose stats are unknown may serve as references when no played environment of that
skill lies in the band, so the first designer prompts already show a working environment; a
reference is shown whole or not at all (REFERENCE_MAX_CHARS: a small designer copies a source cut
mid-code, and every such copy failed at syntax in round four).
Omitted: invalid records are stored (for the log) but never shown.
"""
from __future__ import annotations

import ast
import json
import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from spade_mini.reward.bands import REFERENCE_BAND, within
from spade_mini.sandbox import MAX_SOURCE_CHARS, SourceError, parse_source

MAX_RECORDS = 200
BAND = REFERENCE_BAND  # the solve rates of the designs a prompt shows as references (reward/bands.py)
REFERENCES = 2  # reference environments per prompt
REFERENCE_POOL = 6  # sample the references from this many of the highest-regret records
REFERENCE_MAX_CHARS = 2400  # a reference is shown whole; a longer source is never one (a cut one is copied cut)
MAX_TITLE_CHARS = 120  # a title is the designer's own docstring: one line, and this long at most


@dataclass
class EnvRecord:
    id: str
    iteration: int  # -1 for seeded examples
    setting: str  # "games" | "tool_use"
    skill: str  # a skill key
    title: str  # first docstring line of the Env class, or its name
    source: str
    valid: bool
    reasons: list[str] = field(default_factory=list)
    no_hint_solve_rate: float | None = None  # None: invalid or not played
    hint_solve_rate: float | None = None
    regret: float | None = None
    level: int = 0  # the difficulty level it reached in the active pool (pool.py)
    levels: int = 1  # how many levels it has
    pool_rate: float | None = None  # its no-hint rate over the pool's last window, at `level`
    pool_exit: str | None = None  # why it left the pool (None: never in it, or still there)
    shape: dict = field(default_factory=dict)  # what it asks (gate.shape_of: form, turns, example); {} unknown
    alignment: float | None = None  # its latest alignment reading over the floor (alignment.py; --alignment-memory)


@dataclass
class Selection:
    references: list[EnvRecord]
    avoid: EnvRecord | None


def short_title(text: str) -> str:
    """One line of at most MAX_TITLE_CHARS: a title is written by the designer, and three
    unbounded ones once pushed the next designer prompt past the model's context."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_TITLE_CHARS else line[:MAX_TITLE_CHARS - 3] + "..."


def env_title(source: str) -> str:
    """First line of the `*Env` class docstring, else the class name, as a `short_title`
    (bounded parse: the source is generated, and may be huge or nested deep on purpose)."""
    try:
        tree = parse_source(source)
    except SourceError:
        match = re.search(r"^class\s+(\w*Env)\b", source[:MAX_SOURCE_CHARS], re.MULTILINE)
        return short_title(match.group(1)) if match else "untitled environment"
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Env"):
            doc = ast.get_docstring(node)
            first = doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""
            return short_title(first or node.name)
    return "untitled environment"


class Memory:
    def __init__(self, max_records: int = MAX_RECORDS, band: tuple[float, float] = BAND):
        self.max_records = max_records
        self.band = band
        self.records: list[EnvRecord] = []

    def __len__(self) -> int:
        return len(self.records)

    def add(self, records: EnvRecord | Iterable[EnvRecord]) -> None:
        """Append one record or several; past `max_records` the oldest invalid design is evicted
        first (every attempt is recorded, and invalid ones are never shown), then the oldest."""
        self.records.extend([records] if isinstance(records, EnvRecord) else records)
        while len(self.records) > self.max_records:
            invalid = next((i for i, r in enumerate(self.records) if not r.valid), 0)
            del self.records[invalid]

    def select(self, skill: str, rng: random.Random, references: int = REFERENCES) -> Selection:
        same = [r for r in self.records if r.skill == skill and r.valid and len(r.source) <= REFERENCE_MAX_CHARS]
        in_band = [r for r in same if within(r.no_hint_solve_rate, self.band)
                   and (r.alignment is None or r.alignment >= -1.0)]  # never a misaligned one
        # newest first, then a stable sort by alignment, then regret: ties go to the newer environment
        in_band = sorted(reversed(in_band), key=lambda r: (-(r.alignment or 0.0), -(r.regret or 0.0)))
        picked = rng.sample(in_band[:REFERENCE_POOL], min(references, len(in_band)))
        if len(picked) < references:
            unplayed = [r for r in same if r.no_hint_solve_rate is None]
            picked += rng.sample(unplayed, min(references - len(picked), len(unplayed)))
        outside = [r for r in same if r.no_hint_solve_rate is not None and not within(r.no_hint_solve_rate, self.band)]
        avoid = rng.choice(outside) if outside else None
        return Selection(picked, avoid)

    def note_pool(self, row: dict) -> None:
        """What the active pool says of one of its environments (a life-table row, pool.py):
        the level it reached, its recent rate there, why it left."""
        for r in self.records:
            if r.id == row["id"]:
                r.level, r.levels, r.pool_rate, r.pool_exit = row["level"], row["levels"], row["rate"], row["why"]

    def note_alignment(self, readings: dict[str, float]) -> None:
        """Each environment's latest alignment reading over the floor: `select` ranks by it, and
        never shows one whose latest reading is below -1 (the pool waits for two in a row: a
        reference shown to the designer costs more than a replay)."""
        for r in self.records:
            if r.id in readings:
                r.alignment = readings[r.id]

    def invalidate(self, env_id: str, reason: str) -> None:
        """An environment found broken after it validated (it crashed in play): invalid from now
        on, so it is never a reference nor comes back to the pool."""
        for r in self.records:
            if r.id == env_id:
                r.valid, r.reasons = False, r.reasons + [reason]

    def render(self, selection: Selection) -> str:
        """The memory block of the designer prompt ("" when there is nothing to show)."""
        parts = []
        if selection.references:
            parts.append("<REFERENCE_ENVIRONMENTS>\nEarlier environments for this skill. "
                         "Create a DIFFERENT environment, not a copy.")
            for number, record in enumerate(selection.references, start=1):
                code = record.source.strip()
                parts.append(f"{number}. {short_title(record.title)} ({_stats(record)})\n```python\n{code}\n```")
            parts.append("</REFERENCE_ENVIRONMENTS>")
        if selection.avoid is not None:
            record = selection.avoid
            why = "too easy" if record.no_hint_solve_rate > self.band[1] else "too hard"
            parts.append(f"AVOID environments like this one, which was {why} "
                         f"({_stats(record)}): {short_title(record.title)}")
        return "\n".join(parts)

    def save(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            for record in self.records:
                handle.write(json.dumps(asdict(record)) + "\n")

    @classmethod
    def load(cls, path: str | Path, max_records: int = MAX_RECORDS,
             band: tuple[float, float] = BAND) -> "Memory":
        memory = cls(max_records, band)
        with open(path, encoding="utf-8") as handle:
            known = {f.name for f in fields(EnvRecord)}  # an older run's record may hold a field since removed
            memory.add(EnvRecord(**{k: v for k, v in json.loads(line).items() if k in known})
                       for line in handle if line.strip())
        return memory

    @classmethod
    def seeded(cls, examples, solve_rates: dict[str, tuple[float, float]] | None = None,
               max_records: int = MAX_RECORDS, band: tuple[float, float] = BAND,
               shapes: dict[str, dict] | None = None) -> "Memory":
        """A memory holding the hand-written examples (`HandEnv`s from spade_mini.envs.EXAMPLES).

        `solve_rates` optionally maps an example name to its (no-hint, hint) solve rates, and
        `shapes` to what it asks (gate.describe).
        """
        held_out = _held_out_names()
        memory = cls(max_records, band)
        for example in examples:
            if example.name in held_out:
                raise ValueError(f"{example.name!r} is a held-out environment; seed the memory "
                                 "with spade_mini.envs.EXAMPLES only.")
            no_hint, hint = (solve_rates or {}).get(example.name, (None, None))
            regret = None if no_hint is None or hint is None else hint - no_hint
            memory.add(EnvRecord(
                id=f"example-{example.name}", iteration=-1, setting=example.setting,
                skill=example.skill, title=example.summary or env_title(example.source),
                source=example.source, valid=True, no_hint_solve_rate=no_hint,
                hint_solve_rate=hint, regret=regret, shape=(shapes or {}).get(example.name, {})))
        return memory

    def coverage(self, setting: str, skills: list[str]) -> str:
        """One paragraph for the designer prompt: what the valid environments of `setting` cover
        (skills, answer forms, turns, worked examples) and what none of them does yet."""
        valid = [r for r in self.records if r.valid and r.setting == setting]
        if not valid:
            return ""
        by_skill = Counter(r.skill for r in valid)
        shaped = [r.shape for r in valid if r.shape]
        forms = Counter(s["form"] for s in shaped)
        turns = Counter("one turn" if s["turns"] <= 1 else "several turns" for s in shaped)
        lines = [f"The environments so far ({len(valid)}) cover these skills: "
                 + ", ".join(f"{k} {n}" for k, n in by_skill.most_common())
                 + "; none yet: " + (", ".join(k for k in skills if k not in by_skill) or "-") + "."]
        if shaped:
            missing = [f for f in ("number", "word", "phrase") if f not in forms] + \
                [t for t in ("one turn", "several turns") if t not in turns]
            lines.append(f"Of the {len(shaped)} described: answers {', '.join(f'a {f} {n}' for f, n in forms.items())}; "
                         + ", ".join(f"{t} {n}" for t, n in turns.items())
                         + f"; a worked example line in {sum(s['example'] for s in shaped)}"
                         + (f"; none yet: {', '.join(missing)}" if missing else "") + ".")
        return "COVERAGE: " + " ".join(lines) + " Aim at what is missing; never repeat a task above in new words."


def _stats(record: EnvRecord) -> str:
    if record.no_hint_solve_rate is None:
        return "not played yet"

    def show(value):
        return "unknown" if value is None else f"{value:.2f}"
    pool = ("" if record.pool_rate is None else
            f"; in the pool it reached level {record.level} of {record.levels - 1} (solve rate "
            f"{record.pool_rate:.2f} there)" + (f", left: {record.pool_exit}" if record.pool_exit else ""))
    return (f"solve rate {show(record.no_hint_solve_rate)} without hint, "
            f"{show(record.hint_solve_rate)} with hint, regret {show(record.regret)}{pool}")


def _held_out_names() -> set[str]:
    try:
        from spade_mini.envs import ALL_HELDOUT
    except ImportError:  # the envs package is optional for the memory itself
        return set()
    return {env.name for env in ALL_HELDOUT}
