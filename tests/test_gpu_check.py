"""tests/gpu_check.py (`make gpu-check`) without a GPU: what it runs, reads and writes."""

from __future__ import annotations

import ast
import importlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import gpu_check
import pytest
import torch
from cuda_generator import left_stuck
from doc_blocks import all_blocks
from gpu_check import (
    CHECKS,
    NOT_RUN,
    Budget,
    PytestOutcome,
    RunOutcome,
    check_lines,
    chosen_pieces,
    gpu_test_files,
    junit_outcomes,
    junit_properties,
    pytest_summary,
    ranges_reach_metrics,
    ratio_line,
    render,
    run_footprint,
    run_gpu_tests,
    run_overflow_replay,
    run_training,
    slug,
    speedup,
    verdict,
)
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from script_module import load_script
from test_packaging import probe_package_index, skip_or_fail

from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.record_codec import encode_record
from genesis_fp16_infrastructure.training.reports import ModuleRange, RangeSummary

ROOT = Path(__file__).resolve().parents[1]
MARK = "pytest.mark." + "gpu"  # spelt apart: this file marks no gpu test

SAMPLE_TESTS = """
import pytest

def test_ok():
    pass

def test_bad():
    assert 1 == 2

def test_skip():
    pytest.skip("not on this host")
"""


def test_reads_the_outcomes_and_summary_of_a_real_pytest_run(tmp_path: Path) -> None:
    """A pytest run with a pass, a failure and a skip: each read from junit with its reason."""
    (tmp_path / "test_sample.py").write_text(SAMPLE_TESTS)
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout
    assert junit_outcomes(junit.read_text()) == {
        "test_sample::test_ok": "passed",
        "test_sample::test_bad": "failed: assert 1 == 2",
        "test_sample::test_skip": "skipped: not on this host",
    }
    summary = pytest_summary(proc.stdout.splitlines())
    assert re.fullmatch(r"1 failed, 1 passed, 1 skipped in [0-9.]+s", summary), summary


def test_the_gpu_files_are_the_test_files_that_mark_a_gpu_test() -> None:
    """gpu_test_files() lists exactly the test files whose text holds the gpu mark (this
    file spells it apart), and each holds a test pytest selects with -m gpu."""
    expected = [
        path
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        if MARK in path.read_text(encoding="utf-8")
    ]
    found = gpu_test_files(ROOT)
    assert found == expected
    assert len(found) >= 10  # the 12 files of 2026-11-26, less none
    assert ROOT / "tests" / "test_gpu_check.py" not in found


def _imports_in_bodies(path: Path) -> list[tuple[int, str, str]]:
    """``(line, module, name)`` for each absolute ``from M import N`` inside a function of
    ``path`` (``N`` empty for ``import M``): what only runs when the test does."""
    found = []
    for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found += [(node.lineno, node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(node.lineno, alias.name, "") for alias in node.names]
    return found


def test_what_a_gpu_test_imports_in_its_body_exists_without_a_gpu() -> None:
    """A gpu test skips here before its body runs, so a library module moved or renamed
    under it went unseen until a GPU ran it (test_snapshot.py imported
    training.run.snapshot after 028cc902 merged it into guard.py; found on an H100 on
    2026-11-27). Each import in a gpu test's body resolves on this CPU; a sibling test
    module it puts on sys.path resolves to a file of tests/."""
    siblings = {path.stem for path in (ROOT / "tests").rglob("test_*.py")}
    missing = []
    for path in gpu_test_files(ROOT):
        for line, module, name in _imports_in_bodies(path):
            where = f"{path.relative_to(ROOT)}:{line}: {module} {name}".strip()
            if module in siblings:
                continue
            try:
                imported = importlib.import_module(module)
            except ImportError as exc:
                missing.append(f"{where} ({exc})")
                continue
            if name and not hasattr(imported, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    missing.append(where)
    assert not missing, missing


def test_a_mark_is_read_from_the_code_not_from_a_string(tmp_path: Path) -> None:
    """A decorated test, a class, a module's pytestmark list: listed; the mark in a string
    or a docstring, another mark, or a helper that is no test file: not."""
    tests = tmp_path / "tests" / "sub"
    tests.mkdir(parents=True)
    files = {
        "test_decorated.py": f"import pytest\n\n@{MARK}\ndef test_a():\n    pass\n",
        "test_class.py": f"import pytest\n\n@{MARK}\nclass TestA:\n    pass\n",
        "test_module.py": f"import pytest\n\npytestmark = [\n    {MARK},\n]\n",
        "test_string.py": f'"""Not {MARK}."""\nTEXT = "@{MARK}"\n',
        "test_slow.py": "import pytest\n\n@pytest.mark.slow\ndef test_a():\n    pass\n",
        "helpers.py": f"import pytest\n\nmark = {MARK}\n",
    }
    for name, text in files.items():
        (tests / name).write_text(text)
    listed = [path.name for path in gpu_test_files(tmp_path)]
    assert listed == ["test_class.py", "test_decorated.py", "test_module.py"]


def _fake_runner(
    junit_by_file: dict[str, str | None], timed_out: set[str]
) -> tuple[gpu_check.Runner, list[tuple[list[str], float | None]]]:
    """A runner that writes each file's junit (or none) where the command asks for it."""
    calls: list[tuple[list[str], float | None]] = []

    def runner(
        command: list[str], timeout: float | None = None, **kwargs: Any
    ) -> tuple[int, list[str], bool]:
        calls.append((command, timeout))
        name = Path(command[3]).name
        junit = next(a.split("=", 1)[1] for a in command if a.startswith("--junitxml="))
        xml = junit_by_file[name]
        if xml is not None:
            Path(junit).write_text(xml)
        failed = xml is None or "<failure" in xml or "<error" in xml
        return (
            (-9 if name in timed_out else int(failed)),
            ["== 1 passed in 0.1s =="],
            (name in timed_out),
        )

    return runner, calls


def _junit(*cases: str) -> str:
    return f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>'


def test_one_pytest_process_per_file_and_the_outcomes_merged(tmp_path: Path) -> None:
    """Each gpu file gets its own command (that file only, -m gpu, no xdist, a junit file
    and a timeout); the outcomes of all files are merged, a timed-out file is an error
    named by its file, and one failing file fails the whole."""
    files = [tmp_path / f"test_{name}.py" for name in ("a", "b", "c")]
    runner, calls = _fake_runner(
        {
            "test_a.py": _junit('<testcase classname="t.test_a" name="test_one"/>'),
            "test_b.py": _junit(
                '<testcase classname="t.test_b" name="test_two">'
                '<failure message="assert 1 == 2"/></testcase>',
                '<testcase classname="t.test_b" name="test_three">'
                '<error message="failed on teardown with left the CUDA generator in '
                'capture state"/></testcase>',
            ),
            "test_c.py": None,
        },
        timed_out={"test_c.py"},
    )
    found = run_gpu_tests(files, Budget(1000), runner=runner, file_timeout=42)
    assert [command[3] for command, _ in calls] == [str(path) for path in files]
    for command, timeout in calls:
        assert command[:3] == [sys.executable, "-m", "pytest"]
        assert command[4:8] == ["-m", "gpu", "-p", "no:xdist"] and timeout == 42
    assert len({a for command, _ in calls for a in command if a.startswith("--junit")}) == 3
    assert found.outcomes["t.test_a::test_one"] == "passed"
    assert found.outcomes["t.test_b::test_two"] == "failed: assert 1 == 2"
    assert "left the CUDA generator" in found.outcomes["t.test_b::test_three"]
    (timed,) = [name for name in found.outcomes if name.endswith("::(timed out)")]
    assert timed.startswith(str(files[2])) and found.outcomes[timed].startswith("error: ")
    assert not found.ok and [run.exit_code for run in found.files] == [0, 1, -9]
    assert found.files[2].timed_out and found.files[2].summary.startswith("timed out after")
    assert found.summary.startswith("1 passed, 1 failed, 2 error in 3 files, one process each")
    lines = check_lines(found, [])
    assert lines[0].startswith("FAIL     gpu-marked tests: 1 passed, 1 failed, 2 error")
    assert sum(line.startswith(f"FAIL     {files[1]}") for line in lines) == 1


def test_a_spent_budget_leaves_the_remaining_files_not_run(tmp_path: Path) -> None:
    """Once the budget is spent, no process starts: the files left are errors, not passes."""
    now = [0.0]
    budget = Budget(100, clock=lambda: now[0])
    files = [tmp_path / "test_a.py", tmp_path / "test_b.py"]
    runner, calls = _fake_runner(
        {"test_a.py": _junit('<testcase classname="t" name="test_a"/>'), "test_b.py": None},
        set(),
    )

    def slow(command: list[str], timeout: float | None = None, **kw: Any) -> Any:
        now[0] += 95  # the first file takes what is left
        return runner(command, timeout=timeout, **kw)

    found = run_gpu_tests(files, budget, runner=slow, file_timeout=90)
    assert len(calls) == 1 and calls[0][1] == 90
    assert found.files[1].exit_code == NOT_RUN and not found.ok
    assert found.outcomes[f"{files[1]}::(not run)"].startswith("error: not run")


def test_pieces_are_chosen_by_only_and_skip() -> None:
    """--only keeps the named pieces in their order, --skip drops them, an unknown name
    stops with one line listing the pieces."""
    assert chosen_pieces(None, None) == list(gpu_check.PIECES)
    assert chosen_pieces("pool,tests", None) == ["tests", "pool"]
    assert chosen_pieces(None, "bench,compile") == [
        "tests",
        "training",
        "flight",
        "pool",
        "gpu-vs-cpu",
        "memory",
    ]
    with pytest.raises(SystemExit, match="no piece bogus; pieces: tests, training"):
        chosen_pieces("tests,bogus", None)


def test_without_cuda_it_stops_in_one_line(tmp_path: Path) -> None:
    """No CUDA: exit 1, one line on stderr saying why, nothing run or written."""
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the check would run")
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "gpu_check.py"), "--out", str(out), "--only", "pool"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith(f"gpu-check: no CUDA device: {sys.executable} has torch ")
    assert not out.exists()


def test_make_passes_its_arguments_to_a_subset() -> None:
    """`make gpu-check GPU_CHECK_ARGS='--only tests'` reruns one piece."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    proc = subprocess.run(
        ["make", "-n", "-B", "gpu-check", "VENV=/nonexistent", "GPU_CHECK_ARGS=--only tests"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == "python3 tests/gpu_check.py --out benchmarks/results --only tests"


def _ranges(last_step: int) -> dict[str, Any]:
    row = ModuleRange("trunk", 3.0, 0.5, 0.0, 0.01, 0.0, 14.4, 10.0)
    total = ModuleRange("(all)", 3.0, 0.5, 0.0, 0.01, 0.0, 14.4, 10.0)
    summary = RangeSummary(2, last_step, "fp32", 25, 0.1, (row,), (row,), total)
    return encode_record(summary)


def _printed(execution: str, ranges: dict[str, Any] | None) -> dict[str, Any]:
    """What ``train --json`` prints of a finished run in ``execution``, with its ranges."""
    fields: dict[str, Any] = {"precision_requested": "fp32", "precision_used": "fp32"}
    fields |= {"precision_reason": "test", "device": "cuda", "steps": 10, "skipped_steps": 0}
    fields |= {"overflow_rate": 0.0, "loss_scale": 1.0, "final_train_loss": 0.1, "eval": {}}
    fields |= {"samples_per_second": 1.0, "wall_seconds": 1.0, "checkpoint": None}
    done = TrainResult(agent="se_darwin", quarantined=0, **fields)
    return {**done.to_json(), "execution": execution, "ranges": ranges}


def _run(result: dict[str, Any] | None, code: int = 0) -> RunOutcome:
    return RunOutcome("se_darwin", "genesis-fp16 train se_darwin", code, 9.0, result)


def test_a_captured_runs_replayed_samples_reach_the_metrics() -> None:
    """PASS only for a captured run whose last sample is a replayed step and whose ranges
    the daemon's exporter turns into the agent's gauges; each other case says why."""
    good = ranges_reach_metrics(_run(_printed("cuda_graph", _ranges(9))))
    assert good.ok and good.result is not None
    assert good.result["line"] == "2 samples, last at step 9" and good.result["series"] > 5
    early = ranges_reach_metrics(_run(_printed("cuda_graph", _ranges(3))))
    assert not early.ok and "before the first replayed step (5)" in early.tail
    eager = ranges_reach_metrics(_run(_printed("eager", _ranges(9))))
    assert not eager.ok and "not captured (execution eager)" in eager.tail
    none = ranges_reach_metrics(_run(_printed("cuda_graph", None)))
    assert not none.ok and "no range statistics" in none.tail
    failed = ranges_reach_metrics(_run(None, code=1))
    assert failed.exit_code == NOT_RUN and "failed (exit 1)" in failed.not_run
    lines = check_lines(None, [good, early, failed])
    assert lines[-3].startswith("PASS     range statistics of a captured run reach")
    assert lines[-2].startswith("FAIL ") and lines[-1].startswith("NOT RUN ")


def test_the_overflow_run_needs_a_bundle_that_replay_reproduces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The forced-overflow run on CUDA with a bundle and a reproducing replay passes;
    no bundle fails the run and leaves replay not run; a replay that does not reproduce
    fails."""
    seen: list[tuple[str, ...]] = []

    def fake(bundle: bool, reproduced: bool) -> Any:
        def run_cli(label: str, args: tuple[str, ...], timeout: float | None, **kw: Any) -> Any:
            seen.append(args)
            if args[0] == "train":
                assert kw["env"]["GENESIS_FP16_GUARD_OVERFLOW_WARMUP"] == "0"
                if bundle:
                    folder = kw["state"] / "agents" / "se_darwin" / "fault_bundles"
                    folder.mkdir(parents=True)
                    (folder / "0001.fault.pt").write_bytes(b"")
                return RunOutcome(label, "train", 1, 5.0, {"execution": "cuda_graph"})
            report = {"reproduced": reproduced, "first_nonfinite": {"module": "trunk.0"}}
            return RunOutcome(label, "replay", 0, 2.0, report)

        return run_cli

    monkeypatch.setattr(gpu_check, "run_cli", fake(bundle=True, reproduced=True))
    train, replay = run_overflow_replay(100)
    assert "--cuda-graph" in seen[0] and "fp16" in seen[0] and seen[1][0] == "replay"
    assert train.ok and replay.ok and replay.result is not None
    assert replay.result["line"] == "reproduced, first non-finite in trunk.0"
    monkeypatch.setattr(gpu_check, "run_cli", fake(bundle=False, reproduced=True))
    train, replay = run_overflow_replay(100)
    assert not train.ok and "no fault bundle" in train.tail and replay.exit_code == NOT_RUN
    monkeypatch.setattr(gpu_check, "run_cli", fake(bundle=True, reproduced=False))
    train, replay = run_overflow_replay(100)
    assert train.ok and not replay.ok and "did not reproduce" in replay.tail


@pytest.mark.parametrize(("code", "passes"), [(0, True), (2, True), (-9, False)])
def test_the_overflow_run_passes_on_its_bundle_whatever_its_end_but_not_when_killed(
    monkeypatch: pytest.MonkeyPatch, code: int, passes: bool
) -> None:
    """With a bundle written, the forced-overflow run passes whether it ended 0 or 2 (every
    rung to fp32 overflowed and no checkpoint was left to judge, as on the H200); a run
    killed by a signal fails however many bundles it left."""

    def run_cli(label: str, args: tuple[str, ...], timeout: float | None, **kw: Any) -> Any:
        if args[0] == "train":
            folder = kw["state"] / "agents" / "se_darwin" / "fault_bundles"
            folder.mkdir(parents=True)
            (folder / "0001.fault.pt").write_bytes(b"")
            return RunOutcome(label, "train", code, 5.0, {"execution": "cuda_graph"})
        report = {"reproduced": True, "first_nonfinite": {"module": "trunk.0"}}
        return RunOutcome(label, "replay", 0, 2.0, report)

    monkeypatch.setattr(gpu_check, "run_cli", run_cli)
    train, _ = run_overflow_replay(100)
    assert train.ok is passes


def test_the_ratio_line_is_the_benchmarks_own() -> None:
    """The lines giving a ratio (the benchmark's ratio table's rows), else the last line."""
    lines = [
        '{"records": 100000, "device": "cuda", "process_seconds": 12.5}',
        "| records | run | CPU ÷ GPU, process | CPU ÷ GPU, run's wall_seconds |",
        "| --- | --- | --- | --- |",
        "| 100,000 | cold | 1.10x | 1.32x |",
        "| 100,000 | warm | 3.05x | 4.20x |",
    ]
    assert ratio_line(lines) == "100,000 | cold | 1.10x | 1.32x; 100,000 | warm | 3.05x | 4.20x"
    assert ratio_line(["a", "GPU/CPU ratio 0.9"]) == "GPU/CPU ratio 0.9"
    assert ratio_line(["a", "b"]) == "b" and ratio_line([]) == "no output"


def test_the_gpu_against_cpu_benchmark_is_not_run_where_the_checkout_lacks_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without benchmarks/gpu_vs_cpu.py: NOT RUN, saying so (never a pass)."""
    monkeypatch.setattr(gpu_check, "ROOT", tmp_path)
    found = gpu_check.run_gpu_vs_cpu(tmp_path, "H200", 60)
    assert found.exit_code == NOT_RUN and found.not_run == "this checkout has no such script"
    assert check_lines(None, [found])[-1].startswith("NOT RUN  GPU against CPU")


FAKE_TORCH = """
class _Generator:
    def __init__(self, torch):
        self.torch = torch

    def clone_state(self):
        return "state"

    def graphsafe_set_state(self, state):
        self.torch.healed.append(state)
        self.torch.stuck = self.torch.stuck and not self.torch.stream_restored


class FakeTorch:
    \"\"\"Enough of torch for the probe: a draw that raises while the generator is stuck.\"\"\"

    def __init__(self, stuck, error="Offset increment"):
        self.stuck, self.error = stuck, error
        self.stream_restored = False
        self.healed = []
        self.cuda = self
        self.default_generators = [_Generator(self), _Generator(self)]

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def empty(self, size, device):
        assert device == "cuda"
        return self

    def uniform_(self):
        if self.stuck:
            raise RuntimeError(self.error + " outside graph capture encountered unexpectedly.")

    def default_stream(self):
        return "default"

    def set_stream(self, stream):
        self.stream_restored = stream == "default"
"""


def _fake_torch(tmp_path: Path) -> Any:
    """The fake torch module, written where a child pytest can import it too."""
    (tmp_path / "fake_torch.py").write_text(FAKE_TORCH)
    return load_script(tmp_path / "fake_torch.py")


def test_a_stuck_generator_is_healed_and_names_the_test(tmp_path: Path) -> None:
    """A draw raising "Offset increment": the default stream restored, every default
    generator given its cloned state, and one line naming the test; a usable generator:
    None; another error: raised."""
    fake = _fake_torch(tmp_path)
    stuck = fake.FakeTorch(stuck=True)
    line = left_stuck(stuck, "tests/x.py::test_capture")
    assert line is not None and line.startswith(
        "tests/x.py::test_capture left the CUDA generator in capture state (Offset increment"
    )
    assert line.endswith("; healed for the next test")
    assert stuck.stream_restored and stuck.healed == ["state", "state"]
    assert left_stuck(fake.FakeTorch(stuck=False), "t") is None
    with pytest.raises(RuntimeError, match="device-side assert"):
        left_stuck(fake.FakeTorch(stuck=True, error="device-side assert"), "t")


FIXTURE_TESTS = f"""
import sys
import pytest
import fake_torch

@{MARK}
def test_leaves_it_stuck():
    sys.modules["torch"] = fake_torch.FakeTorch(stuck=True)

@{MARK}
def test_after_it():
    assert not sys.modules["torch"].stuck

def test_unmarked_leaves_it_stuck():
    sys.modules["torch"].stuck = True

def test_unmarked_after_it():
    sys.modules["torch"].stuck = False
"""


def test_the_suites_fixture_fails_the_gpu_test_that_left_it_stuck(tmp_path: Path) -> None:
    """tests/conftest.py in a real pytest run: the gpu test that leaves the generator stuck
    fails at teardown, by name; the next gpu test finds it healed; unmarked tests are not
    probed."""
    for name in ("conftest.py", "cuda_generator.py", "cuda_serial.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / name)
    _fake_torch(tmp_path)
    (tmp_path / "test_sample.py").write_text(FIXTURE_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs CUDA\n")
    junit = tmp_path / "junit.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    command = [sys.executable, "-m", "pytest", "test_sample.py", "-p", "no:cacheprovider"]
    proc = subprocess.run(
        [*command, "-p", "no:xdist", f"--junitxml={junit}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    outcomes = junit_outcomes(junit.read_text())
    stuck = outcomes.pop("test_sample::test_leaves_it_stuck")
    assert stuck.startswith("error: failed on teardown") and (
        "test_sample.py::test_leaves_it_stuck left the CUDA generator in capture state" in stuck
    ), proc.stdout
    assert outcomes == {
        "test_sample::test_after_it": "passed",
        "test_sample::test_unmarked_leaves_it_stuck": "passed",
        "test_sample::test_unmarked_after_it": "passed",
    }


def test_a_failed_training_run_fails_the_check_and_the_page_says_why(tmp_path: Path) -> None:
    """`train --device cuda` without CUDA fails for real: FAILED, its stderr on the page."""
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the run would train")
    failed = run_training(
        "se_darwin", ("train", "se_darwin", "--device", "cuda", "--json"), timeout=300
    )
    assert failed.exit_code != 0 and not failed.ok and failed.result is None
    assert "cuda" in failed.tail.lower()
    passed = RunOutcome("rlhf_ppo", "genesis-fp16 train rlhf_ppo", 0, 1.5, {"device": "cuda"})
    tests = PytestOutcome("python -m pytest -m gpu", 0, "2 passed in 3.1s", {"t::a": "passed"})
    info = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-23 12:00 UTC", "torch": "2.11"}
    page = render(info, tests, [failed, passed])
    assert "| torch | 2.11 |" in page and "| `t::a` | passed |" in page
    run_line = (
        f"`genesis-fp16 train se_darwin --device cuda --json`: FAILED (exit {failed.exit_code})"
    )
    assert run_line in page
    assert failed.tail in page and '{"device": "cuda"}' in page
    where = tmp_path / f"gpu-check_{slug(info['device'])}.md"
    assert where.name == "gpu-check_nvidia-h100-80gb-hbm3.md"
    line = verdict(tests, [failed, passed], where)
    assert line.startswith("gpu-check FAILED: tests 2 passed in 3.1s; ")
    assert f"se_darwin: exit {failed.exit_code}; rlhf_ppo: ok; results in {where}" in line
    # Every check's tests passed too: only then does the whole check pass.
    assert verdict(tests, [passed], where).startswith("gpu-check INCOMPLETE: ")
    every = {f"t::{needles[0]}": "passed" for needles in CHECKS.values()}
    complete = PytestOutcome("python -m pytest -m gpu", 0, "5 passed in 3.1s", every)
    assert verdict(complete, [passed], where).startswith("gpu-check passed: ")
    skipped = gpu_check.not_run("pool", "python ...", "the check's budget was spent")
    assert verdict(complete, [passed, skipped], where).startswith("gpu-check INCOMPLETE: ")
    assert "pool: not run" in verdict(complete, [passed, skipped], where)
    assert verdict(None, [passed], where).startswith("gpu-check INCOMPLETE: tests not run")


SAMPLE_CHECK_TESTS = """
def test_verify_run_on_cuda_passes_bit_for_bit(record_property):
    record_property("verdict", "8 steps equal bit for bit")

def test_compiled_step_within_the_stated_tolerance():
    assert 0.05 <= 0.02
"""


def test_each_check_gets_one_line_from_a_real_pytest_run(tmp_path: Path) -> None:
    """From a real pytest run's junit: PASS with the recorded verdict, FAIL with the
    failure, NOT RUN for a check whose test did not run, and one line per run."""
    (tmp_path / "test_checks.py").write_text(SAMPLE_CHECK_TESTS)
    junit = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}"],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
    )
    xml = junit.read_text()
    tests = PytestOutcome("pytest", 1, "1 failed, 1 passed", junit_outcomes(xml), "")
    tests.properties = junit_properties(xml)
    run = RunOutcome("memory table", "genesis-fp16 bench ...", 2, 1.0, None)
    lines = check_lines(tests, [run])
    assert len(lines) == 1 + len(CHECKS) + 1
    assert lines[0] == "FAIL     gpu-marked tests: 1 failed, 1 passed"
    by_check = {line.split(":", 1)[0][9:]: line for line in lines[1:]}
    verified = by_check["captured step verified bit for bit against eager (fp32, bf16, fp16)"]
    assert verified.startswith("PASS ") and "verdict=8 steps equal bit for bit" in verified
    compiled = by_check[
        "compiled step within its stated tolerance (the measured difference in its verdict)"
    ]
    assert compiled.startswith("FAIL ") and "assert 0.05 <= 0.02" in compiled
    assert by_check["a capture that raises falls back to eager from the same step"].startswith(
        "NOT RUN"
    )
    assert lines[-1] == "FAIL     memory table: genesis-fp16 bench ... (exit 2)"
    fell = RunOutcome("se_darwin", "genesis-fp16 train se_darwin", 0, 1.0, {})
    fell.result = {"execution_fallback": "verification_mismatch", "execution_reason": "step 5"}
    line = check_lines(tests, [fell])[-1]
    assert line.startswith("FAIL     se_darwin") and "fell back to eager: step 5" in line
    assert all("\n" not in line for line in lines)
    assert all(":" not in check for check in CHECKS)  # a line reads "WORD check: why"


def test_the_page_gives_the_gpu_speedup_and_the_bench_tables(tmp_path: Path) -> None:
    """The default se_darwin run on cuda against the host's cpu, with the 3x target, and
    each bench table the bench wrote, under its command."""

    def run(label: str, wall: float, precision: str, execution: str) -> RunOutcome:
        result = {"wall_seconds": wall, "precision_used": precision, "execution": execution}
        return RunOutcome(label, f"genesis-fp16 train {label}", 0, wall + 9, result)

    runs = [
        run("se_darwin", 0.5, "fp32", "cuda_graph"),
        run("se_darwin on cpu", 1.5, "bf16", "eager"),
    ]
    assert speedup(runs) == (
        "se_darwin with defaults: cuda 0.50 s (fp32, cuda_graph) against cpu 1.50 s "
        "(bf16, eager): 3.00x, meets the 3x target"
    )
    assert "misses the 3x target" in speedup(
        [runs[0], run("se_darwin on cpu", 1.0, "bf16", "eager")]
    )
    assert "not measured" in speedup(runs[:1])
    (tmp_path / "bench_cuda-nvidia-h100_gpu-check.md").write_text(
        "| size | runner |\n| large | ours |\n"
    )
    bench = [RunOutcome("large", "genesis-fp16 bench --device cuda", 0, 60.0, {"exit_code": 0})]
    tests = PytestOutcome("python -m pytest -m gpu", 0, "2 passed in 3.1s", {"t::a": "passed"})
    page = render({"device": "H100", "date": "2026-11-23"}, tests, runs, bench, tmp_path)
    assert "**se_darwin with defaults: cuda 0.50 s" in page
    assert "`genesis-fp16 bench --device cuda`: ok, 60.0 s" in page
    assert "### `bench_cuda-nvidia-h100_gpu-check.md`" in page and "| large | ours |" in page
    (tmp_path / "memory_table_h100.md").write_text("| execution | batch |\n| eager | 64 |\n")
    page = render({"device": "H100", "date": "2026-11-23"}, tests, runs, bench, tmp_path)
    assert "## Memory table (peak MiB beside the formula)" in page and "| eager | 64 |" in page
    assert "## Checks" in page and "NOT RUN  captured step verified" in page
    skipped = gpu_check.not_run("compile", "genesis-fp16 train x", "the check's budget was spent")
    page = render({"device": "H100", "date": "2026-11-23"}, None, [skipped], [], tmp_path)
    assert "`genesis-fp16 train x`: not run (the check's budget was spent)" in page


def test_the_footprint_run_fails_for_real_without_cuda(tmp_path: Path) -> None:
    """se_darwin's footprint with the graph pool needs CUDA: on this host it fails with
    the error in its tail and writes no page (a check that can fail)."""
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the footprint would be measured")
    found = run_footprint(tmp_path, "NVIDIA H100", timeout=600)
    assert found.exit_code not in (0, -1) and not found.ok and "cuda" in found.tail.lower()
    assert not (tmp_path / "se_darwin_footprint_nvidia-h100.md").exists()


def _install_block(start: str) -> str:
    (text,) = [
        block.text
        for block in all_blocks()
        if block.file == "docs/install.md" and block.key_line.startswith(start)
    ]
    return text


def _runtime_closure() -> set[str]:
    """genesis-fp16's runtime dependencies and theirs, as installed here, less torch and
    numpy (the GPU image's own are kept) and what only torch brings."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    todo = [Requirement(r) for r in pyproject["project"]["dependencies"]]
    found: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found or name in ("torch", "numpy"):
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        found.add(name)
        todo += [Requirement(r) for r in metadata.requires(name) or []]
    return found


def test_the_bare_host_download_names_every_dependency_but_torch_and_numpy() -> None:
    """docs/install.md's wheel list is exactly the runtime dependencies' closure (less
    torch and numpy), at constraints.txt's pins, and the GPU host's lines install them
    without an index and then run make gpu-check."""
    text = _install_block("python3 -m pip download")
    words = text.replace("\\\n", " ").split()
    named = {canonicalize_name(w) for w in words if re.fullmatch(r"[a-z][a-z0-9-]*", w)}
    named -= {"python3", "pip", "download", "cp"}
    assert named == _runtime_closure()
    assert "-c constraints.txt" in " ".join(words) and "--python-version 3.12" in " ".join(words)
    install = _install_block("python3 -m pip install --no-index").splitlines()
    assert install == [
        "python3 -m pip install --no-index --no-deps .whl/*.whl",
        "python3 -m pip install --no-index --no-deps --no-build-isolation -e .",
        "make gpu-check",
    ]


@pytest.mark.slow
def test_the_bare_host_download_runs_as_written(tmp_path: Path) -> None:
    """The download block, run by bash beside a copy of constraints.txt: one cp312 or
    pure-Python Linux wheel per package, at its pin (skipped without a package index,
    a failure under CI)."""
    reason = probe_package_index()
    if reason is not None:
        skip_or_fail(reason)
    shutil.copy(ROOT / "constraints.txt", tmp_path / "constraints.txt")
    done = subprocess.run(
        ["bash", "-c", _install_block("python3 -m pip download")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pins: dict[str, str] = {
        str(canonicalize_name(line.split("==")[0])): line.split("==")[1].strip()
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    wheels = sorted(p.name for p in (tmp_path / ".whl").iterdir())
    got: dict[str, str] = {}
    for wheel in wheels:
        name, version, *_, python, _abi, platform = wheel[: -len(".whl")].split("-")
        assert python in ("py3", "cp312") or python.startswith("py2.py3"), wheel
        assert platform == "any" or "x86_64" in platform, wheel
        got[str(canonicalize_name(name))] = version
    assert got == {name: pins[name] for name in _runtime_closure()}


def test_every_piece_reports_even_when_one_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_pieces with each piece faked: the pool is read beside the tests, a piece whose
    own code raises is one FAIL line naming the error, a spent budget gives NOT RUN, and
    every other piece still reports."""
    order: list[str] = []

    def outcome(label: str) -> RunOutcome:
        order.append(label)
        return RunOutcome(label, label, 0, 1.0, {"exit_code": 0})

    def tests(files: list[Path], budget: Budget, runner: Any = None) -> PytestOutcome:
        order.append("tests")
        assert [f.name for f in files][-2:] == ["test_bench.py", "test_compiled_step.py"]
        return PytestOutcome("pytest", 0, "1 passed", {"t::a": "passed"})

    def broken(run: RunOutcome) -> RunOutcome:
        raise KeyError("ranges")

    fakes: dict[str, Any] = {
        "run_gpu_tests": tests,
        "run_training": lambda label, args, timeout: outcome(label),
        "ranges_reach_metrics": broken,
        "run_overflow_replay": lambda timeout: [outcome("overflow"), outcome("replay")],
        "run_pool_read": lambda timeout, echo=True: outcome(f"pool echo={echo}"),
        "run_gpu_vs_cpu": lambda out, device, timeout: outcome("gpu-vs-cpu"),
        "run_bench": lambda label, args, timeout: (
            outcome(label)
            if timeout is not None
            else gpu_check.not_run(label, label, "the check's budget was spent")
        ),
        "run_memory_table": lambda out, device, timeout: outcome("memory"),
        "run_footprint": lambda out, device, timeout: outcome("footprint"),
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(gpu_check, name, fake)
    monkeypatch.setattr(gpu_check.ForkRunner, "start", classmethod(lambda cls: None))
    found = gpu_check.run_pieces(list(gpu_check.PIECES), tmp_path, "H200", Budget(1000))
    assert "pool echo=False" in order and order.index("tests") < order.index("se_darwin")
    lines = check_lines(found["tests"], [*found["runs"], *found["bench"]])
    (raised,) = [line for line in lines if "raised" in line]
    assert raised.startswith("FAIL     range statistics to the metrics") and "KeyError" in raised
    assert {"overflow", "replay", "gpu-vs-cpu", "memory", "footprint"} <= set(order)
    assert "se_darwin --compile on" in order
    # A spent budget: the bench's commands are not run, and say so.
    monkeypatch.setattr(gpu_check, "MIN_START_S", 10**6)
    found = gpu_check.run_pieces(["bench"], tmp_path, "H200", Budget(1000))
    (line,) = check_lines(None, found["bench"])[-1:]
    assert line == "NOT RUN  large, eager and captured: the check's budget was spent"


def _tiny_tests(folder: Path) -> Path:
    path = folder / "test_tiny_fork.py"
    path.write_text(
        "import time\n"
        "def test_passes():\n    assert 1 + 1 == 2\n"
        "def test_fails():\n    assert 1 + 1 == 3\n"
        "def test_hangs():\n    time.sleep(600)\n"
    )
    return path


def test_the_warm_parent_forks_one_pytest_process_per_command_and_reports_its_exit(
    tmp_path: Path,
) -> None:
    """A command run through the fork runner is a real pytest process: its output, its
    exit code (0 when its tests pass, 1 when one fails), and the parent serves again."""
    path = _tiny_tests(tmp_path)
    runner = gpu_check.ForkRunner.start()
    assert runner is not None, "the warm parent refused on a CPU host"
    try:
        base = [sys.executable, "-m", "pytest", str(path), "-p", "no:cacheprovider", "-q"]
        code, lines, fired = runner([*base, "-k", "passes"], timeout=120, cwd=tmp_path)
        assert (code, fired) == (0, False)
        assert any("1 passed" in line for line in lines)
        code, lines, fired = runner([*base, "-k", "fails"], timeout=120, cwd=tmp_path)
        assert (code, fired) == (1, False)
        assert any("1 failed" in line for line in lines)
    finally:
        runner.close()


def test_a_forked_process_past_its_timeout_is_killed_and_said_so(tmp_path: Path) -> None:
    """A hung file's forked process is killed at its timeout (fired), and the next command
    still runs through the same parent."""
    path = _tiny_tests(tmp_path)
    runner = gpu_check.ForkRunner.start()
    assert runner is not None
    try:
        base = [sys.executable, "-m", "pytest", str(path), "-p", "no:cacheprovider", "-q"]
        code, _, fired = runner([*base, "-k", "hangs"], timeout=5, cwd=tmp_path)
        assert fired and code != 0
        code, _, fired = runner([*base, "-k", "passes"], timeout=120, cwd=tmp_path)
        assert (code, fired) == (0, False)
    finally:
        runner.close()


def _hang() -> str:
    """A probe child's CUDA that never answers (faked)."""
    time.sleep(600)
    return "never reached"


def test_the_warm_parent_refuses_to_fork_when_a_forked_child_could_not_use_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent refuses (and gpu-check starts each file afresh) when torch's CUDA is
    initialised or its forked CUDA probe fails or hangs, naming why, and serves when the
    probe passes."""
    import gpu_fork_runner

    from genesis_fp16.launch import cuda_fork_probe

    monkeypatch.setattr(gpu_fork_runner, "WARM_MODULES", ("json",))
    # This worker's earlier tests may have left threads of their own (CI's run saw two):
    # the probe's refusals are asserted with one thread, the thread refusal at the end.
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert gpu_fork_runner.warm_up() is None  # the probe passes: no CUDA device here
    monkeypatch.setattr(cuda_fork_probe, "use_cuda", lambda: os._exit(1))
    refused = gpu_fork_runner.warm_up() or ""
    assert refused == "a forked child could not use CUDA: the probe ended with exit code 1"
    monkeypatch.setattr(cuda_fork_probe, "use_cuda", _hang)
    monkeypatch.setattr(cuda_fork_probe, "PROBE_SECONDS", 1.0)
    assert "did not finish in 1 s (killed)" in (gpu_fork_runner.warm_up() or "")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert "initialised CUDA" in (gpu_fork_runner.warm_up() or "")
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert gpu_fork_runner.warm_up() == "2 threads after the imports: a fork copies one"
