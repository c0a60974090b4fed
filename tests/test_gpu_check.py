"""tests/gpu_check.py (`make gpu-check`) without a GPU: what it reads and what it writes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gpu_check import (
    CHECKS,
    PytestOutcome,
    RunOutcome,
    check_lines,
    junit_outcomes,
    junit_properties,
    pytest_summary,
    render,
    run_footprint,
    run_training,
    slug,
    speedup,
    verdict,
)

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


def test_a_failed_training_run_fails_the_check_and_the_page_says_why(tmp_path: Path) -> None:
    """`train --device cuda` without CUDA fails for real: FAILED, its stderr on the page."""
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the run would train")
    failed = run_training("se_darwin", ("train", "se_darwin", "--device", "cuda", "--json"))
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
    assert verdict(tests, [passed], where).startswith("gpu-check FAILED: ")
    every = {f"t::{needles[0]}": "passed" for needles in CHECKS.values()}
    complete = PytestOutcome("python -m pytest -m gpu", 0, "5 passed in 3.1s", every)
    assert verdict(complete, [passed], where).startswith("gpu-check passed: ")


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
    assert len(lines) == len(CHECKS) + 1
    by_check = {line.split(":", 1)[0][9:]: line for line in lines}
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
    (line,) = check_lines(tests, [fell])[len(CHECKS) :]
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


def test_the_footprint_run_fails_for_real_without_cuda(tmp_path: Path) -> None:
    """se_darwin's footprint with the graph pool needs CUDA: on this host it fails with
    the error in its tail and writes no page (a check that can fail)."""
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the footprint would be measured")
    found = run_footprint(tmp_path, "NVIDIA H100")
    assert found.exit_code != 0 and not found.ok and "cuda" in found.tail.lower()
    assert not (tmp_path / "se_darwin_footprint_nvidia-h100.md").exists()
