"""Parse untrusted environment source in the trainer, with a bound on size and nesting.

Parsing is not executing, but it is not free either: a megabyte of source, or a few thousand
nested operators, makes `ast.parse` raise MemoryError or RecursionError, and every later walk
over a deep tree (`ast.dump`, a recursive visitor) can raise again. `parse_source` is the one
place the trainer parses generated code (validation, the memory's titles, comparisons of
designs): it refuses sources longer than MAX_SOURCE_CHARS, turns every parser failure into a
`SourceError`, and refuses trees deeper than MAX_AST_DEPTH, so whatever it returns can be walked
recursively. Parses run one at a time: CPython 3.11 counts the AST constructor's recursion in
state shared by every thread, so two threads parsing at once (validation runs in a thread pool,
and a finalizer that runs Python code lets another thread in mid-parse) can fail with a spurious
"SystemError: AST constructor recursion depth mismatch" (python/cpython#106905), which ended a
training run. Omitted: anything beyond parsing (the source runs only in the sandbox child).
"""
import ast
import threading

from spade_mini.sandbox.limits import SandboxError

MAX_SOURCE_CHARS = 100_000  # a 4096-token design is about 16k characters
MAX_AST_DEPTH = 100  # real environments nest about 15 deep; Python's own limits start near 200
_ONE_PARSE_AT_A_TIME = threading.Lock()


class SourceError(SandboxError):
    """The source does not parse within the bounds (syntax, size or nesting); `.lineno` if known."""

    def __init__(self, message: str, lineno: int | None = None):
        super().__init__(message)
        self.lineno = lineno


def parse_source(source: str) -> ast.Module:
    """`ast.parse(source)` for untrusted text: a `SourceError` instead of any parser failure."""
    if not isinstance(source, str):
        raise SourceError(f"the source must be a str, not {type(source).__name__}")
    if len(source) > MAX_SOURCE_CHARS:
        raise SourceError(f"the source has {len(source)} characters, more than the "
                          f"{MAX_SOURCE_CHARS} allowed; write a shorter environment")
    try:
        with _ONE_PARSE_AT_A_TIME:
            tree = ast.parse(source)
    except SyntaxError as exc:
        raise SourceError(f"syntax error on line {exc.lineno}: {exc.msg}", exc.lineno) from None
    except ValueError as exc:  # e.g. a null byte
        raise SourceError(f"the source does not parse: {exc}") from None
    except (RecursionError, MemoryError):  # the parser's own guards against deep nesting
        raise SourceError("the source nests too deeply to parse") from None
    depth = ast_depth(tree, MAX_AST_DEPTH)
    if depth > MAX_AST_DEPTH:
        raise SourceError(f"the source nests more than {MAX_AST_DEPTH} levels deep")
    return tree


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every import anywhere in `tree`; a relative import is "." + name,
    and `from a import b` lists both "a" and "a.b" (b may be a submodule)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * (node.level or 0) + (node.module or "")
            found += [(node.lineno, module)] + [(node.lineno, f"{module}.{alias.name}")
                                                for alias in node.names if alias.name != "*"]
    return found


def ast_depth(tree: ast.AST, stop_at: int) -> int:
    """Depth of `tree` (a lone node is 1), counted without recursion; stops past `stop_at`."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > stop_at:
            break
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest
