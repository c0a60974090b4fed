"""Issue 68's figure: the product files that spell an outcome as a string.

``design_counts.py`` prints it beside the others, as figure 14; this module finds the
places, from the syntax of a tree's product files (``design_syntax.py``). The outcomes
have one enum (``Outcome``, in ``genesis_fp16_infrastructure/agent_folder/
lifecycle_records.py``): any other file names a member (``Outcome.HELD``), so a renamed
or mistyped outcome fails where it is written.

An *outcome string* is a string literal equal to one of ``OUTCOME_WORDS``: the words a
verdict ends in (``promoted``, ``rejected``, ``inconclusive``, ``undecided``, ``held``,
``rolled_back``) and ``up_to_date``, a run's. The same list serves every tree (the tree
before the enum has no enum to read it from). A run's ``success``, ``failed`` and
``stopped`` are members too, but not counted: they are everyday words (a record's
``success`` column, a probe's ``failed``), and the figure would count those.

A literal in a field's place names a field, not an outcome, and is not counted:

- a dict display's key (``{"held": [...]}``), a subscript (``report["held"]``);
- the key given to ``.get``, ``.pop`` or ``.setdefault`` (``live.get("rolled_back")``),
  and the name given to ``getattr``, ``hasattr`` or ``setattr``;
- an element of a tuple, list or set display all of whose elements are string literals
  naming fields that classes of the same file declare (a tuple of column names walked
  with ``getattr``).

>>> import ast
>>> from design_syntax import SourceFile
>>> text = 'x = "held"\\nif v.get("held") == "promoted": pass\\ny = {"held": 1}'
>>> [p.why for p in outcome_strings([SourceFile("a.py", "agents", 3, ast.parse(text))])]
["'held', line 1", "'promoted', line 2"]
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from design_syntax import Place, SourceFile, class_defs, field_names, scoped_nodes

OUTCOME_WORDS = frozenset(
    {"promoted", "rejected", "inconclusive", "undecided", "held", "rolled_back", "up_to_date"}
)
KEY_METHODS = {"get", "pop", "setdefault"}
NAME_FUNCTIONS = {"getattr", "hasattr", "setattr"}


def outcome_strings(files: Iterable[SourceFile]) -> list[Place]:
    """Each outcome string of ``files`` (the module docstring), by file, then line."""
    found = []
    for source in files:
        fields = {name for _, cls in class_defs(source.module) for name in field_names(cls)}
        skipped = _field_places(source.module, fields)
        places = [
            (node.lineno, node.col_offset, scope, node.value)
            for scope, node in scoped_nodes(source.module)
            if isinstance(node, ast.Constant)
            and node.value in OUTCOME_WORDS
            and id(node) not in skipped
        ]
        for line, _, scope, word in sorted(places):
            found.append(Place(source.rel, scope, f"{word!r}, line {line}"))
    return found


def _field_places(module: ast.Module, fields: set[str]) -> set[int]:
    """The ids of the literals in a field's place (the module docstring)."""
    skipped: list[ast.AST | None] = []
    for node in ast.walk(module):
        if isinstance(node, ast.Dict):
            skipped.extend(node.keys)
        elif isinstance(node, ast.Subscript):
            skipped.append(node.slice)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in KEY_METHODS:
                skipped.append(node.args[0])
            elif isinstance(func, ast.Name) and func.id in NAME_FUNCTIONS and node.args[1:]:
                skipped.append(node.args[1])
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and node.elts:
            names = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(names) == len(node.elts) and all(n in fields for n in names):
                skipped.extend(node.elts)
    return {id(node) for node in skipped if node is not None}
