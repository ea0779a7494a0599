"""The gate's checks that read an environment's texts against its answers, with no model: what
the observation and the hint give away, and a question that the reward does not ask.

Each reads `seen`, per gate seed: (seed, first observation, solution actions as played, hint or
None), and refuses on most seeds, not on one (a chance match is not a habit):

    given_away  a copier wins: the first observation shows the one winning action itself, in
                a \\boxed{...} or in quotes (its first or last such), on most seeds: an example
                line that works this very instance, an answer printed in the text. Unmarked, a
                copier wins on more than three seeds in four by taking one fixed place of the
                question (after its last "Now:"): its first, second, third, last, second or third
                last number ("53 / 14 = 3.79?", "twice that is 14", "7 modulo 12" with 7 always
                below 12), or its first or last sentence. A number the question shows twice or
                more is a repeating pattern's material, never a copy; words are not copied by
                place (a player taking the word at one fixed place rightly wins "say the last
                word"), and a choice of two wins that often by chance about once in a hundred.
    hint        hint() gives the answer away (reward/leaks.py: the answer, its markup, or a part
                of it that with the observation leaves one candidate) on at least half the seeds.
    question    the question asks for an extreme ("cheapest", "largest", "youngest") and the
                answer paid is the other extreme of the numbers the observation gives the
                candidates, on most seeds where that reading applies (at least MIN_READ): "who is
                cheapest?" paying the dearest seller. Two more readings refuse at the same stage:
                `wrong_value`, a question that is one arithmetic expression ("45 + 32 = ?") paid
                with another number; `unshown_form`, an answer written with marks the observation
                never shows (a list's brackets and quotes), a form no player could guess. A
                question that asks for something else than it pays in other words is not seen.
"""
from __future__ import annotations

import re
from collections import Counter

from spade_mini.reward.leaks import TOKEN, answer_of, leaked_answer, tokens

BOXED, QUOTED = re.compile(r"\\boxed\{([^{}]*)\}"), re.compile(r"'([^'\n]{1,40})'|\"([^\"\n]{1,40})\"")
LOW = frozenset("cheapest cheaper least lowest lower smallest smaller fewest fewer shortest shorter youngest younger "
                "lightest lighter nearest closest earliest minimum".split())
HIGH = frozenset("dearest priciest expensive most highest higher largest larger biggest bigger greatest greater "
                 "longest longer oldest older heaviest heavier farthest furthest latest tallest taller maximum".split())
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
MIN_READ = 4  # seeds on which the question check must apply before it refuses


def _quotes(obs: str) -> list[str]:
    return [a or b for a, b in QUOTED.findall(obs)]


def _words(text: str) -> list[str]:
    """The words and numbers of `text`, their case kept (a copy that changes case is a transform)."""
    return TOKEN.findall(text)


def _numbers(obs: str) -> list[str | None]:
    """The question's numbers, each in its place; a number it shows twice or more (a repeating
    pattern's material, read rather than copied) stands as None."""
    numbers = [w for w in _words(_asked(obs)) if NUMBER.fullmatch(w)]
    return [w if numbers.count(w) == 1 else None for w in numbers]


def _sentences(obs: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+|\n", _asked(obs)) if len(_words(s)) >= 3]


def _question(obs: str) -> list[str]:
    """The words of the last sentence that ends in "?", quoted text left out (a quoted sentence
    is material to work on: "the last word of '...'?")."""
    asked = re.findall(r"[^.?!\n]*\?", QUOTED.sub(" ", _asked(obs)))
    return _words(asked[-1]) if asked else []


def _question_words(obs: str) -> list[str]:
    """The question's words without its numbers (the numbers have their own places)."""
    return [w for w in _question(obs) if not NUMBER.fullmatch(w)]


def _nth(items: list, n: int):
    return items[n] if -len(items) <= n < len(items) else None


SLOTS = {0: "first", 1: "second", 2: "third", -1: "last", -2: "second last", -3: "third last"}
MARKED = {"the first \\boxed{} it shows": lambda o: (BOXED.findall(o) or [None])[0],
          "the last \\boxed{} it shows": lambda o: (BOXED.findall(o) or [None])[-1],
          "the first quoted text": lambda o: (_quotes(o) or [None])[0],
          "the last quoted text": lambda o: (_quotes(o) or [None])[-1]}
PLACED = {**{f"the {name} number after \"Now:\"": (lambda o, n=n: _nth(_numbers(o), n)) for n, name in SLOTS.items()},
          "the first sentence after \"Now:\"": lambda o: _nth(_sentences(o), 0),
          "the last sentence after \"Now:\"": lambda o: _nth(_sentences(o), -1),
          **{f"the question's {name} word": (lambda o, n=n: _nth(_question_words(o), n)) for n, name in SLOTS.items()},
          **{f"the question after its first {k} words": (lambda o, k=k: " ".join(_question(o)[k:]) or None)
             for k in (1, 2, 3)}}
COPIES = [(MARKED, 1 / 2), (PLACED, 3 / 4)]  # copiers, and the share of seeds a winner must exceed


def _first_answer(actions) -> str | None:
    answer = answer_of(actions[0]) if actions else None
    return None if answer is None else " ".join(tokens(answer))


def given_away(seen: list[tuple]) -> list[str]:
    """A copier wins the episode: the first observation shows a one-action answer that changes
    with the instance, marked up or at one place (module docstring). A text shown the same on most
    seeds is an option or a format, \\boxed{0} for even, \\boxed{1} for odd: a constant player,
    the solution stage's."""
    one_shot = [(obs, answer_of(actions[0])) for _, obs, actions, _ in seen if len(actions) == 1]
    for copiers, share in COPIES:
        for name, copy in copiers.items():
            copied = [None if copy(obs) is None else " ".join(_words(copy(obs))) for obs, _ in one_shot]
            wins = sum(c is not None and a is not None and c == " ".join(_words(a)) for c, (_, a) in zip(copied, one_shot))
            varied = 2 * max(Counter(copied).values(), default=0) <= len(seen)
            if wins > share * len(seen) and varied:
                return [f"the observation gives the answer away: replying with {name} wins {wins} of {len(seen)} "
                        "seeds; show the task, never its answer (an example line must work another instance)"]
    return []


def leaky_hint(seen: list[tuple]) -> list[str]:
    solutions = [actions for _, _, actions, _ in seen]
    leaks = []
    for i, (seed, obs, actions, hint) in enumerate(seen):
        if hint:
            leak = leaked_answer(hint, actions, solutions[:i] + solutions[i + 1:], obs)
            if leak is not None:
                leaks.append((seed, hint, leak))
    if leaks and 2 * len(leaks) >= len(seen):
        seed, hint, leak = leaks[0]
        return [f"hint() gives the answer away on {len(leaks)} of {len(seen)} seeds (seed {seed}: {hint[:100]!r} "
                f"states {leak!r}); a hint says how to find the answer, never the answer or a part of it that "
                "leaves one choice"]
    return []


def _asked(obs: str) -> str:
    """What the observation asks about: after its last "Now:" (an example line comes before)."""
    return obs.split("Now:")[-1]


def _direction(obs: str) -> str | None:
    lines = _asked(obs).strip().splitlines()
    words = set(tokens(lines[-1])) if lines else set()
    low, high = bool(words & LOW), bool(words & HIGH)
    return "low" if low and not high else "high" if high and not low else None


def _number_of(words: list[str], candidate: str) -> int | None:
    """The number written next to the candidate's first mention (after it, else before it)."""
    if candidate not in words:
        return None
    at = words.index(candidate)
    for near in (*words[at + 1:at + 5], *reversed(words[max(0, at - 3):at])):
        if re.fullmatch(r"-?\d+", near):
            return int(near)
    return None


def wrong_question(seen: list[tuple]) -> list[str]:
    space = {_first_answer(actions) for _, _, actions, _ in seen} - {None}
    read, wrong = 0, []
    for seed, obs, actions, _ in seen:
        answer, direction, words = _first_answer(actions), _direction(obs), tokens(_asked(obs))
        if direction is None or answer is None or len(actions) != 1:
            continue
        if re.fullmatch(r"-?\d+", answer):  # a number: the candidates are the numbers asked about
            numbers = {w: int(w) for w in words if re.fullmatch(r"-?\d+", w)}
        else:  # a name: each candidate's number is the one written next to it
            numbers = {c: _number_of(words, c) for c in ({answer} | (space & set(words)))}
        numbers = {c: n for c, n in numbers.items() if n is not None}
        if answer not in numbers or len(set(numbers.values())) < 2:
            continue
        read += 1
        low, high = min(numbers.values()), max(numbers.values())
        if numbers[answer] == (high if direction == "low" else low):
            wrong.append((seed, direction, answer))
    if read >= MIN_READ and 2 * len(wrong) > read:
        seed, direction, answer = wrong[0]
        asked = "smallest" if direction == "low" else "largest"
        return [f"the question asks for the {asked} but the answer paid is the other extreme on {len(wrong)} of "
                f"{read} seeds (seed {seed} pays {answer!r}); step() must pay what the question asks"]
    return []


EXPRESSION = re.compile(r"(-?\d+(?:\.\d+)?)\s*([-+*/×÷])\s*(-?\d+(?:\.\d+)?)\s*=?\s*\?")
OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "×": lambda a, b: a * b,
              "/": lambda a, b: a / b if b else None, "÷": lambda a, b: a / b if b else None}


def _pays_value(obs: str, actions) -> bool | None:
    """Whether the one answer paid is the value of the question's one arithmetic expression
    ("45 + 32 = ?", "what is 6 * 7?"): exactly, rounded to a few decimals, or a quotient's whole
    part; None where the question is not one such expression."""
    found = EXPRESSION.findall(_asked(obs))
    if len(found) != 1 or len(actions) != 1:
        return None
    a, op, b = found[0]
    value, paid = OPERATIONS[op](float(a), float(b)), answer_of(actions[0])
    try:
        number = float(paid.strip())
    except (AttributeError, ValueError):
        return False
    return value is not None and (any(abs(number - round(value, d)) < 1e-9 for d in range(7))
                                  or (op in "/÷" and number == float(a) // float(b)))


def wrong_value(seen: list[tuple]) -> list[str]:
    """The question is one arithmetic expression and the answer paid is not its value, on most
    seeds where it reads (at least MIN_READ): "45 + 32 = ?" paying 45 - 32."""
    reads = [(seed, obs, _pays_value(obs, actions)) for seed, obs, actions, _ in seen]
    read = sum(paid is not None for _, _, paid in reads)
    wrong = [(seed, obs) for seed, obs, paid in reads if paid is False]
    if read >= MIN_READ and 2 * len(wrong) > read:
        seed, obs = wrong[0]
        a, op, b = EXPRESSION.findall(_asked(obs))[0]
        return [f"the question asks for the value of {a} {op} {b} but step() pays another number on {len(wrong)} "
                f"of {read} seeds (seed {seed}); step() must pay what the question asks"]
    return []


def unshown_form(seen: list[tuple]) -> list[str]:
    """The answer paid is written with marks the observation never shows (a list's brackets and
    quotes, a tuple's parentheses), on most seeds: a form no player could guess."""
    unshown = []
    for seed, obs, actions, _ in seen:
        answer = answer_of(actions[0]) if len(actions) == 1 else None
        marks = {c for c in answer or "" if not c.isalnum() and not c.isspace()} - set(obs)
        if marks:
            unshown.append((seed, answer, "".join(sorted(marks))))
    if 2 * len(unshown) > len(seen):
        seed, answer, marks = unshown[0]
        return [f"the answer paid is written with {marks!r}, which the observation never shows, on {len(unshown)} "
                f"of {len(seen)} seeds (seed {seed} pays {answer[:60]!r}); ask for an answer in a form the text shows"]
    return []
