"""The novelty guard: a design that only renames a known environment is not a new environment.

The warm start shows the designer the bundled examples, and its memory shows it earlier
environments; a small model will happily copy them. A copy teaches the agent nothing new and its
regret measures nothing new, so a design equal to an example, a prompt example or a memory
environment UP TO NAMES, COMMENTS AND DOCSTRINGS is invalid with reason `duplicate`.

`fingerprint(source)` is a hash of the source's syntax tree with every identifier replaced by
its order of first appearance (v0, v1, ...) and every docstring removed; comments and layout are
not in the tree at all. Constants stay: a game with other numbers or other texts is a different
game (but an EDIT of a pool environment must change more than names and numbers:
`fingerprint(source, numbers=False)`). The source is untrusted, so it is parsed with the sandbox's bounded `parse_source`, and a
source it refuses has no fingerprint (such a source never validated anyway).
"""
from __future__ import annotations

import ast
import hashlib

from spade_mini.sandbox import SourceError, parse_source


class _Canonical(ast.NodeTransformer):
    """Rename identifiers to their order of first appearance; drop docstrings; with `numbers`
    False, every number becomes 0."""

    def __init__(self, numbers: bool = True):
        self.names: dict[str, str] = {}
        self.numbers = numbers

    def visit_Constant(self, node):
        if not self.numbers and isinstance(node.value, (int, float, complex)) and not isinstance(node.value, bool):
            return ast.copy_location(ast.Constant(0), node)
        return node

    def name(self, text: str) -> str:
        return self.names.setdefault(text, f"v{len(self.names)}")

    def generic_visit(self, node):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
        for field in ("name", "id", "arg", "attr", "asname"):
            value = getattr(node, field, None)
            if isinstance(value, str):
                setattr(node, field, self.name(value))
        return super().generic_visit(node)


def fingerprint(source: str, numbers: bool = True) -> str | None:
    """The hash of the canonical syntax tree, or None when the source does not parse. With
    `numbers` False, numbers are left out too: an edit of an environment that changes only its
    names and numbers has its parent's fingerprint (design.py refuses it)."""
    try:
        tree = parse_source(source)  # bounded in size and depth, so the visitor below is safe
    except SourceError:
        return None
    canonical = _Canonical(numbers).visit(tree)
    return hashlib.sha256(ast.dump(canonical, annotate_fields=False).encode()).hexdigest()


def known_fingerprints(named_sources: list[tuple[str, str]]) -> dict[str, str]:
    """fingerprint -> the first name that has it, for (name, source) pairs."""
    known: dict[str, str] = {}
    for name, source in named_sources:
        fp = fingerprint(source)
        if fp is not None:
            known.setdefault(fp, name)
    return known
