"""Another checkout's module loaded beside this tree's, for a benchmark that times the
other tree's function against this tree's in one process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


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
