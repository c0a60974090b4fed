"""benchmarks/contract_counts.py counts issue 53's two contract figures on a tree written
here, and this repository holds no precision name typed as ``str``."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from script_module import load_script

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

RESULT = """
from collections.abc import Mapping, Sequence
from typing import Any

class TrainResult:
    agent: str
    precision_used: str
    precision_reason: str
    gate: Mapping[str, Any] | None = None
    demotions: Sequence[Mapping[str, Any]] = ()
    phases: Mapping[str, float] | None = None
    extra: dict[str, Any] = {}
"""

NAMES = """
class ResolvedPrecision:
    requested: str
    used: str

class ResolvedExecution:
    requested: str
    used: str

class Guard:
    ladder: tuple[str, ...]
    label: str

def next_precision(current: str, floor: str | None) -> str | None: ...
def check_ladder(text: str) -> str: ...
def describe(precision_text: str) -> str: ...
"""


def _script() -> ModuleType:
    return load_script(BENCHMARKS / "contract_counts.py")  # it imports design_counts


def test_each_figure_counts_what_it_says_and_nothing_else(tmp_path: Path) -> None:
    """TrainResult's Mapping[str, Any] fields (alone or inside a Sequence), and the places
    a precision name is typed str: a precision class's requested/used, a floor, a ladder
    of names, a function returning a precision; not an execution's requested, a reason,
    a label or a ladder setting's text."""
    cc = _script()
    for rel, text in (("infrastructure/pkg/result.py", RESULT), ("genesis_fp16/names.py", NAMES)):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    sources = cc.product_files(tmp_path)
    untyped = cc.untyped_result_fields(sources)
    assert [line.split("`")[3] for line in untyped] == ["gate", "demotions", "extra"]
    places = sorted(line.split("`")[3] for s in sources for line in cc.precision_strs(s))
    assert places == [
        "Guard.ladder",
        "ResolvedPrecision.requested",
        "ResolvedPrecision.used",
        "TrainResult.precision_used",
        "next_precision ->",
        "next_precision(floor)",
    ]


def test_this_repository_types_every_precision_name() -> None:
    """No field, parameter or return holding a precision name is a plain str (issue 53:
    45 before); TrainResult keeps extra, the plugin's own record, untyped (8 before)."""
    cc = _script()
    sources = cc.product_files(cc.REPO)
    assert [line for s in sources for line in cc.precision_strs(s)] == []
    untyped = [line.split("`")[3] for line in cc.untyped_result_fields(sources)]
    assert untyped == ["extra"]
