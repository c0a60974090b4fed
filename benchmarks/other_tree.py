"""Another checkout's code beside this tree's, for a benchmark that times the two: its
module loaded in this process (:func:`other_modules`), or a snippet run in a process of
its own with that checkout's packages (:func:`tree_child`)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

PACKAGE = "genesis_fp16_infrastructure"


def module_from(path: Path, name: str) -> ModuleType:
    """The file at ``path`` loaded as module ``name``; its own imports are this tree's.

    The module is entered in ``sys.modules`` first: a dataclass or a msgspec struct looks
    its module up there while it is made."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def record_types_path(tree: Path) -> Path:
    """The file of the checkout ``tree`` that defines ``RecordLosses`` and ``RecordIds``:
    ``contract/record_losses.py`` since they moved there (b69b6eb2), ``contract/judging.py``
    before. Loaded with :func:`module_from`, a later checkout's ``judging.py`` would hand
    out this tree's types (its import of them is this tree's), and an A/B would time one
    code twice."""
    contract = tree / "infrastructure" / PACKAGE / "contract"
    moved = contract / "record_losses.py"
    return moved if moved.exists() else contract / "judging.py"


def other_modules(tree: Path, swapped: Sequence[str]) -> dict[str, ModuleType]:
    """``tree``'s modules named in ``swapped`` (dotted, under the package), each importing
    the others of ``tree`` while they load (loaded under other names, this tree's put back
    after)."""
    root = tree / "infrastructure" / PACKAGE
    mine = {name: sys.modules[f"{PACKAGE}.{name}"] for name in swapped}
    loaded = {}
    try:
        for name in swapped:
            path = root.joinpath(*name.split(".")).with_suffix(".py")
            loaded[name] = sys.modules[f"{PACKAGE}.{name}"] = module_from(path, f"other.{name}")
    finally:
        sys.modules.update({f"{PACKAGE}.{name}": module for name, module in mine.items()})
    return loaded


def tree_child(tree: Path, code: str, *args: object) -> dict[str, Any]:
    """``code`` run by this Python in a process of its own with ``args`` (as text), the
    roots of the checkout ``tree`` first on its path (and not the current folder: ``-P``)
    and one torch thread; the last line it prints, read as a JSON object."""
    roots = (tree, tree / "agents", tree / "infrastructure")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, roots)), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-P", "-c", code, *map(str, args)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
