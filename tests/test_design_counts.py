"""benchmarks/design_counts.py counts issue 40's figures exactly on a tree written here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "design_counts.py"

PICK = """
import torch as t

def pick(p):
    return p == "bf16"

def place(device):
    return device == "on"

def execution(cuda_graph):
    return cuda_graph == "auto"

class Runner:
    def chosen(self, requested):
        if requested == "auto":
            return {"fp16": 1, "fp32": 2}[requested]
        return t.load(requested)
"""

RECORDS = """
from dataclasses import dataclass
from typing import ClassVar

@dataclass(frozen=True)
class Job:
    precision: str
    name: str

@dataclass
class Named:
    label: str
    device: ClassVar[str] = "cpu"

class Plain:
    device: str
"""

SPEC = """
from dataclasses import dataclass

@dataclass
class StepSpec:
    log_interval: int = 50

@dataclass
class RunSpec(StepSpec):
    precision: str = "auto"
    device: str = "cpu"
"""


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("design_counts", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_each_figure_counts_what_it_says_and_nothing_else(tmp_path: Path) -> None:
    """Only precision tests, record types with a run field, files past 450 lines and
    torch.load calls of product code are counted; near misses are not."""
    dc = _script()
    _write(tmp_path, "genesis_fp16/pick.py", PICK)
    _write(tmp_path, "genesis_fp16/tests/test_pick.py", PICK)  # a test folder: not product
    _write(tmp_path, "infrastructure/pkg/records.py", RECORDS)
    _write(tmp_path, "infrastructure/pkg/training/run/spec.py", SPEC)
    _write(tmp_path, "agents/long.py", "x = 1\n" * 451)
    _write(tmp_path, "agents/edge.py", "x = 1\n" * 450)

    names = dc.run_field_names(tmp_path)
    assert names == ("log_interval", "precision", "device")
    figures = dc.count(tmp_path, names)

    assert [f.rel for f in figures.files] == [
        "genesis_fp16/pick.py",
        "agents/edge.py",
        "agents/long.py",
        "infrastructure/pkg/records.py",
        "infrastructure/pkg/training/run/spec.py",
    ]
    assert [(p.rel, p.name, p.why) for p in figures.choosers] == [
        ("genesis_fp16/pick.py", "Runner.chosen", "compares, looks up"),
        ("genesis_fp16/pick.py", "pick", "compares"),
    ]
    assert [p.name for p in figures.auto_tests] == ["Runner.chosen"]
    assert [(p.name, p.why) for p in figures.run_types] == [
        ("Job", "precision"),
        ("StepSpec", "log_interval"),
        ("RunSpec", "precision, device"),
    ]
    assert [f.rel for f in figures.long_files()] == ["agents/long.py"]
    assert figures.lines == 901 + sum(len(t.splitlines()) for t in (PICK, RECORDS, SPEC))
    assert [(p.name, p.why) for p in figures.loads] == [("Runner.chosen", "line 17")]
