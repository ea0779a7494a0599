"""Does a hint give the answer away? A text check of one hint against one episode's solution.

Regret is what the hint arm wins over the no-hint arm, so a hint that states the answer buys
regret without teaching anything; the trainer checks each hint against the privileged solution
of the episode it is shown in (`spade_mini.sandbox.solve` returns both, per seed). The check is
pure text, with no torch and no sandbox, like everything in reward/

Texts are compared as sequences of lower-case tokens, words and numbers (a number keeps its
sign and decimals), so "42" matches "the number is 42." but not "420", "4.2" or "-42", and other
punctuation and spacing do not matter. A hint
gives the answer away when it contains

  1. the solution's last action itself, when it is marked up ("\\boxed{7}", "<answer>57</answer>",
     a tool call), matched as text (a bare "left" is rule 2's: it would match "leftover"), or
  2. its final answer, the text inside the last \\boxed{...} or <answer>...</answer> (a last
     action without either counts whole; a tool call never does), when its tokens have at
     least MIN_ANSWER_CHARS characters ("-1" does, "7" does not), or
  3. every answer of the solution, in order, when there are at least two ("right right down").

  4. a part of its final answer that, with the observation, leaves one candidate: the answer
     itself, its first or its last character, stated on its own ("it starts with B", "ends in
     the digit 7", "the answer is 7"), when no other candidate shares it. The candidates are
     the observation's words or numbers that are some episode's answer (`others` say which),
     and the answer itself; a letter counts as stated when it stands alone in capitals or in
     quotes ("a" and "I" are words), a digit when it stands alone.

Rules 1 and 2 skip a final answer that is not this episode's own: given `others`, the solutions
of other episodes of the same environment, one that all of them end with too (grid_walk always
ends with "down", kv_rename with "<answer>done</answer>") is a fixed word, not the answer. Rule 4
needs the observation; without one it is not checked.

Not checked on purpose: a single intermediate answer. Search strategies have fixed moves that
honest hints name (bisection opens with 32; code_breaker's hint says "open with 112 and 334"),
and those are solution actions of many episodes. For the same reason the check reads text, not
intent: code_breaker's honest hint IS flagged in the episodes whose code is 112 or 334, where
following it wins at once.

What it cannot catch: an answer rephrased ("forty-two", "6 * 7", "the coin left of 8"), split
("x is 3 and y is -2" for the answer "3,-2"), a part of it that leaves two or more candidates
(the last digit of a sum of two-digit numbers), a hint that narrows the choices without naming a
part ("it is even", "the one that rhymes with cat"), and any leak through the observation or tool
results instead of the hint (validation's `given_away` check reads the observation). A digit or
a capital letter may stand in an honest hint by chance: the gate refuses a design only when its
hints leak on most seeds (spade_mini/gate).
"""
import re
from collections.abc import Sequence

MIN_ANSWER_CHARS = 2
TOKEN = re.compile(r"-?\d+(?:\.\d+)?|\w+")
BOXED = re.compile(r"\\boxed\{(.*)\}", re.S)  # greedy: \boxed{f(x)} keeps its inner braces
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def tokens(text: str) -> list[str]:
    """The lower-case words and numbers of `text` ("x = -1.5" -> ["x", "-1.5"])."""
    return TOKEN.findall(text.lower())


def answer_of(action: str) -> str | None:
    """The answer an action gives: inside its last <answer> or \\boxed{}, the whole action when
    it has neither, None for a tool call (its arguments name what the task already shows)."""
    if "<tool_call>" in action:
        return None
    found = ANSWER.findall(action) or BOXED.findall(action)
    return found[-1] if found else action


def final_answer(solution: Sequence[str]) -> str:
    """The last answer a solution gives ("" when it gives none)."""
    answers = [a for a in map(answer_of, solution) if a is not None]
    return answers[-1] if answers else ""


def contains(words: list[str], phrase: list[str]) -> bool:
    """Is `phrase` a contiguous run of `words` (and not empty)?"""
    n = len(phrase)
    return n > 0 and any(words[i:i + n] == phrase for i in range(len(words) - n + 1))


def stated(hint: str, part: str) -> bool:
    """Does `hint` state `part` on its own: a longer part as a run of its tokens, a digit alone, a
    letter alone in capitals (not "A" or "I": words) or in quotes?"""
    if len(part) > 1:
        return contains(tokens(hint), tokens(part))
    if part.isdigit():
        return part in tokens(hint)
    quoted = re.search(rf"['\"]{re.escape(part)}['\"]", hint, re.I)
    capital = part.upper() not in "AI" and re.search(rf"(?<!\w){re.escape(part.upper())}(?!\w)", hint)
    return bool(quoted or capital)


def narrowed(hint: str, answer: str, candidates: set[str]) -> str | None:
    """The part of `answer` (whole, first or last character) that `hint` states and no other
    candidate shares, or None."""
    answer = " ".join(tokens(answer))
    if not answer:
        return None
    for part_of in (lambda c: c, lambda c: c[0], lambda c: c[-1]):
        part = part_of(answer)
        if stated(hint, part) and all(part_of(c) != part for c in candidates - {answer} if c):
            return part
    return None


def leaked_answer(hint: str, solution: Sequence[str],
                  others: Sequence[Sequence[str]] = (), observation: str | None = None) -> str | None:
    """What of `solution` (one episode's winning actions) `hint` states, by rules 1-4 of the
    module docstring; None when it states none of it. `others`: solutions of other episodes of
    the same environment, when known; `observation`: the episode's first observation (rule 4)."""
    if not solution:
        return None
    words, last, final = tokens(hint), solution[-1].strip(), final_answer(solution)
    own = not others or any(tokens(final_answer(o)) != tokens(final) for o in others)
    if own and answer_of(last) != last and last.lower() in hint.lower():
        return last
    if own and len("".join(tokens(final))) >= MIN_ANSWER_CHARS and contains(words, tokens(final)):
        return final.strip()
    answers = [a for a in map(answer_of, solution) if a is not None]
    if len(answers) >= 2 and contains(words, [t for a in answers for t in tokens(a)]):
        return " ".join(a.strip() for a in answers)
    if observation is not None and own:
        space = {" ".join(tokens(final_answer(o))) for o in others} | {" ".join(tokens(final))}
        shown = set(tokens(observation)) & space
        candidates = shown | {" ".join(tokens(final))} if shown else space
        part = narrowed(hint, final, candidates)
        if part is not None:
            return f"{part} (of the answer {final.strip()!r})" if part != " ".join(tokens(final)) else final.strip()
    return None
