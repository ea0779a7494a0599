"""The gate's checks that read an environment's texts against its answers, with no model: what
the observation and the hint give away, and a question that the reward does not ask.

Each reads `seen`, per gate seed: (seed, first observation, solution actions as played, hint or
None), and refuses on most seeds, not on one (a chance match is not a habit):

    given_away  a copier wins: a player that replies with one piece of the first observation
                wins on more than 3 seeds in 4, and the piece varies with the instance
                (`copies`): the first or last \\boxed{...} or quoted text (an example line that
                works this very instance); or, unmarked, one fixed place: the observation's first
                three numbers, the first, second, third and last three numbers after "Now:"
                ("53 / 14 = 3.79?", "twice that is 14"), the first three and the last word after
                "Now:", quoted text aside ("d, v, ? What pattern?" paid "d"), the number shown
                most often ("The largest is 88"), the first or last sentence, the question's own
                words ("What is the fox?" paid "fox"). A number or word shown twice in its place is a
                repeating pattern's material, never a copy (the next item of a pattern is never
                the one shown most); quoted text is material to work on ("the last word of
                '...'?"); a choice of two wins that often by chance about once in a hundred.
    hint        hint() gives the answer away (reward/leaks.py: the answer, its markup, or a part
                of it that with the observation leaves one candidate) on at least half the seeds.
    question    the question asks for an extreme ("cheapest", "largest", "youngest") and the
                answer paid is the other extreme of the numbers the observation gives the
                candidates, on most seeds where that reading applies (at least MIN_READ): "who is
                cheapest?" paying the dearest seller. Two more readings refuse at the same stage:
                `wrong_value`, a question that is one arithmetic expression and nothing more
                ("45 + 32 = ?", "what is 6 times 7?") paid with another number; `unshown_form`,
                an answer written with marks the observation never shows (a list's brackets and
                quotes; a number's sign, point and fraction bar are its own), a form no player
                could guess. A question that asks for something else than it pays in other
                words is not seen.
"""
from __future__ import annotations

import operator
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


def _once(items: list[str]) -> list[str | None]:
    """Each item in its place; one shown twice or more (a repeating pattern's material, read
    rather than copied) stands as None."""
    count = Counter(items)
    return [w if count[w] == 1 else None for w in items]


def _question(asked: str) -> list[str]:
    """The words of the last sentence that ends in "?", quoted text left out (a quoted sentence
    is material to work on: "the last word of '...'?")."""
    asked = QUOTED.sub(" ", asked)
    end = asked.rfind("?")
    start = max(asked.rfind(mark, 0, end) for mark in ".!?\n") + 1
    return _words(asked[start:end]) if end >= 0 else []


def _nth(items: list, n: int):
    return items[n] if -len(items) <= n < len(items) else None


SLOTS = {0: "first", 1: "second", 2: "third", -1: "last", -2: "second last", -3: "third last"}
COPY_SHARE = 3 / 4  # a copier that wins on more than this share of the seeds has found the answer


def copies(obs: str) -> dict[str, str | None]:
    """What each copier replies to one observation (None: nothing at its place). Marked text: the
    first or last \\boxed{} or quoted text. Places: the first three numbers of the observation,
    the first, second, third and last three numbers after "Now:", its first three and last words
    (quoted text aside), the one number shown more often
    than any other (the next item of a repeating pattern never is), the first or last sentence
    after "Now:", the question's first and last three words (numbers aside) and the question
    after its first 1-3 words. A number or word shown twice is not at one place."""
    asked = _asked(obs)
    boxed, quotes = BOXED.findall(obs), _quotes(obs)
    everywhere = [w for w in _words(obs) if NUMBER.fullmatch(w)]
    items = _once(_words(QUOTED.sub(" ", asked)))  # quoted text is material to work on
    numbers = _once([w for w in _words(asked) if NUMBER.fullmatch(w)])
    top, shown_once = Counter(everywhere).most_common(2), _once(everywhere)
    sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n", asked) if len(_words(s)) >= 3]
    question = _question(asked)
    words = _once([w for w in question if not NUMBER.fullmatch(w)])
    out = {"the first \\boxed{} it shows": _nth(boxed, 0), "the last \\boxed{} it shows": _nth(boxed, -1),
           "the first quoted text": _nth(quotes, 0), "the last quoted text": _nth(quotes, -1),
           **{f"the observation's {SLOTS[n]} number": _nth(shown_once, n) for n in range(3)},
           **{f"the {name} number after \"Now:\"": _nth(numbers, n) for n, name in SLOTS.items()},
           **{f"the {SLOTS[n]} word after \"Now:\"": _nth(items, n) for n in (0, 1, 2, -1)},
           "the number shown most often": top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) else None,
           "the first sentence after \"Now:\"": _nth(sentences, 0),
           "the last sentence after \"Now:\"": _nth(sentences, -1),
           **{f"the question's {name} word": _nth(words, n) for n, name in SLOTS.items()},
           **{f"the question after its first {k} words": " ".join(question[k:]) or None for k in (1, 2, 3)}}
    return {name: None if text is None else " ".join(_words(text)) or None for name, text in out.items()}


def _first_answer(actions) -> str | None:
    answer = answer_of(actions[0]) if actions else None
    return None if answer is None else " ".join(tokens(answer))


def given_away(seen: list[tuple]) -> list[str]:
    """A copier wins the episode: the first observation shows a one-action answer that changes
    with the instance, marked up or at one place (`copies`), on more than COPY_SHARE of the seeds.
    A text shown the same on most seeds is an option or a format, \\boxed{0} for even, \\boxed{1}
    for odd: a constant player, the solution stage's."""
    one_shot = [(copies(obs), answer_of(actions[0])) for _, obs, actions, _ in seen if len(actions) == 1]
    answers = [None if a is None else " ".join(_words(a)) for _, a in one_shot]
    for name in (one_shot[0][0] if one_shot else ()):
        copied = [c[name] for c, _ in one_shot]
        wins = sum(c is not None and c == a for c, a in zip(copied, answers))
        varied = 2 * max(Counter(copied).values()) <= len(seen)
        if wins > COPY_SHARE * len(seen) and varied:
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


SYMBOL = {"+": "+", "plus": "+", "-": "-", "minus": "-", "*": "*", "×": "*", "x": "*", "times": "*",
          "/": "/", "÷": "/", "divided by": "/"}  # an operator as written -> the one it is
OPERATIONS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
EXPRESSION = re.compile(r"^\W*(?:[A-Za-z]+\W+){0,2}?(-?\d+(?:\.\d+)?)\s*(%s)\s*(-?\d+(?:\.\d+)?)\s*=?\s*\?\s*$"
                        % "|".join(re.escape(op) for op in SYMBOL))


def _pays_value(obs: str, actions) -> bool | None:
    """Whether the one answer paid is the value of a question that is one arithmetic expression
    and nothing more ("45 + 32 = ?", "what is 6 times 7?", at most two words before it):
    exactly, rounded to a few decimals, or a quotient's whole part; None where the question is
    not such an expression, the answer is a tool call, or the value does not exist."""
    lines = _asked(obs).strip().splitlines()
    found = EXPRESSION.match(lines[-1]) if lines and len(actions) == 1 else None
    paid = answer_of(actions[0]) if found else None
    if paid is None:
        return None
    a, op, b = float(found[1]), SYMBOL[found[2]], float(found[3])
    if op == "/" and b == 0:
        return None
    value = OPERATIONS[op](a, b)
    try:
        number = float(paid.strip())
    except ValueError:
        return False
    return any(abs(number - round(value, d)) < 1e-9 for d in range(7)) or (op == "/" and number == a // b)


def wrong_value(seen: list[tuple]) -> list[str]:
    """The question is one arithmetic expression and the answer paid is not its value, on most
    seeds where it reads (at least MIN_READ): "45 + 32 = ?" paying 45 - 32."""
    reads = [(seed, obs, _pays_value(obs, actions)) for seed, obs, actions, _ in seen]
    read = sum(paid is not None for _, _, paid in reads)
    wrong = [(seed, obs) for seed, obs, paid in reads if paid is False]
    if read >= MIN_READ and 2 * len(wrong) > read:
        seed, obs = wrong[0]
        a, op, b = EXPRESSION.match(_asked(obs).strip().splitlines()[-1]).groups()
        return [f"the question asks for the value of {a} {op} {b} but step() pays another number on {len(wrong)} "
                f"of {read} seeds (seed {seed}); step() must pay what the question asks"]
    return []


def unshown_form(seen: list[tuple]) -> list[str]:
    """The answer paid is written with marks the observation never shows (a list's brackets and
    quotes, a tuple's parentheses), on most seeds: a form no player could guess."""
    unshown = []
    for seed, obs, actions, _ in seen:
        answer = answer_of(actions[0]) if len(actions) == 1 else None
        bare = re.sub(r"-?\d+(?:[./]\d+)?", " ", answer or "")  # a number's sign, point or fraction bar is its own
        marks = {c for c in bare if not c.isalnum() and not c.isspace()} - set(obs)
        if marks:
            unshown.append((seed, answer, "".join(sorted(marks))))
    if 2 * len(unshown) > len(seen):
        seed, answer, marks = unshown[0]
        return [f"the answer paid is written with {marks!r}, which the observation never shows, on {len(unshown)} "
                f"of {len(seen)} seeds (seed {seed} pays {answer[:60]!r}); ask for an answer in a form the text shows"]
    return []
