"""Hand-written environments: the examples that seed the memory and a separate held-out set.

Each environment is one self-contained source file in this folder, written to the same contract
the designer must follow (one `*Env` class; `reset(seed)`, `step(action)`, `hint()`), plus a
`solution()` method that returns winning actions for the current episode so tests can prove every
environment is winnable. The files are read as text and run in the sandbox like generated code;
they are never imported into the training process. Tool-use files import `tooluse`, which exists
only inside the sandbox.

By convention `solution()` is the last method of the class and nothing follows it. A designer
is shown and trained on the whole source, solution() included: validation plays a design's
solution() to a win (sandbox/validate.py), so the designer must write one too. The examples are
kept short (at most 480 tokens of the embedded model's tokenizer) so that a small model can read
and write one in a single reply.

EXAMPLES seed the environment memory and form the fixed-pool baseline. HELDOUT is for evaluation
only and must never be shown to the designer. The starter tier (`starter/`) is the same split one
step easier, sized for the embedded 135M model: STARTER (one- or two-step tasks with a hint that
says where the answer is) and STARTER_HELDOUT (tasks of other kinds, for evaluation only).

Levels: every EXAMPLE and STARTER environment has 4 difficulty levels (a class attribute
`levels`; `reset(seed, options={"level": n})`), level 0 exactly the task it had before levels, so
that earlier numbers do not move; the summaries below describe level 0. The held-out
environments have one level. The active pool raises and lowers levels (spade_mini/pool.py).
"""
from dataclasses import dataclass
from pathlib import Path

ENV_DIR = Path(__file__).parent
STARTER_DIR = ENV_DIR / "starter"
MAX_TURNS = 25  # the contract's turn cap: no episode, generated or bundled, plays more (the reference's)
# The checks of the contract, in the order sandbox/validate.py runs them; "valid": all passed.
STAGES = ("syntax", "structure", "load", "reset", "step", "episode", "solution", "decided", "instances",
          "valid")
MIN_INSTANCES = 8  # distinct instances a design must have over 16 seeds at each level (sandbox/instances.py)
# The gate's checks after validation, in order (spade_mini/gate): the answer shown in the observation,
# a hint that gives it away, a question the reward does not ask.
ADMISSION_STAGES = ("given_away", "hint", "question")


@dataclass(frozen=True)
class HandEnv:
    name: str
    setting: str  # "games" | "tool_use"
    skill: str  # a skill key, e.g. "logical_deduction" or "error_recovery"
    summary: str  # one line
    source: str  # the full environment source code

    @property
    def without_solution(self) -> str:
        """The source cut before its `solution()` method, the last one by convention (a design
        that copies an example but drops its solution is still a copy)."""
        return self.source.split("\n    def solution(self)")[0].rstrip() + "\n"


def load(name: str, setting: str, skill: str, summary: str, folder: Path = ENV_DIR) -> HandEnv:
    """Read `<name>.py` from `folder` (this folder unless given) as an environment's source."""
    return HandEnv(name, setting, skill, summary, (folder / f"{name}.py").read_text(encoding="utf-8"))


EXAMPLES: list[HandEnv] = [
    load("guess_number", "games", "logical_deduction",
         "Guess a number from 1 to 64 in 7 tries with higher/lower feedback."),
    load("code_breaker", "games", "logical_deduction",
         "Mastermind: deduce a 3-digit code from right-place/wrong-place counts."),
    load("nim", "games", "strategic_planning",
         "Take 1-3 stones per turn against a fixed opponent; taking the last stone wins."),
    load("grid_walk", "games", "spatial_reasoning",
         "Steer a robot through the gaps in two walls to a goal on a 5x5 grid within 20 moves."),
    load("sequence_next", "games", "pattern_recognition",
         "Give the next three terms of a number sequence, one per turn."),
    load("arithmetic_chain", "games", "mathematical_reasoning",
         "Report the running value after each of four arithmetic operations."),
    load("switch_lamps", "games", "causal_inference",
         "Flip switches and watch lamps to work out which switch controls which lamp."),
    load("knapsack", "games", "optimization",
         "Find the greatest total value of items within a weight limit, in three tries."),
    load("inventory_order", "tool_use", "api_orchestration",
         "Look up a product's id, order it and report the order id."),
    load("bank_retry", "tool_use", "error_recovery",
         "Make a transfer through a bank API whose first attempts fail and must be retried."),
    load("kv_rename", "tool_use", "state_modification",
         "Rename a key and update a counter in a key-value store; the final state is checked."),
    load("calendar_booking", "tool_use", "multi_step_workflows",
         "Find the first free hour on a calendar day, book it, and report the hour."),
]

HELDOUT: list[HandEnv] = [
    load("memory_pairs", "games", "memory_recall",
         "Memorise five word-number pairs, then answer three questions about them."),
    load("unscramble", "games", "language_understanding",
         "Unscramble a common word; each miss reveals one more letter."),
    load("heavy_coin", "games", "logical_deduction",
         "Find the heavy coin among nine with two balance weighings."),
    load("compass_walk", "games", "spatial_reasoning",
         "Track position on a plane through turn-and-walk instructions."),
    load("flight_price", "tool_use", "tool_selection",
         "Pick the right tools among several to find a cheapest fare converted to euros."),
    load("manager_lookup", "tool_use", "data_retrieval",
         "Chain directory look-ups to find an employee's manager's email address."),
    load("refund_flow", "tool_use", "multi_step_workflows",
         "Read an order and return policies, then refund the items still returnable."),
]

STARTER: list[HandEnv] = [load(*row, folder=STARTER_DIR) for row in [
    ("colour_of", "games", "language_understanding",
     "Three things and their colours are listed; name the colour of one of them."),
    ("which_button", "games", "causal_inference",
     "Each of three buttons causes one thing; name the button that gives what you want."),
    ("cheaper_shop", "games", "optimization",
     "Three sellers ask three prices for a pen; name the cheapest seller."),
    ("row_position", "games", "spatial_reasoning",
     "Three animals stand in a row; name the one at the left end, middle or right end."),
    ("taller_shorter", "games", "logical_deduction",
     "One person is taller (or older) than another; name who is shorter, taller, younger or older."),
    ("smaller_number", "games", "mathematical_reasoning",
     "Say which of two two-digit numbers is smaller."),
    ("next_colour", "games", "pattern_recognition",
     "Two colours take turns in a row; name the colour that comes next."),
    ("recall_fruit", "games", "memory_recall",
     "Remember a fruit for one turn, then pick it out of three when asked."),
]]

STARTER_HELDOUT: list[HandEnv] = [load(*row, folder=STARTER_DIR) for row in [
    ("copy_code", "games", "memory_recall",
     "Read a four-digit locker code out of a note that also gives a room number."),
    ("last_word", "games", "language_understanding", "Say the last word of a sentence."),
    ("first_letter", "games", "language_understanding", "Give the first letter of a word."),
    ("count_items", "games", "mathematical_reasoning",
     "Count how many times one word is listed, three to five."),
    ("longer_word", "games", "language_understanding",
     "Say which of two words, one short and one long, has more letters."),
    ("capital_word", "games", "language_understanding", "Write a short word in capital letters."),
    ("inside_what", "games", "spatial_reasoning",
     "An object is in a container that stands on furniture; name the container."),
    ("odd_one_out", "games", "logical_deduction",
     "Three words share a kind (animal, fruit, tool); find the one that does not."),
    ("repeat_word", "games", "pattern_recognition", "Write a word three or four times."),
    # Written for the distinct-item curve (many distinct instances each), before any run measured them.
    ("add_numbers", "games", "mathematical_reasoning", "Add two two-digit numbers."),
    ("second_word", "games", "language_understanding", "Say the second word of a short sentence."),
    ("missing_number", "games", "pattern_recognition",
     "Five numbers go up by the same step; name the one that is missing."),
    ("step_along", "games", "spatial_reasoning",
     "Move some squares left or right along a numbered row; say which square you reach."),
    ("where_is", "games", "logical_deduction",
     "Someone is in one of two places and not in the other; say where."),
    ("fewest_coins", "games", "optimization",
     "With coins of 1 and a larger value, give the fewest coins that make an amount."),
    ("take_to_win", "games", "strategic_planning",
     "Stones are taken in turns, the last one wins; say how many to take first to win."),
]]

# Examples the designer's memory shows but the pool never plays: one for a skill the tier's examples
# leave out (strategic_planning), so every skill the schedule draws has a reference that validates.
MEMORY_ONLY: dict[str, list[HandEnv]] = {"standard": [], "starter": [load(
    "plan_ahead", "games", "strategic_planning",
    "Reach a target number in a few moves of add 3, double, subtract 1: say which move comes first.",
    folder=STARTER_DIR)]}

# The tiers a run chooses from (`--examples`): what seeds the memory, the warm start and the fixed
# pool, and the held-out set of the same tier that the `--eval-every` curve plays.
TIERS: dict[str, tuple[list[HandEnv], list[HandEnv]]] = {
    "standard": (EXAMPLES, HELDOUT),
    "starter": (STARTER, STARTER_HELDOUT),
}
ALL_EXAMPLES: list[HandEnv] = [e for examples, _ in TIERS.values() for e in examples] + \
    [e for extra in MEMORY_ONLY.values() for e in extra]
ALL_HELDOUT: list[HandEnv] = [e for _, held_out in TIERS.values() for e in held_out]


def tier(examples: str, setting: str, held_out: bool = False) -> list[HandEnv]:
    """A tier's examples (or its held-out half) in a run's setting ("mix" keeps both settings)."""
    return [e for e in TIERS[examples][held_out] if setting in ("mix", e.setting)]


SKILL_LINE = "# skill:"  # the line of a user's environment file that names its skill


def read_folder(folder: str | Path) -> list[HandEnv]:
    """A user's own environments (--examples-dir): every `*.py` in `folder`, its skill from a line
    `# skill: NAME`, its setting "tool_use" when it builds on ToolUseEnv, its summary the first
    line of its class docstring. Raises ValueError (one sentence naming the fix) for a folder
    that does not exist or holds no environment; a file without a skill line keeps skill "" and
    is refused by the caller, which knows the skills."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise ValueError(f"--examples-dir {folder!r} is not a folder; give a folder of environment sources (*.py).")
    envs = []
    for file in sorted(path.glob("*.py")):
        source = file.read_text(encoding="utf-8", errors="replace")
        skill = next((line.split(":", 1)[1].strip() for line in source.splitlines()
                      if line.strip().lower().startswith(SKILL_LINE)), "")
        doc = source.split('"""')[1].strip().splitlines() if source.count('"""') >= 2 else [""]
        setting = "tool_use" if "ToolUseEnv)" in source else "games"
        envs.append(HandEnv(file.stem, setting, skill, (doc or [""])[0][:120], source))
    if not envs:
        raise ValueError(f"--examples-dir {folder!r} holds no *.py file; put one environment source in each.")
    return envs

