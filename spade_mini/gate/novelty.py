"""The novelty gate: a design that re-skins a known environment is not a new environment.

The designer copies what it is shown: round four's valid designs were mostly the starter
examples with other names, strings and numbers. A copy teaches the agent nothing new and its
regret measures nothing new, so the gate compares a design with an archive that always holds
the bundled examples, the held-out environments (a rewrite of one would train on what the curve
measures) and every design admitted so far (`Archive`). A design re-skins an entry when

    the logic is the same and so is the behaviour:
        logic      the syntax tree without hint() as a bag of features, each node's kind with
                   its children's kinds, names and literals stripped but builtins, the methods
                   of str, list, dict and random, the contract's methods and every operator
                   kept; the bags overlap by LOGIC_SIMILAR or more (weighted Jaccard: a reworded
                   copy overlaps fully, one with a statement added almost fully), AND the
                   builtins, methods and operators of one's answer and reward code (solution()
                   and step()) contain the other's (so `min` and `max`, `<` and `>`, `words[1]`
                   and `words[-1]` differ, and a copy that adds a line of feedback does not);
        behaviour  what fixed players, each answering the first observation's question by a
                   rule (its first, last, largest or smallest number, their sum, its first or
                   last word), win on the same fixed seeds: no rate differs by more than
                   BEHAVIOUR_CLOSE among the players that find something to answer in both
                   (numbers in a game of numbers). A pick-one-of-three game scores about a
                   third for every blind player, so behaviour alone cannot decide;
    or the task is the same whatever the code: one rule wins SOLVED_BY of the seeds of both with
        VARIED answers, and the behaviour is the same (a sum from another skeleton is add_numbers).

It refines the exact copy check (exact.py). Sources are untrusted: parsed with the sandbox's
bounded `parse_source`, played only in sandbox children. Omitted: a proof of equivalence (two
programs that compute one function differently look alike to the players only when a simple rule
solves them).
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import json
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from spade_mini.gate.exact import drop_docstring
from spade_mini.sandbox import SandboxError, SourceError, parse_source
from spade_mini.sandbox.episodes import Fresh, play

LOGIC_SIMILAR = 0.85    # bags of logic features overlapping this much are the same logic
BEHAVIOUR_CLOSE = 0.25  # players' win rates this close (2 of 8 seeds) are the same behaviour
SOLVED_BY = 0.75        # a rule that wins this share of the seeds solves the task
VARIED = 3              # ... with at least this many different winning answers
PROFILE_BUDGET_S = 15.0  # to play one environment's players
PROFILE_TURNS = 6        # each player plays its answer this many turns at most (a signature, not the run's play)
BUNDLED_PROFILES = Path(__file__).with_name("bundled_profiles.json")  # the archive's fixed part, played once
PROFILE_SEEDS = tuple(range(101, 109))  # every environment's players play these seeds
KEPT_NAMES = frozenset(n for n in dir(builtins) if not n.startswith("_"))
KEPT_ATTRIBUTES = frozenset(n for t in (str, list, dict, set, random.Random) for n in dir(t) if not n.startswith("_")) | \
    frozenset(n for n in dir(random) if not n.startswith("_"))
CONTRACT = frozenset({"reset", "step", "hint", "solution", "__init__", "levels"})
NUMBER, WORD = re.compile(r"-?\d+"), re.compile(r"[A-Za-z]+")


# --- logic -------------------------------------------------------------------------------------------

def _label(node) -> str:
    kind = type(node).__name__
    if isinstance(node, ast.Name):
        return f"Name:{node.id}" if node.id in KEPT_NAMES else kind
    if isinstance(node, ast.Attribute):
        return f"Attribute:{node.attr}" if node.attr in KEPT_ATTRIBUTES else kind
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"def:{node.name}" if node.name in CONTRACT else kind
    if isinstance(node, ast.Constant):
        value = node.value
        return f"Constant:{value!r}" if value is None or isinstance(value, bool) else f"Constant:{type(value).__name__}"
    return kind


def logic(source: str) -> Counter | None:
    """The bag of (node, its children) kinds of the source's tree, docstrings and hint() left out
    (the hint is not the task, and the hint check judges it); None when it does not parse."""
    try:
        tree = parse_source(source)
    except SourceError:
        return None
    for node in ast.walk(tree):
        drop_docstring(node)
        if isinstance(node, ast.ClassDef):
            node.body = [b for b in node.body if getattr(b, "name", None) != "hint"] or [ast.Pass()]
    return Counter((_label(n), tuple(_label(c) for c in ast.iter_child_nodes(n))) for n in ast.walk(tree))


def answer_tokens(source: str) -> frozenset[str]:
    """The builtins, kept methods and operators of the answer and reward code: solution() and
    step(), and every assignment to an attribute they read (`self.best = min(...)` in reset)."""
    try:
        tree = parse_source(source)
    except SourceError:
        return frozenset()
    answer = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in ("solution", "step")]
    read = {n.attr for fn in answer for n in ast.walk(fn) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}
    answer += [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
               and any(isinstance(t, ast.Attribute) and t.attr in read
                       for target in getattr(n, "targets", [getattr(n, "target", None)]) for t in ast.walk(target))]
    kept = set()
    for node in (n for part in answer for n in ast.walk(part)):
        label = _label(node)
        if (":" in label and not label.startswith(("Constant", "def"))) or isinstance(
                node, (ast.operator, ast.cmpop, ast.unaryop, ast.boolop)):
            kept.add(label)
    return frozenset(kept)


def similarity(a: Counter, b: Counter) -> float:
    """Weighted Jaccard of two bags: 1 for the same logic, 0 for nothing shared."""
    keys = a.keys() | b.keys()
    top = sum(max(a[k], b[k]) for k in keys)
    return sum(min(a[k], b[k]) for k in keys) / top if top else 1.0


# --- behaviour ----------------------------------------------------------------------------------------

def question(obs: str) -> str:
    """The part of an observation that asks: after its last "Now:", else its last line."""
    return obs.split("Now:")[-1].strip() if "Now:" in obs else (obs.strip().splitlines() or [""])[-1]


def _numbers(obs: str) -> list[int]:
    return [int(n) for n in NUMBER.findall(question(obs))]


PLAYERS = {  # rule -> its answer to a first observation (None: the rule finds nothing)
    "first number": lambda o: (_numbers(o) or [None])[0],
    "last number": lambda o: (_numbers(o) or [None])[-1],
    "largest number": lambda o: max(_numbers(o), default=None),
    "smallest number": lambda o: min(_numbers(o), default=None),
    "sum of the numbers": lambda o: sum(_numbers(o)) if _numbers(o) else None,
    "first word": lambda o: (WORD.findall(question(o)) or [None])[0],
    "last word": lambda o: (WORD.findall(question(o)) or [None])[-1],
}


def behaviour(source: str, *, limits=None) -> dict | None:
    """Each player's win rate over PROFILE_SEEDS, playing its answer (boxed) every turn for
    PROFILE_TURNS turns at most, and under "varied" the players whose winning answers take at
    least VARIED values (a rule that always answers 0 is a constant, not a way to solve the
    task); None when the environment cannot be played within PROFILE_BUDGET_S."""
    fresh, wins, answers, found = Fresh(source, limits, time.monotonic() + PROFILE_BUDGET_S), Counter(), {}, Counter()
    try:
        for seed in PROFILE_SEEDS:
            env = fresh.take()
            obs, _ = env.reset(seed=seed)
            env.close()
            for name, rule in PLAYERS.items():
                answer = rule(obs)
                found[name] += answer is not None
                if answer is not None and play(fresh, seed, ["\\boxed{%s}" % answer] * PROFILE_TURNS).won:
                    wins[name] += 1
                    answers.setdefault(name, set()).add(answer)
    except SandboxError:
        return None
    finally:
        fresh.close()
    return {**{name: wins[name] / len(PROFILE_SEEDS) for name in PLAYERS},
            "varied": sorted(name for name, won in answers.items() if len(won) >= VARIED),
            "found": sorted(name for name in PLAYERS if 2 * found[name] >= len(PROFILE_SEEDS))}


def close(a: dict, b: dict) -> bool:
    """The same behaviour: every player that answers with varied values in either profile, and
    finds something to answer in both, wins as often in both (a constant answer's rate measures
    only how often that answer is right; a number player facing a game of colours measures that
    it has no numbers, so a cycle of colours and the same cycle of numbers stay one game)."""
    both = set(a.get("found", PLAYERS)) & set(b.get("found", PLAYERS))
    return all(abs(a[name] - b[name]) <= BEHAVIOUR_CLOSE for name in (set(a["varied"]) | set(b["varied"])) & both)


# --- the archive --------------------------------------------------------------------------------------
@dataclass
class Archive:
    """What a design must differ from: (name, source) entries with their logic, and behaviour
    profiles measured when first needed (cached by source)."""
    entries: list[tuple[str, str, Counter]] = field(default_factory=list)
    profiles: dict[str, dict | None] = field(default_factory=dict)
    bundled_count: int = 0  # the first entries, always there; the rest were admitted

    @classmethod
    def bundled(cls) -> "Archive":
        """The prompt's examples, every tier's examples and every held-out environment, with the
        profiles played once and kept in BUNDLED_PROFILES (`python -m spade_mini.gate` writes
        them again; a test checks them)."""
        from spade_mini.designer.prompts import GAME_EXAMPLE, TOOL_EXAMPLE, one_level
        from spade_mini.envs import ALL_EXAMPLES, ALL_HELDOUT
        archive = cls()
        for name, source in [("the prompt's example", src) for ex in (GAME_EXAMPLE, TOOL_EXAMPLE)
                             for src in (ex, one_level(ex))] + \
                [(f"example {e.name}", e.source) for e in ALL_EXAMPLES] + \
                [(f"held-out {e.name}", e.source) for e in ALL_HELDOUT]:
            archive.add(name, source)
        archive.bundled_count = len(archive.entries)
        if BUNDLED_PROFILES.is_file():
            archive.profiles.update(json.loads(BUNDLED_PROFILES.read_text(encoding="utf-8")))
        return archive

    def write_bundled_profiles(self) -> int:
        """Play every bundled entry's players again into BUNDLED_PROFILES; how many."""
        self.profiles.clear()
        profiles = {hashlib.sha256(src.encode()).hexdigest(): self.profile(src)
                    for _, src, _ in self.entries[:self.bundled_count]}
        BUNDLED_PROFILES.write_text(json.dumps(profiles, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return len(profiles)

    def admitted(self) -> list[list[str]]:
        """[name, source] of every entry that is not bundled (what a checkpoint keeps)."""
        return [[name, source] for name, source, _ in self.entries[self.bundled_count:]]

    def add(self, name: str, source: str) -> None:
        bag = logic(source)
        if bag is not None:
            self.entries.append((name, source, bag))

    def profile(self, source: str, limits=None) -> dict | None:
        key = hashlib.sha256(source.encode()).hexdigest()
        if self.profiles.get(key) is None:  # a profile that could not be played is tried again
            self.profiles[key] = behaviour(source, limits=limits)
        return self.profiles[key]

    def reskin_of(self, source: str, limits=None, skip: str | None = None) -> str | None:
        """Why `source` re-skins an entry of the archive (but the one named `skip`, itself), or
        None: the same logic and behaviour (the most similar logic first), else the same task (a
        rule that solves both)."""
        bag, tokens = logic(source), answer_tokens(source)
        if bag is None:
            return None
        ranked = sorted(((similarity(bag, b), n, src) for n, src, b in self.entries if n != skip), reverse=True)
        mine = None
        for sim, name, src in ranked:
            if sim < LOGIC_SIMILAR:
                break
            theirs_tokens = answer_tokens(src)
            if tokens <= theirs_tokens or theirs_tokens <= tokens:
                mine = mine or self.profile(source, limits)
                theirs = self.profile(src, limits)
                if mine and theirs and close(mine, theirs):
                    return f"a re-skin of {name}: the same logic (overlap {sim:.2f}, the same builtins and operators) and behaviour"
        mine = mine or self.profile(source, limits)
        rules = [p for p in PLAYERS if mine and mine[p] >= SOLVED_BY and p in mine["varied"]]
        for sim, name, src in ranked if rules else []:
            theirs = self.profile(src, limits)
            solved = [p for p in rules if theirs and theirs[p] >= SOLVED_BY and p in theirs["varied"]]
            if solved and close(mine, theirs):
                return f"a re-skin of {name}: the same task (the rule '{solved[0]}' solves both) and behaviour"
        return None
