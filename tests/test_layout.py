"""The house rules of the package, checked by reading every module's imports (nothing is run):
no import circles, no module over 300 lines, a pure-Python reward folder, a policy folder that
imports nothing else of spade_mini, and one home for the contract's turn cap."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "spade_mini"
MAX_LINES = 300


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


def test_the_policy_imports_nothing_else_of_the_package():
    for name, path in _modules().items():
        if name.startswith("spade_mini.policy"):
            others = {i for i in _imports(path, name)
                      if i.startswith("spade_mini") and not i.startswith("spade_mini.policy") and i != "spade_mini"}
            assert not others, f"{name} imports {sorted(others)}"


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
