"""The house rules of the package, checked by reading every module's code (nothing is run): no
import circles, no module over 300 lines and no function over 80 lines or 10 parameters, a
pure-Python reward folder, a policy folder that imports nothing else of spade_mini but the
iteration's shape (a leaf), the steps' modules in loop order, and one home for the contract's
turn cap."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "spade_mini"
MAX_LINES = 300
MAX_FUNCTION_LINES, MAX_PARAMETERS = 80, 10
# The modules of an iteration's steps, in loop order: none imports a later one.
STEP_MODULES = ("spade_mini.fill", "spade_mini.steps", "spade_mini.replay", "spade_mini.samples", "spade_mini.loop")


def _modules() -> dict[str, Path]:
    """Module name -> file, for every module of the package (the bundled environments are
    sources the sandbox reads, not modules of the package)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if rel.parts[:2] == ("spade_mini", "envs") and rel.name != "__init__":
            continue
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        out[name] = path
    return out


def _imports(path: Path, name: str) -> set[str]:
    """Every module this file imports anywhere (top level, inside functions, or for annotations)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: {i for i in _imports(p, m) if i in mods and i != m} for m, p in mods.items()}


def _folder_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports between a module and another module outside its own package, ignoring faces that
    import their own package's files."""
    def package(m: str) -> str:
        parts = m.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 else m
    return {(package(a), package(b)) for a, bs in graph.items() for b in bs if package(a) != package(b)}


def test_the_import_graph_has_no_circle():
    graph = _graph()
    # a face (folder/__init__.py) imports its own files; a file importing its own face is a circle
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                pytest.fail("import circle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("name", sorted(_modules()))
def test_no_module_is_over_300_lines(name):
    lines = len(_modules()[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines; split it by idea"


def test_reward_imports_neither_torch_nor_the_sandbox():
    mods = _modules()
    for name, path in mods.items():
        if name.startswith("spade_mini.reward"):
            imported = _imports(path, name)
            assert not any(i == "torch" or i.startswith("torch.") for i in imported), name
            assert not any(i.startswith("spade_mini.sandbox") for i in imported), name
            assert not any(i.startswith(("spade_mini.policy", "spade_mini.agent")) for i in imported), name


def test_the_policy_imports_nothing_else_of_the_package_but_the_shape():
    for name, path in _modules().items():
        if name.startswith("spade_mini.policy"):
            others = {i for i in _imports(path, name) if i.startswith("spade_mini") and i != "spade_mini"
                      and not i.startswith(("spade_mini.policy", "spade_mini.shape"))}
            assert not others, f"{name} imports {sorted(others)}"
    # the shape is plain arithmetic on the flags: a leaf
    assert not {i for i in _imports(_modules()["spade_mini.shape"], "spade_mini.shape") if i.startswith("spade_mini")}


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
            yield node.name, node.end_lineno - node.lineno + 1, len([p for p in params if p.arg not in ("self", "cls")])


@pytest.mark.parametrize("name", sorted(_modules()))
def test_no_function_is_over_80_lines_or_10_parameters(name):
    for function, lines, params in _functions(_modules()[name]):
        assert lines <= MAX_FUNCTION_LINES, f"{name}.{function} has {lines} lines; cut it by idea"
        assert params <= MAX_PARAMETERS, f"{name}.{function} takes {params} parameters; pass a settings object"


def test_the_function_rule_can_fail(tmp_path):
    (tmp_path / "m.py").write_text("def f(a, b, c, d, e, f, g, h, i, j, k):\n" + "    x = 1\n" * 80)
    (name, lines, params), = _functions(tmp_path / "m.py")
    assert lines == 81 and params == 11


def test_no_step_module_imports_a_later_steps():
    graph = _graph()
    for i, name in enumerate(STEP_MODULES):
        later = set(STEP_MODULES[i + 1:])
        assert not graph[name] & later, f"{name} imports {sorted(graph[name] & later)}"


def test_evaluation_is_a_leaf_but_for_the_fixed_set_curve():
    edges = _folder_edges(_graph())
    into = {a for a, b in edges if b == "spade_mini.evaluation"}
    assert into <= {"spade_mini.loop"}, f"evaluation is imported by {sorted(into)}"


def test_the_detector_finds_a_circle(tmp_path):
    """The circle check can fail: two modules importing each other are seen."""
    (tmp_path / "a.py").write_text("from pkg import b\n")
    (tmp_path / "b.py").write_text("from pkg.a import thing\n")
    assert "pkg.b" in _imports(tmp_path / "a.py", "pkg.a")
    assert "pkg.a" in _imports(tmp_path / "b.py", "pkg.b")


def test_the_turn_cap_has_one_value_inside_and_outside_the_sandbox():
    """tooluse.py runs inside the sandbox, which has no spade_mini: its default turn cap is a
    literal that must equal the contract's."""
    from spade_mini.envs import MAX_TURNS
    from spade_mini.tooluse import ToolUseEnv
    assert ToolUseEnv.max_turns == MAX_TURNS


# One home per rule: each is written in one module, and the rest of the package uses that one.
ONE_HOME = {
    # rule: (its pattern in source, the only modules that may hold it)
    "the no-hint budget": (r"episodes_per_iteration or", {"spade_mini.shape"}),
    "the design cap": (r"design_attempts or|ATTEMPTS_PER_SLOT \*", {"spade_mini.shape"}),
    # inside or within a band (admission, refill, the gated blend, the memory's references); an
    # edge alone (a level moves at or above the top) is read where the level moves
    "the band test": (r"band\[0\]\s*<=?\s*\w+\s*<=?\s*(?:self\.)?band\[1\]|\blow\s*<=?\s*\w+[\w.]*\s*<=?\s*high\b",
                      {"spade_mini.reward.bands"}),
    "building a play's jobs": (r"\bJob\(", {"spade_mini.agent", "spade_mini.evaluation.heldout",
                                          "spade_mini.evaluation.fixed_set", "spade_mini.evaluation.transfer"}),
    "validation under the run's caps": (r"\bvalidate_env\(", {"spade_mini.gate", "spade_mini.adapters.export",
                                                              "spade_mini.sandbox.validate", "spade_mini.sandbox"}),
}


@pytest.mark.parametrize("rule", sorted(ONE_HOME))
def test_each_rule_has_one_home(rule):
    import re
    pattern, homes = ONE_HOME[rule]
    found = {name for name, path in _modules().items() if re.search(pattern, path.read_text(encoding="utf-8"))}
    assert found - homes == set(), f"{rule} is written in {sorted(found - homes)} too; use its home ({sorted(homes)})"
    assert found, f"{rule}: its home no longer holds it; the pattern in ONE_HOME is stale"


def test_the_roles_protocol_is_used_as_declared():
    """Every method the Roles protocol declares is called as declared: no module asks whether a
    policy has one (getattr or hasattr with a protocol method's name), and the scripted designer
    and player implement each of them themselves (not through a fallback)."""
    import re

    from spade_mini.policy import Policy, Roles, ScriptedDesigner, ScriptedPlayer
    methods = [m for m in vars(Roles) if not m.startswith("_") and callable(getattr(Roles, m))]
    assert {"generate", "generate_until", "continue_chats", "count_tokens", "acting_as"} <= set(methods)
    asked = re.compile(r"(?:getattr|hasattr)\([^)]*[\"'](" + "|".join(methods) + r")[\"']")
    for name, path in _modules().items():
        assert not asked.search(path.read_text(encoding="utf-8")), f"{name} asks a policy for a method of Roles"
    for cls in (Policy, ScriptedDesigner, ScriptedPlayer):
        assert all(callable(getattr(cls, m, None)) for m in methods), cls
