"""benchmarks/job_walk.py counts a job's walk exactly: stops, files, rooms and returns."""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType

from script_module import load_script

TREE = Path(__file__).resolve().parents[1]
SCRIPT = TREE / "benchmarks" / "job_walk.py"

# Rooms g, a, g, i, g, a (g: genesis_fp16, a: agents, i: infrastructure), with repeats.
WALK = [
    "genesis_fp16/jobs/agent_job.py",
    "genesis_fp16/jobs/agent_job.py",
    "genesis_fp16/jobs/planning.py",
    "agents/genesis_fp16_agents/se_darwin/plugin.py",
    "genesis_fp16/jobs/planning.py",
    "infrastructure/genesis_fp16_infrastructure/contract/plugin_api.py",
    "infrastructure/genesis_fp16_infrastructure/training/run/fit.py",
    "genesis_fp16/jobs/supervising.py",
    "agents/genesis_fp16_agents/se_darwin/plugin.py",
    "agents/genesis_fp16_agents/se_darwin/plugin.py",
]


def _script() -> ModuleType:
    return load_script(SCRIPT)


def test_a_synthetic_walk_is_counted_exactly() -> None:
    """Rooms g,a,g,i,g,a: one return to a non-coordinating room (the second a), two to
    the coordinating one; 7 stops, 6 files, one contract entry."""
    counts = _script().count_walk(WALK)
    assert counts.calls == 10
    assert counts.stops == 7
    assert counts.files == 6
    assert counts.room_entries == 5
    assert counts.returns_noncoordinating == 1
    assert counts.returns_by_room == {"agents": 1, "infrastructure": 0}
    assert counts.returns_coordinating == 2
    assert counts.contract_entries == 1 and counts.contract_files == 1


def test_moving_between_the_two_non_coordinating_rooms_counts_as_a_return() -> None:
    """Rooms g,i,a,i: back in infrastructure without passing through the daemon is a
    return too; a walk that never comes back has none."""
    walk = _script()
    g, i, a = "genesis_fp16/x.py", "infrastructure/y.py", "agents/z.py"
    assert walk.count_walk([g, i, a, i]).returns_by_room == {"agents": 0, "infrastructure": 1}
    assert walk.count_walk([g, i, i, a, a]).returns_noncoordinating == 0
    assert walk.returns([g, i, a, i, g]) == [3, 4]


def test_the_first_call_walk_keeps_each_functions_first_call() -> None:
    """A function called again later is dropped, another function of the same file is not."""
    walk = _script()
    files = ["genesis_fp16/j.py", "agents/p.py", "genesis_fp16/j.py", "agents/p.py"]
    functions = ["run:1", "train:5", "run:1", "other:9"]
    assert walk.first_calls(files, functions) == [files[0], files[1], files[3]]


def test_the_files_are_listed_in_the_order_entered_with_their_calls() -> None:
    """Six files of the synthetic walk, the plugin's with 3 calls of one function; a
    file entered again is not listed again."""
    listed = _script().walk_files(WALK, [f"f{i % 2}:1" for i in range(len(WALK))])
    assert [file for file, _, _ in listed] == list(dict.fromkeys(WALK))
    assert listed[0] == ("genesis_fp16/jobs/agent_job.py", 2, 2)
    assert listed[2] == ("agents/genesis_fp16_agents/se_darwin/plugin.py", 3, 2)
    assert sum(calls for _, calls, _ in listed) == len(WALK)


def test_file_pairs_and_folds_count_each_stop_once() -> None:
    """A stop counts under its unordered pair; a crossing pair joins two rooms."""
    walk = _script()
    pairs = walk.file_pairs(WALK)
    assert sum(pairs.values()) == 7
    plugin = "agents/genesis_fp16_agents/se_darwin/plugin.py"
    assert (
        pairs["agents/genesis_fp16_agents/se_darwin/plugin.py", "genesis_fp16/jobs/planning.py"]
        == 2
    )
    assert all(walk.room_of(x) != walk.room_of(y) for x, y in walk.crossing_pairs(WALK))
    assert walk.fold(WALK)[-1] == (plugin, 2, 8)


def test_only_product_files_of_the_tree_are_traced() -> None:
    """Files under the three rooms count; tests, benchmarks, a venv and other trees do not."""
    walk = _script()
    assert walk.product_file(str(TREE / "genesis_fp16" / "jobs" / "agent_job.py")) == (
        "genesis_fp16/jobs/agent_job.py"
    )
    assert walk.product_file(str(TREE / "agents" / "tests" / "x.py")) is None
    assert walk.product_file(str(TREE / "benchmarks" / "job_walk.py")) is None
    assert walk.product_file(str(TREE / "infrastructure" / ".venv" / "torch.py")) is None
    assert walk.product_file(threading.__file__) is None


def test_the_tracer_stops_at_the_stop_functions_first_call() -> None:
    """Calls of a tree file are recorded up to and including the stop code's first call,
    a generator's resumptions are not calls, and a file outside the tree is not traced."""
    walk = _script()
    folder = TREE / "genesis_fp16"
    source = (
        "def items():\n    yield 1\n    yield 2\n"
        "def save():\n    return 0\n"
        "def after():\n    return 1\n"
        "def job():\n    total = sum(items())\n    save()\n    after()\n    return total\n"
    )
    code = compile(source, str(folder / "fake_job.py"), "exec")
    names: dict[str, object] = {}
    exec(code, names)
    tracer = walk.Tracer(names["save"].__code__)  # type: ignore[attr-defined]
    tracer.trace(names["job"])
    assert tracer.functions == ["job:8", "items:1", "save:4"]
    assert tracer.files == ["genesis_fp16/fake_job.py"] * 3
    assert tracer.resumptions == 2 and tracer.stopped
