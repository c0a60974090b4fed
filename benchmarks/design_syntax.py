"""The product files of a source tree and the syntax helpers ``design_counts.py`` and
``state_reads.py`` share: a file's room and lines, each node's enclosing function, names.

A product file is a ``.py`` file under ``genesis_fp16/``, ``agents/`` or ``infrastructure/``
with no folder named ``tests``, ``benchmarks`` or ``__pycache__``, nor starting with a dot
(``.venv``), on its path; its room is its top folder and paths are relative to the tree.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOMS = ("genesis_fp16", "agents", "infrastructure")
SKIPPED_FOLDERS = {"tests", "benchmarks", "__pycache__"}
MODULE = "<module>"


@dataclass(frozen=True)
class SourceFile:
    """One product file: where it is, its room, its lines and its syntax tree."""

    rel: str
    room: str
    lines: int
    module: ast.Module


@dataclass(frozen=True)
class Place:
    """A function (or a file's module-level code) and what it was counted for."""

    rel: str
    name: str
    why: str

    def __str__(self) -> str:
        return f"`{self.rel}`: `{self.name}` ({self.why})"


def product_files(root: Path) -> list[SourceFile]:
    """The product files of ``root`` (see the module docstring), by room, then path."""
    found = []
    for room in ROOMS:
        for path in sorted((root / room).rglob("*.py")):
            parts = path.relative_to(root).parts[:-1]
            if any(p in SKIPPED_FOLDERS or p.startswith(".") for p in parts):
                continue
            text = path.read_text(encoding="utf-8")
            rel = path.relative_to(root).as_posix()
            found.append(SourceFile(rel, room, len(text.splitlines()), ast.parse(text, rel)))
    return found


def scoped_nodes(
    node: ast.AST, scope: str = MODULE, prefix: str = ""
) -> Iterator[tuple[str, ast.AST]]:
    """Every node under ``node`` with the qualified name of the innermost function around
    it (``<module>`` outside any), named as Python's ``__qualname__`` names them."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + child.name
            yield from scoped_nodes(child, name, f"{name}.<locals>.")
        elif isinstance(child, ast.ClassDef):
            yield from scoped_nodes(child, scope, f"{prefix}{child.name}.")
        else:
            yield scope, child
            yield from scoped_nodes(child, scope, prefix)


def simple_name(node: ast.AST) -> str:
    """``C`` for ``C``, ``m.C``, ``C[...]`` or ``C(...)``; empty for anything else."""
    while isinstance(node, ast.Subscript | ast.Call):
        node = node.value if isinstance(node, ast.Subscript) else node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def class_defs(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.ClassDef]]:
    """Every class under ``node`` with its qualified name."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            yield prefix + child.name, child
            yield from class_defs(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from class_defs(child, f"{prefix}{child.name}.<locals>.")
        else:
            yield from class_defs(child, prefix)


def field_names(cls: ast.ClassDef) -> list[str]:
    """The annotated attributes ``cls`` declares in its own body, ``ClassVar`` left out."""
    return [
        stmt.target.id
        for stmt in cls.body
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and simple_name(stmt.annotation) != "ClassVar"
    ]


def function_defs(
    node: ast.AST, prefix: str = "", in_class: bool = False
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function under ``node`` with its qualified name."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, child
            yield from function_defs(child, f"{prefix}{child.name}.<locals>.")
        elif isinstance(child, ast.ClassDef):
            yield from function_defs(child, f"{prefix}{child.name}.", True)
        else:
            yield from function_defs(child, prefix, in_class)
