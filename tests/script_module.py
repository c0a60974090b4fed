"""A file that is not in a package (a benchmark script, a generator, a written agent)
imported as a module by a test: one loader instead of a copy in each test file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str | None = None) -> ModuleType:
    """``path`` imported as module ``name`` (its file's stem by default): registered in
    ``sys.modules`` (a dataclass looks its module up by name), with its own folder on
    ``sys.path`` while it loads (a script that imports a neighbour, as contract_counts
    imports design_counts)."""
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module
