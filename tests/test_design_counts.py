"""benchmarks/design_counts.py counts issue 40's figures exactly on a tree written here."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from script_module import load_script

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
    return load_script(SCRIPT)


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


RESULT = """
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

@dataclass(frozen=True)
class TrainResult:
    agent: str
    gate: Mapping[str, Any] | None = None
    demotions: Sequence[Mapping[str, Any]] = ()
    phases: Mapping[str, float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

@dataclass(frozen=True)
class Other:
    drift: Mapping[str, Any]
"""

STATE = """
import os
import torch

POINTER = "served.json"
NOTES = "notes.json"

def pointer_path(folder):
    return folder / POINTER

def read_json(path):
    with open(path) as handle:
        return handle.read()

def candidate(folder):
    return read_json(folder / "candidate.json")

def read_pointer(folder):
    return pointer_path(folder).read_text()

def write_pointer(folder, text):
    with open(pointer_path(folder), "w") as handle:
        handle.write(text)
    pointer_path(folder).write_text(text)
    os.open(pointer_path(folder), os.O_RDWR | os.O_CREAT)

def notes(folder):
    return (folder / NOTES).read_text()

def echo(path):
    return path

def through_echo(folder):
    return echo(pointer_path(folder)).read_bytes()

def scale(folder):
    return read_state_text(folder / "loss_scale.json", 64)

def raw_fd(folder):
    return os.open(pointer_path(folder), os.O_RDONLY | os.O_NONBLOCK)

def read_state_text(path, limit):
    return open(path).read()

class StateFile:
    name: str
    def at(self, folder):
        return folder / self.name

class Request:
    cache: str

SERVED = StateFile("served.json")

def via_layout(folder):
    return SERVED.at(folder).read_text()

def by_field(folder):
    return (folder / SERVED.name).read_text()

def plan(folder):
    return Request(cache=folder / "precision_calibration.json")

def cached(request):
    return request.cache.read_text()

def through_owner(files, folder):
    return files.load(SERVED.at(folder))

def checkpoint(folder):
    return torch.load(folder / "served.json")
"""

OWNER = """
def read_served(folder):
    return (folder / "served.json").read_text()
"""

NAMES = """
from typing import Literal

PrecisionName = Literal["fp32", "bf16", "fp16"]

def pick(precision: str, precision_reason: str, requested: "str", device_requested: str):
    return precision

def chosen_precision() -> str | None:
    return None

def typed(precision: PrecisionName) -> PrecisionName:
    return precision

class Record:
    precision_used: str
    tools_used: str
    floor: PrecisionName
    precisions: tuple[str, ...]
"""


def test_issue_53s_figures_count_what_they_say_and_nothing_else(tmp_path: Path) -> None:
    """Mapping[str, Any] fields of TrainResult only, state-file reads (raw, hardened)
    outside the owner only, precision-named str annotations only, rlhf_ppo's lines only:
    each near miss beside them is left out."""
    dc = _script()
    _write(tmp_path, "infrastructure/pkg/training/run/spec.py", SPEC)
    _write(tmp_path, "infrastructure/pkg/contract/train_result.py", RESULT)
    _write(tmp_path, "infrastructure/pkg/recipes/served.py", STATE)
    _write(tmp_path, "infrastructure/pkg/agent_folder/served.py", OWNER)
    _write(tmp_path, "genesis_fp16/names.py", NAMES)
    _write(tmp_path, "genesis_fp16/execution.py", "def resolve(requested: str): ...\n")
    _write(tmp_path, "agents/genesis_fp16_agents/rlhf_ppo/engine.py", "x = 1\n" * 7)
    _write(tmp_path, "agents/genesis_fp16_agents/rlhf_ppo/sub/model.py", "x = 1\n" * 5)
    _write(tmp_path, "agents/genesis_fp16_agents/rlhf_ppo_tools/other.py", "x = 1\n" * 3)

    figures = dc.count(tmp_path, dc.run_field_names(tmp_path))

    assert [p.name for p in figures.result_mappings] == ["gate", "demotions", "extra"]
    assert [
        (p.name, p.why.split(", line")[0] + p.why.split(":", 1)[1]) for p in figures.state_reads
    ] == [
        ("read_json", "raw candidate.json"),
        ("read_pointer", "raw served.json"),
        ("scale", "hardened loss_scale.json"),
        ("raw_fd", "raw served.json"),
        ("via_layout", "raw served.json"),
        ("cached", "raw precision_calibration.json"),
        ("checkpoint", "raw served.json"),
    ]
    assert all(p.rel == "infrastructure/pkg/recipes/served.py" for p in figures.state_reads)
    assert [(p.name, p.why) for p in figures.precision_strs] == [
        ("<module>", "precision_used: str, line 16"),
        ("<module>", "precisions: tuple[str, ...], line 19"),
        ("pick", "precision: str"),
        ("pick", "requested: 'str'"),
        ("chosen_precision", "returns str | None"),
        ("<module>", "precision: str, line 10"),  # RunSpec's, in SPEC
    ]
    assert figures.rlhf_ppo_lines == 12
    rows = dict(dc.rows(figures))
    assert rows["7. State-file reads outside the agent folder's owner"] == "7 in 1 file"
    assert rows["... raw / through the hardened reader"] == "6 / 1"


OUTCOMES = """
from dataclasses import dataclass

COLUMNS = ("rejected", "name")       # every element a field of this file: column names
MIXED = ("rejected", "other")        # "other" is no field: counted

@dataclass
class Row:
    rejected: list
    name: str

def judge(verdict, report):
    if verdict.get("outcome") == "held":          # the key is a field; "held" counts
        return {"rolled_back": True}              # a dict key: a field
    report["up_to_date"] = getattr(report, "promoted", None)   # subscript, getattr name
    return "inconclusive" if verdict else "success"  # success: not a counted word
"""


def test_issue_68s_outcome_strings_count_what_they_say_and_nothing_else(tmp_path: Path) -> None:
    """An outcome word written as a literal counts, by file; the same word in a field's
    place (a key, a subscript, .get, getattr, a tuple of the file's field names) and a
    run's everyday words do not."""
    dc = _script()
    _write(tmp_path, "genesis_fp16/judge.py", OUTCOMES)
    _write(tmp_path, "genesis_fp16/tests/test_judge.py", OUTCOMES)  # a test folder
    figures = dc.count(tmp_path, ())  # no run fields: not this figure's question
    assert [(p.name, p.why) for p in figures.outcome_strings] == [
        ("<module>", "'rejected', line 5"),
        ("judge", "'held', line 13"),
        ("judge", "'inconclusive', line 16"),
    ]
    rows = dict(dc.rows(figures))
    assert rows["14. Product files spelling an outcome string"] == "1 (3 strings)"


# Issue 68: the outcomes are spelled once, by the enum (Outcome, in
# INF/agent_folder/lifecycle_records.py since issue 70); every other product file names a
# member. se_darwin's own gate, planner and judge sets spell theirs until issue 68
# deletes them (its first item): they are left out while they exist.
OUTCOME_ENUM = "infrastructure/genesis_fp16_infrastructure/agent_folder/lifecycle_records.py"
SE_DARWIN_OWN_GATE = {
    f"infrastructure/genesis_fp16_infrastructure/recipes/retrain/{name}.py"
    for name in ("gate", "promotion", "judge_sets", "live_watch", "served_model")
}
MAX_OUTCOME_STRING_FILES = 1


def test_only_the_outcome_enum_spells_an_outcome() -> None:
    """No product file but the enum's writes an outcome as a string literal (figure 14)."""
    dc = _script()
    repo = SCRIPT.parents[1]
    places = dc.outcome_strings(dc.product_files(repo))
    spelling = sorted({p.rel for p in places} - SE_DARWIN_OWN_GATE)
    assert spelling == [OUTCOME_ENUM], [str(p) for p in places if p.rel != OUTCOME_ENUM]
    assert len(spelling) <= MAX_OUTCOME_STRING_FILES


# Issue 68's ceiling on a module's size (physical lines); it only goes down. 800, then
# 700 on 2026-11-27 (the longest module was training/step/trainer.py, 684).
MAX_MODULE_LINES = 700


def test_no_product_module_is_over_its_ceiling() -> None:
    """Every product module is at most MAX_MODULE_LINES long (figure 4 counts the same
    physical lines)."""
    dc = _script()
    over = {
        f.rel: f.lines for f in dc.product_files(SCRIPT.parents[1]) if f.lines > MAX_MODULE_LINES
    }
    assert not over, over
