"""The gate (spade_mini/gate): each refusal with a broken design and its minimal well-posed twin,
through the one admission call the design pipeline uses; the re-skin check's golden cases; and
what a refused design earns (never more than an honest valid one)."""
import random

import pytest

from spade_mini.envs import ALL_EXAMPLES, ALL_HELDOUT, MIN_INSTANCES
from spade_mini.gate import Archive, GateSettings, admit
from spade_mini.gate.novelty import LOGIC_SIMILAR, answer_tokens, logic, similarity
from spade_mini.reward import apply_invalid_policy, lowest_valid_reward
from spade_mini.reward.invalidity import INVALID_STAGES

GATE = GateSettings(play_turns=6)
SHOP = '''import random


class ShopEnv:
    """Three stalls sell an apple; buy from the cheapest."""

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.stalls = dict(zip(rng.sample(["Ann", "Bob", "Cal", "Dee", "Eve", "Max"], 3), rng.sample(range(2, 30), 3)))
        self.best = min(self.stalls, key=self.stalls.get)
        offers = ", ".join(f"{s} asks {p} coins" for s, p in self.stalls.items())
        return f"Now: {offers}. Who is cheapest?", {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%s}" % self.best
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def hint(self):
        return "Compare the prices and pick the lowest."

    def solution(self):
        return ["\\\\boxed{%s}" % self.best]
'''


def verdict(source: str, **kw):
    return admit(source, kw.pop("gate", GATE), random.Random(0), **kw)


def test_the_honest_shop_passes_every_check():
    assert verdict(SHOP, archive=Archive.bundled()).stage == "valid"


@pytest.mark.parametrize("stage, broken", [
    ("given_away", SHOP.replace('return f"Now: {offers}. Who is cheapest?", {}',
                                'return f"Example: {offers}. Cheapest? \\\\boxed{{{self.best}}}\\nNow: {offers}. Who is cheapest?", {}')),
    ("hint", SHOP.replace('return "Compare the prices and pick the lowest."',
                          'return "The cheapest name starts with %s." % self.best[0]')),
    ("question", SHOP.replace("self.best = min(", "self.best = max(")),
    ("question", SHOP.replace('"\\\\boxed{%s}" % self.best', '"\\\\boxed{%s}" % [self.best]')),  # pays "['Ann']"
    ("instances", SHOP.replace('rng.sample(["Ann", "Bob", "Cal", "Dee", "Eve", "Max"], 3)', '["Ann", "Bob", "Cal"]')
                      .replace("rng.sample(range(2, 30), 3)", "rng.choice([[3, 5, 9], [5, 9, 3], [9, 3, 5], [4, 6, 8]])")),
])
def test_each_refusal_names_its_stage_and_its_minimal_twin_passes(stage, broken):
    """Each broken design differs from the honest shop in one line; the stage it is refused at
    is the check for its defect (the twin, the honest shop, passes every check: above)."""
    result = verdict(broken)
    assert result.stage == stage and not result.ok, (result.stage, result.reasons)
    assert result.reasons and all(isinstance(r, str) for r in result.reasons)


def test_a_question_that_asks_for_the_dearest_and_pays_it_passes():
    dearest = SHOP.replace("self.best = min(", "self.best = max(").replace("Who is cheapest?", "Who is dearest?")
    assert verdict(dearest).stage == "valid"


def test_a_hint_naming_an_initial_that_two_candidates_share_gives_nothing_away():
    twins = SHOP.replace('["Ann", "Bob", "Cal", "Dee", "Eve", "Max"]', '["Ann", "Abe", "Amy", "Ada", "Ava", "Ali"]')
    hinted = twins.replace('return "Compare the prices and pick the lowest."',
                           'return "The cheapest name starts with %s." % self.best[0]')
    assert verdict(hinted).stage == "valid"  # every name starts with A: it leaves three



SUM = '''import random


class SumEnv:
    """Add two numbers."""

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(10, 99), rng.randint(10, 99)
        return f"Now: what is {self.a} + {self.b}?", {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%d}" % (self.a + self.b)
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def hint(self):
        return "Add the tens, then the ones."

    def solution(self):
        return ["\\\\boxed{%d}" % (self.a + self.b)]
'''


@pytest.mark.parametrize("name, broken", [
    ("the result printed after the sum", SUM.replace('what is {self.a} + {self.b}?"',
                                                     '{self.a} + {self.b} = {self.a + self.b}. What is the sum?"')),
    ("a sum whose second term is always 0", SUM.replace("rng.randint(10, 99), rng.randint(10, 99)",
                                                        "rng.randint(10, 99), 0")),
])
def test_an_answer_that_stands_at_one_place_of_the_question_is_refused_and_its_twin_passes(name, broken):
    """Not marked up, the answer printed as a number at one fixed place of the question: a copier
    of that place wins every seed. The twin (the honest sum) passes every check."""
    assert verdict(SUM).stage == "valid"
    result = verdict(broken)
    assert result.stage == "given_away" and "number" in result.reasons[0], (name, result.reasons)


def test_a_sum_asked_and_a_difference_paid_is_refused_at_question():
    result = verdict(SUM.replace("(self.a + self.b)", "(self.a - self.b)"))
    assert result.stage == "question" and "value of" in result.reasons[0], result.reasons


def test_a_question_that_pays_its_own_words_is_refused_and_a_choice_between_named_ones_passes():
    """"What is the fox?" paid with "fox", or "At the left end?" with "left end": the question's
    own words at one place win every seed. A choice ("Ann or Bob: who is cheaper?") and a quoted
    sentence to work on ("the last word of '...'?") are read, not copied."""
    from spade_mini.gate.answers import given_away
    rng = random.Random(2)
    animals, places = "fox dog cat owl hen yak elk ant".split(), ["left end", "right end", "middle"]
    own, place, choice, quoted = [], [], [], []
    for seed in range(16):
        a, b = rng.sample(animals, 2)
        own.append((seed, f"Now: the {a} is big, the {b} is small. What is the {a}?", (f"\\boxed{{{a}}}",), None))
        at = rng.choice(places)
        place.append((seed, f"Now: left to right: {a}, {b}. At the {at}?", (f"\\boxed{{{at}}}",), None))
        pa, pb = rng.sample(range(2, 30), 2)
        choice.append((seed, f"Now: {a} asks {pa} coins, {b} asks {pb}. {a} or {b}: who is cheaper?",
                       (f"\\boxed{{{a if pa < pb else b}}}",), None))
        quoted.append((seed, f'Now: the last word of "the {b} saw the {a}"?', (f"\\boxed{{{a}}}",), None))
    assert "question's last word" in given_away(own)[0]
    assert "question after its first 2 words" in given_away(place)[0]
    assert given_away(choice) == [] and given_away(quoted) == []


def test_a_repeating_pattern_or_a_choice_of_two_is_not_a_copy():
    """A fixed place that holds the answer by chance (one of two numbers) or because the pattern
    repeats ("3 5 1 3 5 1 3 5 ?": the answer shown twice before) is read, not copied."""
    from spade_mini.gate.answers import given_away
    rng = random.Random(1)
    pattern, choice = [], []
    for seed in range(16):
        row = rng.sample(range(10), 3)
        pattern.append((seed, f"Now: {' '.join(map(str, row * 3))} ?", (f"\\boxed{{{row[0]}}}",), None))
        a, b = rng.sample(range(10, 99), 2)
        choice.append((seed, f"Now: which is smaller, {a} or {b}?", (f"\\boxed{{{min(a, b)}}}",), None))
    assert given_away(pattern) == [] and given_away(choice) == []
    printed = [(s, f"Now: {o.split()[1]} twice is {2 * int(o.split()[1])}. What is twice it?",
                (f"\\boxed{{{2 * int(o.split()[1])}}}",), None) for s, o, _, _ in pattern]
    assert given_away(printed) and "second number" in given_away(printed)[0]



def _seen(rows):
    """(observation, paid answer) pairs as the text checks read them, one per gate seed."""
    return [(seed, obs, (f"\\boxed{{{answer}}}",), None) for seed, (obs, answer) in enumerate(rows)]


def _draws(n=16, seed=3):
    rng = random.Random(seed)
    return [(rng.randint(10, 99), rng.randint(10, 99), rng.randint(2, 9)) for _ in range(n)]


HONEST = {  # well-posed questions an earlier reading refused: each must pass every text check
    "a sum of three": [(f"Now: {a} + {b} + {c} = ?", a + b + c) for a, b, c in _draws()],
    "precedence": [(f"Now: {c} + {a} * {b} = ?", c + a * b) for a, b, c in _draws()],
    "the last digit of a product": [(f"Now: what is the last digit of {a} * {b}?", a * b % 10) for a, b, _ in _draws()],
    "a remainder": [(f"Now: what is the remainder of {a} / {c}?", a % c) for a, _, c in _draws()],
    "a negative answer in words": [(f"Now: it is {c} degrees and falls by {a}. How warm is it now?", c - a)
                                   for a, _, c in _draws()],
    "a decimal quotient": [(f"Now: what is {a} / 2?", a / 2) for a, _, _ in _draws()],
    "a fraction": [(f"Now: a pizza has {c + 1} slices and 1 is eaten. What fraction is left?", f"{c}/{c + 1}")
                   for _, _, c in _draws()],
    "a quoted choice of two": [(f"Now: which word is longer, '{w}' or '{v}'?", max(w, v, key=len))
                               for w, v in [random.Random(i).sample(["cat", "zebra", "ox", "horse", "emu",
                                                                       "giraffe"], 2) for i in range(16)]],
    "the item after one named in a row": [(f"Now: {', '.join(row)}. Which item comes after {row[i]}?", row[i + 1])
                                          for i, row in [(random.Random(i).randrange(3),
                                                          random.Random(i).sample("abcdefgh2345", 4)) for i in range(16)]],
    "a word pattern of period 3": [(f"Now: what comes next in {', '.join((row * 3)[:7])}?", row[7 % 3])
                                   for row in [random.Random(i).sample(["red", "blue", "green", "pink", "gold"], 3)
                                               for i in range(16)]],
}


@pytest.mark.parametrize("name", list(HONEST))
def test_well_posed_questions_pass_every_text_check(name):
    from spade_mini.gate import TEXT_CHECKS
    seen = _seen(HONEST[name])
    assert [stage for stage, reasons_of in TEXT_CHECKS if reasons_of(seen)] == [], name


GIVEN = {  # answers shown unmarked, away from the question's own places
    "an example line that works this instance": [(f"Example: {a} + {b} = {a + b}\nNow: {a} + {b} = ?", a + b)
                                                  for a, b, _ in _draws()],
    "a target before the question": [(f"[target={a * b}]\nNow: what is {a} times {b}?", a * b) for a, b, _ in _draws()],
    "the first item of a row, asked as its pattern": [(f"Now: {', '.join(row)}, ? What is the pattern?", row[0])
                                                      for row in [random.Random(i).sample("abcdefgh2345", 3)
                                                                  for i in range(16)]],
    "the largest restated": [(f"Now: {a}, {b}, {c}, {a + b}. The largest is {a + b}. Which is largest?", a + b)
                             for a, b, c in _draws()],
}


@pytest.mark.parametrize("name", list(GIVEN))
def test_an_answer_shown_away_from_the_question_is_given_away(name):
    from spade_mini.gate.answers import given_away
    assert given_away(_seen(GIVEN[name])), name


def test_a_question_in_words_paid_with_another_operation_is_refused():
    from spade_mini.gate.answers import wrong_value
    seen = _seen([(f"Now: what is {a} times {c}?", a + c) for a, _, c in _draws()])
    assert "value of" in wrong_value(seen)[0]
    tool = [(s, f"Now: what is {a} + {b}?", ('<tool_call>{"name": "add"}</tool_call>',), None)
            for s, (a, b, _) in enumerate(_draws())]
    assert wrong_value(tool) == []  # a tool call answers nothing to compare


COIN = '''import random


class CoinEnv:
    """Name the animal that won round R."""

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.round = rng.randint(1, 10**6)
        self.animal = rng.choice(["cat", "dog", "owl", "fox"])
        return f"Round {self.round}: cat, dog, owl or fox? Answer in \\\\boxed{{}}.", {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%s}" % self.animal
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def solution(self):
        return ["\\\\boxed{%s}" % self.animal]
'''


def test_a_coin_flip_whose_observations_never_repeat_is_refused_and_its_twin_passes():
    """Round four's `decided` grouped seeds by their exact observation; a round number makes every
    observation differ, and the answer a coin flip. Changing the reset's draws finds it."""
    result = verdict(COIN)
    assert result.stage == "decided" and "changing random draw" in result.reasons[0], result.reasons
    before = "{dict(cat='fox', dog='cat', owl='dog', fox='owl')[self.animal]}"
    shown = COIN.replace("Round {self.round}: cat", "Round {self.round} (the winner follows %s in cat, dog, owl, fox): cat" % before)
    assert verdict(shown).stage == "valid"


PROFIT = '''import random


class ProfitEnv:
    """Sell the product with the largest profit."""

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.products = rng.sample(["apple", "pear", "fig", "plum"], 4)
        self.prices = rng.sample(range(2, 20), 4)
        self.profits = rng.sample(range(1, 100), 4)
        self.best = self.products[self.profits.index(max(self.profits))]
        offers = ", ".join(f"{p} costs {c}" for p, c in zip(self.products, self.prices))
        return f"Now: {offers}. Which one sells at the largest profit?", {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%s}" % self.best
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def solution(self):
        return ["\\\\boxed{%s}" % self.best]
'''


def test_a_hidden_number_that_decides_the_answer_is_refused_and_its_twin_passes():
    """Round five's `make train` admitted this kind: the profits drawn but never shown, the
    answer their largest. A changed draw that moves one profit by 1 seldom changes which is
    largest; one that moves it by half the range does, with the observation as it was."""
    result = verdict(PROFIT)
    assert result.stage == "decided" and "changing random draw" in result.reasons[0], result.reasons
    shown = PROFIT.replace('f"{p} costs {c}" for p, c in zip(self.products, self.prices)',
                           'f"{p} costs {c}, profit {g}" for p, c, g in zip(self.products, self.prices, self.profits)')
    assert verdict(shown).stage == "valid"


SUIT = '''import random

SUITS = ["hearts", "diamonds", "clubs", "spades"]


class SuitEnv:
    """Name the suit of the card drawn."""

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.round, k = rng.randint(1, 10**6), rng.randrange(4)
        self.suit, colour = SUITS[k], "red" if k < 2 else "black"
        return f"Round {self.round}: a {colour} card is drawn. Its suit?", {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%s}" % self.suit
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def solution(self):
        return ["\\\\boxed{%s}" % self.suit]
'''


def test_a_hidden_draw_that_only_its_neighbour_keeps_hidden_is_refused_and_its_twin_passes():
    """The colour shows half of the draw: moved by half its range the draw changes the colour (the
    observation), moved to its neighbour it changes only the suit, so the gate moves draws both
    ways (round five's design bench wrote such a plan: a neighbouring first move, the same end)."""
    result = verdict(SUIT)
    assert result.stage == "decided" and "changing random draw" in result.reasons[0], result.reasons
    told = SUIT.replace("a {colour} card is drawn.", "a {colour} card of the {('first', 'second')[k % 2]} {colour} suit "
                        "of hearts, diamonds, clubs, spades is drawn.")  # the other half of the draw, shown
    assert verdict(told).stage == "valid", verdict(told)


def test_k_is_one_for_every_preset_whatever_the_plays_per_design():
    from spade_mini.config import Config
    from spade_mini.settings import gate_settings
    for plays in (2, 4, 8, 16):
        assert gate_settings(Config(plays_per_design=plays)).min_instances == MIN_INSTANCES


# --- re-skins: golden cases ----------------------------------------------------------------------

SECOND_WORD = next(e.source for e in ALL_HELDOUT if e.name == "second_word")
LAST_WORD = next(e.source for e in ALL_HELDOUT if e.name == "last_word")
CHEAPER = next(e.source for e in ALL_EXAMPLES if e.name == "cheaper_shop")
REWORDED = (CHEAPER.replace("CheaperShopEnv", "FruitStallEnv").replace("Ann Bob Cal Dee Eve Max", "Ivy Kim Lou Ned Ola Pam")
            .replace("coins", "cents").replace("Joe asks 9 cents, Mia asks 4 cents", "Sam wants 8 cents, Tia wants 3 cents")
            .replace("boxed{{Mia}}", "boxed{{Tia}}").replace("Cheapest?", "Who is cheapest?"))
ADDED = CHEAPER.replace("        self.best = sellers", "        rng.random()  # one more draw\n        self.best = sellers")
DEAREST = CHEAPER.replace("min(prices)", "max(prices)").replace("Cheapest?", "Dearest?").replace("is cheapest", "is dearest")
NEXT = next(e.source for e in ALL_EXAMPLES if e.name == "next_colour")
DIGITS = NEXT.replace('"red green yellow black white pink".split()', 'list("123456")').replace("colour", "digit")
MORE_FEEDBACK = CHEAPER.replace("float(won), True", "float(won) * abs(1), True").replace(
    "def hint(self):\n        return", "def hint(self):\n        return 'Look at every price. ' +")


@pytest.mark.parametrize("name, source, reskin", [
    ("reworded strings and names", REWORDED, "example cheaper_shop"),
    ("a statement added", ADDED, "example cheaper_shop"),
    ("max for min: another question", DEAREST, None),
    ("its own hint and a feedback builtin more", MORE_FEEDBACK, "example cheaper_shop"),
    ("next_colour with digits (the number players have nothing to read in the colours)", DIGITS, "example next_colour"),
])
def test_reskins_of_cheaper_shop_golden(name, source, reskin):
    archive = Archive.bundled()
    why = archive.reskin_of(source)
    assert (why is not None and reskin in why) if reskin else why is None, (name, why)


PLACES = '''import random


class PlaceEnv:
    """Three numbers: name the smallest."""

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.numbers = rng.sample(range(10, 99), 3)
        self.answer = sorted(self.numbers)[0]
        return "Now: %s. Which number is the smallest?" % ", ".join(map(str, self.numbers)), {}

    def step(self, action):
        won = action.strip() == "\\\\boxed{%d}" % self.answer
        return ("Right." if won else "Wrong."), float(won), True, False, {}

    def hint(self):
        return "Compare them two at a time."

    def solution(self):
        return ["\\\\boxed{%d}" % self.answer]
'''
SECOND_SMALLEST = PLACES.replace("sorted(self.numbers)[0]", "sorted(self.numbers)[1]").replace("the smallest", "the middle one")
SUM_LOOP = '''import random


class TallyEnv:
    """A shopkeeper tallies two bills."""

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.bills = {}
        for who in ("tea", "bread"):
            self.bills[who] = rng.randint(10, 49)
        self.total = 0
        for value in self.bills.values():
            self.total += value
        return "Now: tea costs %d and bread costs %d. What do they cost together?" % tuple(self.bills.values()), {}

    def step(self, action):
        if action.strip() != "\\\\boxed{%d}" % self.total:
            return "No.", 0.0, True, False, {}
        return "Yes.", 1.0, True, False, {}

    def hint(self):
        return "Add the tens first."

    def solution(self):
        return ["\\\\boxed{%d}" % self.total]
'''
LONG_HINT = CHEAPER.replace("    def hint(self):\n        return ", """    def hint(self):
        parts = []
        for index, word in enumerate(["look", "at", "each", "price"]):
            if index % 2 == 0 and len(word) > 1:
                parts.append(word.upper())
            else:
                parts.append(word.lower())
        if not parts:
            raise ValueError("no words")
        return " ".join(parts) + ". " + """, 1)


@pytest.mark.parametrize("name, archived, source, reskin", [
    ("the same code asking for the second smallest: only the players tell them apart", PLACES,
     SECOND_SMALLEST, False),
    ("the same code renamed", PLACES, PLACES.replace("PlaceEnv", "PickEnv").replace("numbers", "values"), True),
    ("a sum from another skeleton: the same task", next(e.source for e in ALL_HELDOUT if e.name == "add_numbers"),
     SUM_LOOP, True),
    ("a copy with a hint of its own (the hint is not the task)", CHEAPER, LONG_HINT, True),
])
def test_reskins_golden_against_one_entry(name, archived, source, reskin):
    archive = Archive()
    archive.add("the entry", archived)
    assert (archive.reskin_of(source) is not None) == reskin, name


def test_second_word_and_last_word_are_not_reskins_of_each_other():
    """Two held-out starters that ask for a word at a place in a sentence: their code overlaps
    less than LOGIC_SIMILAR (they draw their sentences differently), and a player who boxes the
    last word of the question wins one and not the other, so neither way calls them one task.
    They should stay apart: they ask different things."""
    assert similarity(logic(SECOND_WORD), logic(LAST_WORD)) < LOGIC_SIMILAR
    archive = Archive.bundled()
    assert archive.profile(LAST_WORD)["last word"] == 1.0 and archive.profile(SECOND_WORD)["last word"] == 0.0
    only_last = Archive()
    only_last.add("held-out last_word", LAST_WORD)
    only_last.profiles.update(archive.profiles)
    assert only_last.reskin_of(SECOND_WORD) is None


def test_no_bundled_environment_is_a_reskin_of_another():
    """The pairs of bundled environments the check calls re-skins of each other: none of the 48
    entries (the prompt's examples at both sizes, every example, every held-out environment)
    against the others. The closest logic, colour_of and which_button, overlaps about 0.81; the
    four that one rule solves (smaller_number, copy_code, last_word, add_numbers) each need a
    different rule."""
    full = Archive.bundled()
    pairs = []
    for name, source, _ in full.entries:
        others = Archive(entries=[e for e in full.entries if e[0] != name], profiles=full.profiles)
        why = others.reskin_of(source)
        if why:
            pairs.append((name, why))
    assert len(full.entries) == 48 and pairs == []


def test_min_and_max_differ_in_the_answer_code():
    assert answer_tokens(CHEAPER) != answer_tokens(DEAREST) and similarity(logic(CHEAPER), logic(DEAREST)) > 0.95


# --- what a refused design earns -------------------------------------------------------------------

@pytest.mark.parametrize("stage", ["decided", "given_away", "hint", "question", "duplicate"])
@pytest.mark.parametrize("kind", ["regret", "blend", "gated_blend"])
def test_no_refused_design_earns_what_an_honest_valid_one_earns(stage, kind):
    floor = lowest_valid_reward(kind)
    honest, refused = apply_invalid_policy([("valid", floor, True), (stage, 1.0, True)], "graded", -1.0, floor)
    assert refused < honest and stage in INVALID_STAGES


def test_the_bundled_profiles_are_kept_for_every_bundled_environment_and_replay_the_same():
    """The archive's fixed part is played once (gate/bundled_profiles.json): every bundled source
    has its profile there (a changed source needs `python -m spade_mini.gate`), and
    three of them, played again, give what the file says."""
    import hashlib
    import json

    from spade_mini.gate.novelty import BUNDLED_PROFILES, behaviour
    kept = json.loads(BUNDLED_PROFILES.read_text())
    archive = Archive.bundled()
    keys = [hashlib.sha256(src.encode()).hexdigest() for _, src, _ in archive.entries]
    assert all(k in kept and kept[k] is not None for k in keys), "run python -m spade_mini.gate"
    for _, src, _ in random.Random(0).sample(archive.entries, 3):
        assert behaviour(src) == kept[hashlib.sha256(src.encode()).hexdigest()]
