"""A module's exports, listed once and loaded on first use (PEP 562).

The list is the module's imports under ``if TYPE_CHECKING:``: a type checker reads them,
and the module's ``__getattr__`` reads the same block from its file, so that importing the
module imports none of them (a CLI's ``--help`` should not pay two seconds for torch)::

    if TYPE_CHECKING:
        from genesis_fp16_infrastructure.training.run.fit import fit

    __getattr__, __dir__ = lazy_exports(__name__, __file__)
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path


def exports_of(path: str) -> dict[str, str]:
    """Each name the ``if TYPE_CHECKING:`` block of the file at ``path`` imports -> the
    module it imports it from."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def lazy_exports(name: str, path: str) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the module ``name`` (its file: ``path``): a
    name of its list is imported when first asked for, then kept in the module."""
    exports = cache(lambda: exports_of(path))  # the file is read on the first lookup, once

    def get(attr: str) -> object:
        module = exports().get(attr)
        if module is None:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        try:
            value = getattr(importlib.import_module(module), attr)
        except AttributeError:  # a submodule its package has not imported yet (agent_folder.files)
            value = importlib.import_module(f"{module}.{attr}")
        setattr(sys.modules[name], attr, value)
        return value

    def names() -> list[str]:
        return sorted({*vars(sys.modules[name]), *exports()})

    return get, names
