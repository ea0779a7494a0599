"""README.md and docs/*.md do not go stale. Nothing is run: the pages, the Makefile and the
scripts' sources are read.

* Every relative link and image resolves to a file of the checkout, and its `#anchor`, where it
  has one, to a heading of that file (GitHub's slugs).
* Every command shown, in a code block or in inline code, names what exists: `make` targets of
  the Makefile; scripts and `python -m spade_mini.<module>` files; flags the named script defines
  (train.py's are the fields of `Config`; eval.py, design.py and the bench scripts add their own
  argparse flags; after a bare `--`, flags go to train.py); and `--preset` values of
  `config.PRESETS`.
* Every `--flag` in inline code is defined by some script of the project, or by one of the few
  outside tools the pages name (torchrun, pip, SLURM, pytest).
* Every backticked path of the checkout (`bench/learning_curve.py`, `tests/test_loop.py::test_x`,
  `reward/leaks.py`) exists.
"""
import dataclasses
import re
import shlex
from pathlib import Path

import pytest

from spade_mini.config import PRESETS, Config

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONFIG_FLAGS = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(Config)} | {"--config", "--help"}
# Outside tools' own flags, as the pages use them.
OUTSIDE_FLAGS = {
    "torchrun": {"--standalone", "--nproc-per-node", "--nnodes", "--node-rank", "--master-addr",
                 "--master-port", "--signals-to-handle", "--shutdown-timeout"},
    "pip": {"--no-deps", "--upgrade"},
    "slurm": {"--signal", "--gres", "--time", "--requeue"},
    "pytest": {"--durations", "--dist"},
}
PYTHONS = {"python", "python3", ".venv/bin/python", "$(PY)"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
INLINE = re.compile(r"`([^`]+)`")


def split_page(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(the prose with code blocks blanked out, [(info string, block)])."""
    blocks = [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(text)]
    return FENCE.sub("", text), blocks


def slugs(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    prose, _ = split_page(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for line in prose.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    prose, _ = split_page(page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(prose) if not re.match(r"^[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves_to_a_file_and_its_anchor(page):
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists() or ROOT not in [path, *path.parents]:
            broken.append(f"{target}: no file {path.relative_to(ROOT) if ROOT in path.parents else path}")
        elif anchor and (path.suffix != ".md" or anchor not in slugs(path)):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {path.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


# --- commands ----------------------------------------------------------------------------------

def makefile_targets() -> dict[str, str | None]:
    """Each target of the Makefile -> the script its recipe runs with $(ARGS) (None: another
    program, or no $(ARGS))."""
    targets: dict[str, str | None] = {}
    current = None
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.match(r"^(\w[\w.-]*)\s*:(?!=)", line)  # not .PHONY, not $(STAMP)
        if m:
            current = m.group(1)
            targets[current] = None
        elif line.startswith("\t") and current and "$(ARGS)" in line:
            run = re.search(r"\$\(PY\)\s+(.*?)\s*\$\(ARGS\)", line)
            words = run.group(1).split() if run else []
            if words[:1] == ["-m"] and words[1:2] != ["pytest"]:
                targets[current] = module_file(words[1])
            elif words and words[0].endswith(".py"):
                targets[current] = words[0]
    for phony in re.findall(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M):
        for name in phony.split():
            targets.setdefault(name, None)
    return targets


def module_file(module: str) -> str | None:
    if not module.startswith("spade_mini"):
        return None  # pip, pytest, ...: not this project's
    path = Path(*module.split("."))
    return str(path / "__main__.py") if (ROOT / path).is_dir() else str(path.with_suffix(".py"))


def script_flags(script: str) -> tuple[set[str], bool]:
    """(the flags a script defines, whether everything after a bare `--` goes on to train.py's
    parser rather than its own)."""
    source = (ROOT / script).read_text(encoding="utf-8")
    own = set()
    for call in re.findall(r"add_argument\((.*?)\)", source, re.S):
        own |= set(re.findall(r"""["'](--[\w-]+)["']""", call))
    splits = '"--" in argv' in source or "bench_config(" in source  # warm_policy.bench_config splits the same way
    if script == "train.py" or ("main_config" in source and not splits):
        own |= CONFIG_FLAGS
    return own | {"--help"}, splits or script == "bench/learning_curve.py"


def commands(page: Path) -> list[str]:
    """Every command line the page shows: code-block lines (continuations joined) and inline code
    spans, that start with make, a Python, or torchrun."""
    prose, blocks = split_page(page.read_text(encoding="utf-8"))
    lines = []
    for info, block in blocks:
        if info.startswith("python"):
            continue  # Python source, not a shell
        lines += block.replace("\\\n", " ").splitlines()
    lines += [" ".join(span.split()) for span in INLINE.findall(prose)]
    starts = ("make ", "torchrun ", *(p + " " for p in PYTHONS))
    out = []
    for line in lines:
        words = line.strip()
        while re.match(r"^[A-Z_]+=\S*\s", words):  # OMP_NUM_THREADS=1 torchrun ...
            words = words.split(None, 1)[1]
        if words.startswith(starts) or re.match(r"^(train|eval|design)\.py\b|^bench/\w+\.py\b", words):
            out.append(words)
    return out


def tokens(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)
    except ValueError:  # an unbalanced quote in a shown output line: plain words will do
        return command.split("#")[0].split()


def check_args(args: list[str], script: str | None, where: str) -> list[str]:
    """What is wrong with the arguments `args` given to `script` (None: not this project's)."""
    if script is None:
        return []
    if not (ROOT / script).is_file():
        return [f"{where}: no script {script}"]
    own, forwards = script_flags(script)
    problems, allowed = [], own
    for i, word in enumerate(args):
        if word == "--" and forwards:
            allowed = CONFIG_FLAGS  # the rest goes to train.py
            continue
        m = re.match(r"^\[?(--[a-z][a-z0-9-]*)", word)
        if m and m.group(1) not in allowed:
            problems.append(f"{where}: {script} has no flag {m.group(1)}")
        if m and m.group(1) == "--preset" and i + 1 < len(args):
            value = args[i + 1]
            if value not in PRESETS and not re.search(r"[<$A-Z]", value):
                problems.append(f"{where}: no preset {value!r} (config.PRESETS: {', '.join(PRESETS)})")
    return problems


def check_command(command: str, targets: dict[str, str | None]) -> list[str]:
    words = tokens(command)
    where = f"`{' '.join(words)}`"
    if not words:
        return []
    if words[0] == "make":
        problems = []
        for word in words[1:]:
            if "=" in word:
                name, _, value = word.partition("=")
                if name == "ARGS":
                    for target in [w for w in words[1:] if "=" not in w and not w.startswith("-")] or ["train"]:
                        problems += check_args(tokens(value), targets.get(target), where)
            elif not word.startswith("-") and word not in targets:
                problems.append(f"{where}: the Makefile has no target {word!r}")
        return problems
    if words[0] == "torchrun":
        scripts = [i for i, w in enumerate(words) if w.endswith(".py")]
        if not scripts:
            return [f"{where}: names no script"]
        return check_args(words[scripts[0] + 1:], words[scripts[0]], where)
    if words[0].endswith(".py"):  # `train.py --iterations 0`: the script named alone
        return check_args(words[1:], words[0], where)
    if words[0] in PYTHONS and len(words) > 1:
        if words[1] == "-m":
            return check_args(words[3:], module_file(words[2]) if len(words) > 2 else None, where)
        if words[1].endswith(".py"):
            return check_args(words[2:], words[1], where)
    return []


def test_commands_are_found_on_the_pages():
    """The parser below must see what the pages show (else the next test checks nothing)."""
    found = [c for page in PAGES for c in commands(page)]
    assert any(c.startswith("make train") for c in found)
    assert any("torchrun" in c for c in found) and any(c.startswith(".venv/bin/python design.py") for c in found)
    assert {"train", "test", "eval", "demo", "model"} <= set(makefile_targets())
    assert makefile_targets()["demo"] == "bench/learning_curve.py"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_names_a_make_target_script_and_flags_that_exist(page):
    targets = makefile_targets()
    problems = [p for command in commands(page) for p in check_command(command, targets)]
    assert not problems, f"{page.name}: " + "; ".join(problems)


def every_flag_of_the_project() -> set[str]:
    scripts = ["train.py", "eval.py", "design.py", *(str(p.relative_to(ROOT)) for p in (ROOT / "bench").glob("*.py")),
               *(str(p.relative_to(ROOT)) for folder in ("spade_mini", "spade_mini/adapters")
                 for p in (ROOT / folder).glob("*.py"))]
    flags = set(CONFIG_FLAGS)
    for script in scripts:
        flags |= script_flags(script)[0]
    return flags.union(*OUTSIDE_FLAGS.values())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_flag_in_inline_code_is_defined(page):
    prose, _ = split_page(page.read_text(encoding="utf-8"))
    known = every_flag_of_the_project()
    unknown = sorted({f for span in INLINE.findall(prose) for f in FLAG.findall(span)} - known)
    assert not unknown, f"{page.name} names flags that nothing defines: {', '.join(unknown)}"


# --- paths -------------------------------------------------------------------------------------

TOP = {"spade_mini", "bench", "tests", "notebooks", "docs"}
PATH = re.compile(r"^[\w.\-/]+?(?:\.(?:py|ipynb|md|png|txt|toml)|/)(?:::\w+)?$")


def repo_files() -> list[str]:
    return [str(p.relative_to(ROOT)) + ("/" if p.is_dir() else "")
            for top in TOP for p in (ROOT / top).rglob("*") if "__pycache__" not in p.parts] + \
        [p.name for p in ROOT.iterdir() if p.is_file()] + [f"{top}/" for top in TOP]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_backticked_path_of_the_checkout_exists(page):
    prose, _ = split_page(page.read_text(encoding="utf-8"))
    files = repo_files()
    missing = []
    for span in INLINE.findall(prose):
        span = span.strip()
        if not PATH.match(span):
            continue
        path, _, test = span.partition("::")
        if "/" not in path and not path.endswith((".py", ".ipynb", ".txt", ".toml")):
            continue  # results.md, curves.png: files a run or an evaluation writes
        if path.endswith("/") and path.split("/")[0] not in TOP | {"policy", "designer", "reward", "run",
                                                                      "evaluation", "sandbox", "envs", "corpus_data"}:
            continue  # a folder a run writes (warm_start/, checkpoint-7/), not one of the checkout
        hits = [f for f in files if f == path or f.endswith("/" + path)]
        if not hits:
            missing.append(span)
        elif test and not any(re.search(rf"^def {test}\(", (ROOT / f).read_text(), re.M) for f in hits):
            missing.append(span)
    assert not missing, f"{page.name} names files or tests that do not exist: {', '.join(missing)}"


def test_pytest_m_golden_runs_every_section_of_the_golden_file():
    """docs/testing.md's command for the golden cases is `pytest -m golden`: every section of
    tests/golden/reinforce_cases.json is read by a test with that marker."""
    import ast
    import json
    sections = {k for k in json.loads((ROOT / "tests" / "golden" / "reinforce_cases.json").read_text()) if k != "_doc"}
    read = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        src = path.read_text()
        for node in ast.parse(src).body:
            if isinstance(node, ast.FunctionDef) and any("mark.golden" in ast.unparse(d) for d in node.decorator_list):
                text = ast.get_source_segment(src, node) + "".join(ast.unparse(d) for d in node.decorator_list)
                read |= {s for s in sections if f'"{s}"' in text or f"'{s}'" in text}
    assert sections - read == set(), f"no golden-marked test reads {sorted(sections - read)}"
    assert "pytest -q -m golden" in (ROOT / "docs" / "testing.md").read_text()
