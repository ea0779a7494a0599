"""The exact copy check: a source with its identifiers renamed and docstrings dropped hashes to
the same fingerprint as the source it copies (constants kept). export.py keeps one environment
per fingerprint, and the designer refuses a design whose fingerprint a known environment has.
novelty.py refines it to re-skins. Sources are untrusted:
parsed with the sandbox's bounded `parse_source`.
"""
from __future__ import annotations

import ast
import hashlib

from spade_mini.sandbox import SourceError, parse_source


class _Canonical(ast.NodeTransformer):
    """Rename identifiers to their order of first appearance; drop docstrings."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def name(self, text: str) -> str:
        return self.names.setdefault(text, f"v{len(self.names)}")

    def generic_visit(self, node):
        drop_docstring(node)
        for name in ("name", "id", "arg", "attr", "asname"):
            value = getattr(node, name, None)
            if isinstance(value, str):
                setattr(node, name, self.name(value))
        return super().generic_visit(node)


def drop_docstring(node) -> None:
    body = getattr(node, "body", None)
    if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
            and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        node.body = body[1:] or [ast.Pass()]


def fingerprint(source: str) -> str | None:
    """The hash of the canonical syntax tree, or None when the source does not parse."""
    try:
        tree = parse_source(source)  # bounded in size and depth, so the visitor below is safe
    except SourceError:
        return None
    canonical = _Canonical().visit(tree)
    return hashlib.sha256(ast.dump(canonical, annotate_fields=False).encode()).hexdigest()


def known_fingerprints(named_sources: list[tuple[str, str]]) -> dict[str, str]:
    """fingerprint -> the first name that has it, for (name, source) pairs."""
    known: dict[str, str] = {}
    for name, source in named_sources:
        fp = fingerprint(source)
        if fp is not None:
            known.setdefault(fp, name)
    return known
