"""`make gpu-check`: the GPU paths checked by one command on a CUDA host, results written.

    python tests/gpu_check.py --out benchmarks/results [--only tests,training] [--skip bench]

Each piece has a timeout, and the whole check a budget (``--budget``, 360 s: an H100 or
H200 in six minutes); a piece the budget no longer covers is NOT RUN, never cut short
silently. The pieces, in the order they run (``--only``/``--skip`` name them):

1. ``tests``: the ``gpu``-marked tests, **one pytest process per file** (the files that
   hold ``pytest.mark.gpu``: :func:`gpu_test_files`), each with a timeout, their junit
   outcomes merged. Only those files are collected: the tree's other modules may need
   what a bare GPU image lacks. One process per file keeps a test that leaves the CUDA
   generator stuck from failing every test after it (tests/conftest.py also names it);
2. ``training``: both agents' default training on CUDA, and se_darwin on the host's
   CPU (what the GPU is compared with), each with ``--json`` and a fresh state folder;
   the default se_darwin run's range statistics then go through the daemon's exporter
   (``RangeMetrics``: what ``/metrics`` serves) and must come from a replayed step;
3. ``flight``: ``train se_darwin --device cuda`` in fp16 with a learning rate of 10,000
   (the CPU replay tests' forced overflow, tests/genesis_fp16/commands/
   test_cli_replay_agents.py) writes a fault bundle, and ``replay`` reproduces it;
4. ``pool``: a 100,000-record se_darwin pool (over the streaming threshold) split and
   read with the host's numpy, its version reported (CPU work: it runs beside the tests);
5. ``gpu-vs-cpu``: ``benchmarks/gpu_vs_cpu.py --records 100000 --json`` where the
   checkout has it, its ratio lines printed;
6. ``bench``: the bench's CUDA rows (large preset, eager and captured);
7. ``memory``: the memory table's rows beside the formula; ``footprint``: se_darwin's
   bytes with its captured step's graph pool;
8. ``compile``: ``train se_darwin --compile on`` and the bench's compiled-inside-the-graph
   row (last: the slowest, and the least likely to fit).

``<out>/gpu-check_<device>.md`` and ``.json`` hold the host, the commit, pytest's outcome
per test and each command's exit code, time and JSON line, ready to commit. The output
ends with one PASS, FAIL or NOT RUN line per check and the closing verdict.

Without CUDA it stops before anything runs, with one line and exit code 1. The exit code
is 0 only when every check passed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Both agents' defaults, and se_darwin on the same host's CPU (the GPU's comparison).
TRAINING_RUNS: dict[str, tuple[str, ...]] = {
    "se_darwin": ("train", "se_darwin", "--device", "cuda", "--seed", "1", "--json"),
    "rlhf_ppo": ("train", "rlhf_ppo", "--device", "cuda", "--seed", "1", "--json"),
    "se_darwin on cpu": ("train", "se_darwin", "--device", "cpu", "--seed", "1", "--json"),
}
# The compiled step inside the captured one: its compile time is most of the run.
COMPILE_RUNS: dict[str, tuple[str, ...]] = {
    "se_darwin --compile on": (
        *("train", "se_darwin", "--device", "cuda", "--compile", "on"),
        *("--seed", "1", "--json"),
    ),
}
# The H100 report's section 2 rows, trimmed to the captured comparison at two batches.
BENCH_RUNS: dict[str, tuple[str, ...]] = {
    "large, eager and captured": (
        *("bench", "--device", "cuda", "--sizes", "large"),
        *("--runners", "ours,ours-graph,hand-graph", "--precisions", "fp32,bf16,fp16"),
        *("--batch-sizes", "64,8192", "--steps", "50", "--tag", "gpu-check"),
    ),
}
BENCH_COMPILE_RUNS: dict[str, tuple[str, ...]] = {
    "large, compiled inside the graph": (
        *("bench", "--device", "cuda", "--sizes", "large", "--runners", "ours-graph-compile"),
        *("--precisions", "bf16", "--batch-sizes", "8192", "--steps", "50"),
        *("--tag", "gpu-check-compile"),
    ),
}
# The memory table's rows (issue 39): a few steps are enough for a peak.
MEMORY_RUN: tuple[str, ...] = (
    *("bench", "--device", "cuda", "--sizes", "large", "--runners", "ours,ours-graph"),
    *("--precisions", "fp32,bf16,fp16", "--batch-sizes", "64,1024,8192,16384"),
    *("--warmup", "2", "--steps", "5", "--tag", "gpu-check-memory"),
)
# se_darwin driven non-finite in fp16 on CUDA (as tests/genesis_fp16/commands/
# test_cli_replay_agents.py does on the CPU): its first fault is bundled.
OVERFLOW_RUN: tuple[str, ...] = (
    *("train", "se_darwin", "--device", "cuda", "--cuda-graph", "on", "--precision", "fp16"),
    *("--steps", "30"),
    *("--option", "learning_rate=10000", "--seed", "1", "--json"),
)
OVERFLOW_ENV = {
    "GENESIS_FP16_GUARD_CHECK_INTERVAL": "5",
    "GENESIS_FP16_GUARD_OVERFLOW_WINDOW": "5",
    "GENESIS_FP16_GUARD_OVERFLOW_WARMUP": "0",
}
POOL_RECORDS = 100_000
# The benchmark at the pool size where 3x is within reach (forensics section 7), its
# default steps: cold and warm on each device, about a minute (its 2,000-record half too
# would not fit the budget).
GPU_VS_CPU_ARGS = ("--records", "100000")
POOL_LABEL = "100,000-record pool read"
# A captured step's first replay: 3 eager warm-ups (StepGraphs.warmup), then the capture
# (step 4); a range sample from a replayed step is at step 5 or later.
FIRST_REPLAYED_STEP = 5
# Each check and the gpu-marked tests that decide it (a substring of the test's id).
CHECKS: dict[str, tuple[str, ...]] = {
    "captured step verified bit for bit against eager (fp32, bf16, fp16)": (
        "test_verify_run_on_cuda_passes_bit_for_bit",
        "test_200_graphed_steps_equal_eager_bit_for_bit",
    ),
    "compiled step within its stated tolerance (the measured difference in its verdict)": (
        "test_compiled_step_within_the_stated_tolerance",
    ),
    "a capture that raises falls back to eager from the same step": (
        "test_a_real_capture_that_raises_falls_back_on_cuda",
    ),
    "a mid-capture failure leaves the process usable (rand, dropout, a second capture)": (
        "test_a_real_invalidated_capture_leaves_the_process_usable",
        "test_after_a_failed_capture_the_eager_draws_are_those_of_a_run_that_never_tried",
    ),
    "steady-state captured steps sync nothing (se_darwin, rlhf_ppo)": (
        "test_a_steady_state_captured_step_syncs_nothing_on_cuda",
    ),
    "carried loss scale, at most 1 skipped step in the first 50, eval within its SE": (
        "test_on_cuda_a_carried_scale_skips_at_most_one_step_in_the_first_50",
    ),
    "range statistics sampled from replayed steps of a captured, capturable task": (
        "test_range_stats_sample_replayed_steps_of_a_captured_task",
    ),
    "range statistics sampled off the replayed graph (eager sampled steps, plain replays)": (
        "test_captured_run_samples_eagerly_and_replays_the_plain_graph",
        "test_cost_chosen_sampling_on_the_captured_step",
    ),
    "the flight recorder on a captured, capturable task (its bundle replays)": (
        "test_a_captured_task_bundles_its_overflow_and_replay_reproduces_it",
    ),
    "bench, a row's peak leaves out earlier rows' memory": (
        "test_a_rows_peak_leaves_out_what_earlier_rows_left_allocated",
    ),
}
PIECES = ("tests", "training", "flight", "pool", "gpu-vs-cpu", "bench", "memory", "compile")
BUDGET_S = 360.0  # the whole check: six minutes on an H100 or H200
FILE_TIMEOUT_S = 120.0  # one gpu test file's pytest process (the compiles take longest)
TESTS_SHARE = 0.6  # of the budget, at most, for the tests (the rest for the runs)
# Run last among the test files: their compiles take the longest, so a budget cut leaves
# the fewest tests unrun.
SLOW_TEST_FILES = ("test_bench.py", "test_compiled_step.py")
RUN_TIMEOUT_S = 60.0  # one training run or benchmark
BENCH_TIMEOUT_S = 90.0  # one bench command (18 rows, each built, warmed up and captured)
GPU_VS_CPU_TIMEOUT_S = 150.0  # benchmarks/gpu_vs_cpu.py: a pool made, four runs
POOL_TIMEOUT_S = 120.0  # the pool read, beside the tests: it costs the budget nothing
MIN_START_S = 10.0  # a piece is not started with less than this left
GPU_SPEEDUP_TARGET = 3.0  # default train se_darwin: the GPU against its own host's CPU
TAIL_LINES = 40
NOT_RUN = -2  # a RunOutcome's exit code when it never started


class Budget:
    """The check's remaining seconds: each piece's timeout is its own cap or what is left."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.deadline = clock() + seconds

    def left(self) -> float:
        return max(0.0, self.deadline - self.clock())

    def timeout(self, cap: float) -> float | None:
        """``cap`` or the seconds left, whichever is less; None when too little is left."""
        left = self.left()
        return None if left < MIN_START_S else min(cap, left)


@dataclass
class FileRun:
    """One gpu test file's pytest process."""

    path: str
    exit_code: int
    wall_seconds: float
    summary: str
    timed_out: bool = False


@dataclass
class PytestOutcome:
    """The gpu-marked tests: each file's process, and the outcome of every test."""

    command: str
    exit_code: int
    summary: str
    outcomes: dict[str, str] = field(default_factory=dict)
    tail: str = ""
    properties: dict[str, dict[str, str]] = field(default_factory=dict)
    files: list[FileRun] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class RunOutcome:
    """One command (`genesis-fp16 train ... --json`, the bench, a benchmark): exit code,
    wall time, its JSON result; ``not_run`` says why it never started."""

    label: str
    command: str
    exit_code: int
    wall_seconds: float
    result: dict[str, Any] | None
    tail: str = ""
    not_run: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.result is not None


def not_run(label: str, command: str, why: str) -> RunOutcome:
    return RunOutcome(label, command, NOT_RUN, 0.0, None, "", why)


def cuda_or_exit() -> dict[str, Any]:
    """The host's torch and CUDA device; without them exit 1 with one line saying why."""
    try:
        import torch
    except ImportError as exc:
        sys.exit(f"gpu-check: {sys.executable} cannot import torch ({exc}); install it first")
    if not torch.cuda.is_available():
        sys.exit(
            f"gpu-check: no CUDA device: {sys.executable} has torch {torch.__version__}, "
            "which sees none; run it on a GPU host (docs/install.md, On a bare GPU host)"
        )
    import numpy

    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "device_count": torch.cuda.device_count(),
        "driver": _nvidia_smi_driver(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "interpreter": sys.executable,
        "cpu_count": os.cpu_count(),
        "commit": _commit(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _nvidia_smi_driver() -> str:
    if shutil.which("nvidia-smi") is None:
        return "unknown (no nvidia-smi)"
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    proc = subprocess.run(query, capture_output=True, text=True, check=False)
    return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 else "unknown"


def _commit() -> str:
    """HEAD's short hash, marked dirty when the tree has changes; unknown without git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    except OSError:
        return "unknown (no git)"
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    return head.stdout.strip() + (" (with uncommitted changes)" if status.stdout.strip() else "")


def gpu_test_files(root: Path = ROOT) -> list[Path]:
    """The test files under ``root``/tests that mark a test, a class or the module with
    ``pytest.mark.gpu`` (read from the code: a mention in a string is no mark)."""
    found = []
    for path in sorted((root / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        if any(_is_gpu_mark(node) for node in ast.walk(tree)):
            found.append(path)
    return found


def _is_gpu_mark(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "gpu"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "pytest"
    )


Runner = Callable[..., tuple[int, list[str], bool]]


def _stream(
    command: list[str], timeout: float | None = None, **kwargs: Any
) -> tuple[int, list[str], bool]:
    """Run ``command`` in its own process group, echoing its output as it comes; kill the
    group after ``timeout`` seconds. The exit code, the lines, and whether it timed out."""
    lines: list[str] = []
    fired = threading.Event()
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **kwargs,
    ) as proc:

        def kill() -> None:
            fired.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill) if timeout is not None else None
        if timer is not None:
            timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                print(line, end="", flush=True)
                lines.append(line.rstrip("\n"))
        finally:
            if timer is not None:
                timer.cancel()
    return proc.returncode, lines, fired.is_set()


class ForkRunner:
    """A ``Runner`` for pytest commands that forks each process from a warm parent
    (tests/gpu_fork_runner.py: torch, ``torch._dynamo``, pytest and hypothesis imported
    once, CUDA never touched) instead of starting it afresh; one process per file still.
    ``start()`` gives None, with the reason printed, where that parent refuses or fails:
    the caller then starts each file's process afresh (``_stream``)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    @classmethod
    def start(cls, timeout: float = 120.0) -> ForkRunner | None:
        command = [sys.executable, str(ROOT / "tests" / "gpu_fork_runner.py")]
        try:
            proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
            )
        except OSError as exc:
            print(f"gpu-check: no warm parent ({exc}): each file's process starts afresh")
            return None
        runner = cls(proc)
        answer = runner._next(timeout)
        if answer.get("ready"):
            return runner
        runner.close()
        why = answer.get("refused") or answer.get("error") or answer
        print(f"gpu-check: no warm parent ({why}): each file's process starts afresh")
        return None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _next(self, timeout: float | None) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return {"error": f"no answer in {timeout} s"}
        if line is None:
            return {"error": f"the warm parent ended (exit {self.proc.poll()})"}
        answer: dict[str, Any] = json.loads(line)
        return answer

    def __call__(
        self, command: list[str], timeout: float | None = None, cwd: Path = ROOT
    ) -> tuple[int, list[str], bool]:
        if self.proc.poll() is not None:  # the warm parent died: start afresh, as before
            return _stream(command, timeout=timeout, cwd=cwd)
        args = command[command.index("pytest") + 1 :]
        with tempfile.NamedTemporaryFile(suffix=".log", delete=False) as handle:
            log = Path(handle.name)
        try:
            assert self.proc.stdin is not None
            request = {"args": args, "log": str(log), "cwd": str(cwd)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = self._next(30.0).get("pid")
            if pid is None:
                raise RuntimeError("the warm parent did not fork")
            ended = self._next(timeout)
            fired = "exit" not in ended
            if fired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                ended = self._next(30.0)
            lines = log.read_text(errors="replace").splitlines()
        finally:
            log.unlink(missing_ok=True)
        for line in lines:
            print(line, flush=True)
        return int(ended.get("exit", -9)), lines, fired

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def run_gpu_tests(
    files: list[Path],
    budget: Budget,
    runner: Runner = _stream,
    file_timeout: float = FILE_TIMEOUT_S,
) -> PytestOutcome:
    """Each file's gpu-marked tests in a pytest process of its own (xdist blocked), with
    a junit file and a timeout; the outcomes merged. A file the budget no longer covers
    is reported as not run."""
    merged: dict[str, str] = {}
    properties: dict[str, dict[str, str]] = {}
    runs: list[FileRun] = []
    tails: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, path in enumerate(files):
            shown = _relative(path)
            timeout = budget.timeout(file_timeout)
            if timeout is None:
                runs.append(FileRun(shown, NOT_RUN, 0.0, "not run: the budget was spent"))
                merged[f"{shown}::(not run)"] = "error: not run, the check's budget was spent"
                continue
            junit = Path(tmp) / f"junit-{index}.xml"
            command = [sys.executable, "-m", "pytest", str(path), "-m", "gpu", "-p", "no:xdist"]
            command += ["-p", "no:cacheprovider", "-rA", f"--junitxml={junit}"]
            print(f"\n--- {shown} (timeout {timeout:.0f} s)", flush=True)
            started = time.monotonic()
            code, lines, timed_out = runner(command, timeout=timeout, cwd=ROOT)
            wall = round(time.monotonic() - started, 1)
            xml = junit.read_text() if junit.exists() else None
            outcomes = junit_outcomes(xml) if xml else {}
            properties.update(junit_properties(xml) if xml else {})
            summary = pytest_summary(lines)
            if timed_out:
                summary = f"timed out after {wall} s"
                merged[f"{shown}::(timed out)"] = f"error: the file's process ran past {wall} s"
            elif not outcomes:
                merged[f"{shown}::(no outcome)"] = f"error: exit {code}, no junit outcomes"
            merged.update(outcomes)
            runs.append(FileRun(shown, code, wall, summary, timed_out))
            if code != 0:
                tails.append(f"{shown} (exit {code}):\n" + "\n".join(lines[-TAIL_LINES:]))
    bad = [run for run in runs if run.exit_code != 0]
    counts = _count(merged)
    total = round(sum(run.wall_seconds for run in runs), 1)
    summary = f"{counts} in {len(files)} files, one process each, {total} s"
    shown = "python -m pytest FILE -m gpu -p no:xdist -p no:cacheprovider -rA, for each file"
    if isinstance(runner, ForkRunner):
        shown += " (forked from tests/gpu_fork_runner.py, torch already imported)"
    return PytestOutcome(
        shown, 1 if bad else 0, summary, merged, "\n\n".join(tails), properties, runs
    )


def _count(outcomes: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        word = outcome.split(":", 1)[0]
        counts[word] = counts.get(word, 0) + 1
    order = ("passed", "failed", "error", "skipped")
    return ", ".join(f"{counts[w]} {w}" for w in order if w in counts) or "no tests"


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def junit_outcomes(xml_text: str) -> dict[str, str]:
    """``{test id: outcome}`` from pytest's junit XML: passed, or failed/error/skipped: why.
    A test whose teardown failed (tests/conftest.py: the generator left stuck) is failed."""
    outcomes = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        found = [child for child in case if child.tag in ("failure", "error", "skipped")]
        if not found:
            outcomes[name] = "passed"
            continue
        worst = next((c for c in found if c.tag in ("failure", "error")), found[0])
        kind = {"failure": "failed"}.get(worst.tag, worst.tag)
        why = " ".join(worst.get("message", "").split())[:200]
        outcomes[name] = f"{kind}: {why}" if why else kind
    return outcomes


def junit_properties(xml_text: str) -> dict[str, dict[str, str]]:
    """``{test id: {name: value}}``: what tests recorded with pytest's ``record_property``
    (a verification's verdict, a measured difference)."""
    found: dict[str, dict[str, str]] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        for prop in case.iter("property"):
            found.setdefault(name, {})[prop.get("name", "")] = prop.get("value", "")
    return found


def check_lines(
    tests: PytestOutcome | None, runs: list[RunOutcome], memory: RunOutcome | None = None
) -> list[str]:
    """One line per check: PASS, FAIL or NOT RUN, and what decided it."""
    lines = []
    if tests is None:
        lines.append("NOT RUN  gpu-marked tests: left out (--only/--skip)")
    else:
        word = "PASS" if tests.ok else "FAIL"
        lines.append(f"{word:<8} gpu-marked tests: {tests.summary}")
        for file_run in tests.files:
            if file_run.exit_code != 0:
                lines.append(
                    f"FAIL     {file_run.path}: exit {file_run.exit_code}, {file_run.summary}"
                )
    for check, needles in CHECKS.items():
        found = {
            name: outcome
            for name, outcome in (tests.outcomes if tests else {}).items()
            if any(needle in name for needle in needles)
        }
        if not found:
            lines.append(f"NOT RUN  {check}: no such test ran")
            continue
        bad = [f"{n.rsplit('::', 1)[-1]}: {o}" for n, o in found.items() if o != "passed"]
        word = "FAIL" if bad else "PASS"
        props = tests.properties if tests else {}
        extra = [f"{k}={v}" for n in found for k, v in props.get(n, {}).items()]
        why = "; ".join(bad) if bad else f"{len(found)} test(s) passed"
        lines.append(f"{word:<8} {check}: {why}" + (f" ({'; '.join(extra)})" if extra else ""))
    for run in [*runs, *([memory] if memory is not None else [])]:
        if run.exit_code == NOT_RUN:
            lines.append(f"NOT RUN  {run.label}: {run.not_run}")
            continue
        # A run that resolved a captured step but went eager failed its check: on a GPU
        # the captured step must verify (se_darwin's stacked ensemble, compile inside).
        result = run.result or {}
        fallback = result.get("execution_fallback")
        word = "PASS" if run.ok and not fallback else "FAIL"
        why = f", fell back to eager: {result.get('execution_reason')}" if fallback else ""
        detail = result.get("line") or ""
        detail = detail or (run.tail.splitlines()[-1] if run.tail else "")
        lines.append(
            f"{word:<8} {run.label}: {run.command} (exit {run.exit_code}{why})"
            + (f": {detail}" if detail else "")
        )
    return lines


def pytest_summary(lines: list[str]) -> str:
    """pytest's last ``=== 12 passed, 1 failed in 40s ===`` line, without the rules."""
    for line in reversed(lines):
        match = re.fullmatch(r"=+ (.*\bin [0-9.]+s.*?) =+", line.strip())
        if match:
            return match.group(1)
    return "no pytest summary line (see the tail)"


def _child_env(state: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The host's environment less GENESIS_FP16_*, the checkout first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.pop("ENABLE_FP16_TRAINING", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["GENESIS_FP16_STATE_DIR"] = str(state)
    env.update(extra or {})
    return env


def run_cli(
    label: str,
    args: tuple[str, ...],
    timeout: float | None,
    *,
    state: Path | None = None,
    env: dict[str, str] | None = None,
) -> RunOutcome:
    """One CLI command in a state folder (a fresh one unless given), the host's
    GENESIS_FP16_* left out; None for ``timeout``: not run (the budget is spent)."""
    shown = "genesis-fp16 " + " ".join(args)
    if timeout is None:
        return not_run(label, shown, "the check's budget was spent")
    print(f"\n--- {shown} (timeout {timeout:.0f} s)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = state if state is not None else Path(tmp) / "state"
        started = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "genesis_fp16", *args],
                cwd=tmp,  # no ./.env of the checkout's
                env=_child_env(folder, env),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            wall = round(time.monotonic() - started, 1)
            return RunOutcome(label, shown, -1, wall, None, f"timed out after {wall} s")
    wall = round(time.monotonic() - started, 1)
    outcome = RunOutcome(label, shown, proc.returncode, wall, last_json_line(proc.stdout))
    if not outcome.ok:
        outcome.tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-TAIL_LINES:])
    print(json.dumps(outcome.result) if outcome.result is not None else outcome.tail, flush=True)
    return outcome


def run_training(
    label: str, args: tuple[str, ...], timeout: float | None = RUN_TIMEOUT_S
) -> RunOutcome:
    """One training run (``--json``) in a fresh state folder."""
    return run_cli(label, args, timeout)


def run_bench(label: str, args: tuple[str, ...], timeout: float | None) -> RunOutcome:
    """One bench command; it writes its own CSV and table (``--out-dir``), no JSON line."""
    outcome = run_cli(label, args, timeout)
    if outcome.exit_code == 0:
        outcome.result, outcome.tail = {"exit_code": 0}, ""
    return outcome


def ranges_reach_metrics(run: RunOutcome) -> RunOutcome:
    """The default CUDA se_darwin run's range statistics through the daemon's exporter
    (``RangeMetrics``, what ``/metrics`` serves): the run was captured, its samples' last
    step was replayed, and the exposition holds the agent's range gauges."""
    label = "range statistics of a captured run reach the metrics"
    shown = f"{run.command} -> RangeMetrics.export -> generate_latest"
    if not run.ok or run.result is None:
        return not_run(label, shown, f"the run it reads failed (exit {run.exit_code})")
    result = run.result
    ranges = result.get("ranges")
    problems = []
    if result.get("execution") != "cuda_graph":
        problems.append(f"the run was not captured (execution {result.get('execution')})")
    if not ranges:
        problems.append("the run reported no range statistics")
    elif int(ranges.get("last_step", 0)) < FIRST_REPLAYED_STEP:
        problems.append(
            f"its last sample is step {ranges.get('last_step')}, before the first replayed "
            f"step ({FIRST_REPLAYED_STEP}): no sample came from inside the graph"
        )
    exposition = ""
    if ranges:
        exposition = _export_ranges(result)
        if 'genesis_fp16_range_samples{agent="se_darwin"}' not in exposition:
            problems.append("the exposition has no genesis_fp16_range_samples for se_darwin")
    samples = f"{ranges['samples']} samples, last at step {ranges['last_step']}" if ranges else ""
    line = "; ".join(problems) if problems else samples
    found = {"line": line, "ranges": ranges, "series": exposition.count("\n")}
    return RunOutcome(label, shown, 1 if problems else 0, 0.0, found, "\n".join(problems))


def _export_ranges(result: dict[str, Any]) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    from genesis_fp16.metrics.daemon_metrics import RangeMetrics
    from genesis_fp16.plugin_api import TrainResult

    registry = CollectorRegistry()
    RangeMetrics(registry).export("se_darwin", TrainResult.from_json(result))
    text: str = generate_latest(registry).decode()
    return "\n".join(line for line in text.splitlines() if not line.startswith("#"))


def run_overflow_replay(timeout: float | None) -> list[RunOutcome]:
    """se_darwin on CUDA driven non-finite in fp16: a fault bundle, replayed by `replay`."""
    train_label, replay_label = "se_darwin fp16 overflow on cuda", "its bundle replays"
    shown_replay = "genesis-fp16 replay BUNDLE --json"
    if timeout is None:
        train = run_cli(train_label, OVERFLOW_RUN, None)
        return [train, not_run(replay_label, shown_replay, "its training run did not run")]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        train = run_cli(train_label, OVERFLOW_RUN, timeout, state=state, env=OVERFLOW_ENV)
        bundles = sorted((state / "agents" / "se_darwin" / "fault_bundles").glob("*.fault.pt"))
        if not bundles:
            why = "the run wrote no fault bundle"
            train.exit_code, train.result = train.exit_code or 1, None
            train.tail = f"{train.tail}\n{why}".strip()
            return [train, not_run(replay_label, shown_replay, why)]
        # Whatever the run's end, the bundled fault was the point, as in the CPU replay
        # test (code=None there): exit 0 (a demotion finished it), or 1 or 2 (every rung
        # down to fp32 overflowed at this learning rate, and the candidate wrote no
        # checkpoint: "nothing to judge", exit 2 on the H200 on 2026-11-26). A run killed
        # at its timeout or by a signal still fails the check.
        if train.exit_code in (0, 1, 2):
            result = train.result or {}
            line = f"exit {train.exit_code}, {result.get('execution')}, bundle {bundles[0].name}"
            train.exit_code, train.result, train.tail = 0, {**result, "line": line}, ""
        left = timeout - (time.monotonic() - started)
        if left < MIN_START_S:
            return [train, not_run(replay_label, shown_replay, "the check's budget was spent")]
        replay = run_cli(replay_label, ("replay", str(bundles[0]), "--json"), left, state=state)
    report = replay.result or {}
    if replay.ok and report.get("reproduced") is not True:
        replay.exit_code = 1
        replay.tail = f"replay did not reproduce it: {json.dumps(report)[:400]}"
    first = report.get("first_nonfinite") or {}
    replay.result = {**report, "line": f"reproduced, first non-finite in {first.get('module')}"}
    replay.command = "genesis-fp16 replay " + bundles[0].name + " --json"
    if replay.exit_code != 0:
        replay.result["line"] = replay.tail.splitlines()[-1] if replay.tail else ""
    return [train, replay]


def run_python(
    label: str,
    argv: list[str],
    timeout: float | None,
    shown: str | None = None,
    echo: bool = True,
) -> tuple[RunOutcome, list[str]]:
    """``python ARGV`` from the checkout's root with a timeout; the outcome and its lines
    (``echo``: printed as it ends)."""
    shown = shown or "python " + " ".join(argv)
    if timeout is None:
        return not_run(label, shown, "the check's budget was spent"), []
    if echo:
        print(f"\n--- {shown} (timeout {timeout:.0f} s)", flush=True)
    started = time.monotonic()
    env = {**os.environ}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(
            [sys.executable, *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        wall = round(time.monotonic() - started, 1)
        return RunOutcome(label, shown, -1, wall, None, f"timed out after {wall} s"), []
    wall = round(time.monotonic() - started, 1)
    lines = proc.stdout.splitlines()
    if echo:
        print(proc.stdout, end="", flush=True)
    tail = "" if proc.returncode == 0 else "\n".join(proc.stderr.splitlines()[-TAIL_LINES:])
    result = {"exit_code": 0} if proc.returncode == 0 else None
    return RunOutcome(label, shown, proc.returncode, wall, result, tail), lines


def run_pool_read(timeout: float | None, echo: bool = True) -> RunOutcome:
    """A 100,000-record pool split and read by this host's numpy (a child process)."""
    argv = [str(Path(__file__).resolve()), "--read-pool", str(POOL_RECORDS)]
    outcome, lines = run_python(POOL_LABEL, argv, timeout, echo=echo)
    outcome.command = f"python tests/gpu_check.py --read-pool {POOL_RECORDS}"
    if outcome.exit_code == 0:
        found = last_json_line("\n".join(lines))
        outcome.result = found if found is not None else None
        if found is not None:
            outcome.result = {**found, "line": _pool_line(found)}
    return outcome


def _pool_line(found: dict[str, Any]) -> str:
    return (
        f"numpy {found['numpy']}: {found['records']:,} records split from a "
        f"{found['mib']} MiB pool in {found['split_seconds']} s, {found['examples']:,} "
        f"examples read in {found['read_seconds']} s"
    )


def read_pool(count: int) -> dict[str, Any]:
    """A ``count``-record se_darwin pool written, split a window at a time, and read as
    the daemon reads it; the split must stream (over the threshold) and give every record."""
    import numpy

    import genesis_fp16_infrastructure.data.sources as sources
    from genesis_fp16_infrastructure.data.pool_stream import split_pool
    from genesis_fp16_infrastructure.data.readers import read_trajectories
    from genesis_fp16_infrastructure.data.synthetic import generate_pool

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "pool"
        folder.mkdir()
        pool = generate_pool(count, seed=0)
        file = folder / "trajectory_pool.json"
        file.write_text(json.dumps(pool))
        size = file.stat().st_size
        if size <= sources.STREAM_ABOVE:
            raise SystemExit(f"the pool is {size} bytes, not over the streaming threshold")
        started = time.monotonic()
        split = split_pool(file)
        if split is None:
            raise SystemExit("split_pool refused a generated pool")
        records = sum(len(window) for window in split[1])
        split_seconds = time.monotonic() - started
        if records != len(pool["trajectories"]):
            raise SystemExit(f"split {records} records of {len(pool['trajectories'])}")
        started = time.monotonic()
        data = read_trajectories(folder, Path(tmp) / "quarantine.jsonl")
        read_seconds = time.monotonic() - started
    return {
        "numpy": numpy.__version__,
        "records": records,
        "mib": round(size / 2**20, 1),
        "split_seconds": round(split_seconds, 2),
        "examples": len(data.examples),
        "read_seconds": round(read_seconds, 2),
    }


def run_gpu_vs_cpu(out: Path, device: str, timeout: float | None) -> RunOutcome:
    """``benchmarks/gpu_vs_cpu.py --records 100000 --json <out>/gpu_vs_cpu_<device>.json``
    where the checkout has it; its ratio lines printed."""
    script = ROOT / "benchmarks" / "gpu_vs_cpu.py"
    page = out / f"gpu_vs_cpu_{slug(device)}.json"
    argv = ["benchmarks/gpu_vs_cpu.py", *GPU_VS_CPU_ARGS, "--json", str(page)]
    label = "GPU against CPU (benchmarks/gpu_vs_cpu.py)"
    if not script.exists():
        return not_run(label, "python " + " ".join(argv), "this checkout has no such script")
    outcome, lines = run_python(label, argv, timeout)
    if outcome.exit_code == 0:
        ratio = ratio_line(lines)
        outcome.result = {"exit_code": 0, "json": str(page), "line": ratio}
        if page.exists():
            outcome.result["data"] = json.loads(page.read_text())
    return outcome


def ratio_line(lines: list[str]) -> str:
    """The benchmark's lines that give a ratio (``ratio`` or ``1.23x``: its ratio table's
    rows), joined; else its last line."""
    found = [
        " ".join(line.strip(" |").split())
        for line in lines
        if "ratio" in line.lower() or re.search(r"\b\d+(\.\d+)?x\b", line)
    ]
    if found:
        return "; ".join(found)
    return lines[-1].strip() if lines else "no output"


def run_memory_table(out: Path, device: str, timeout: float | None) -> RunOutcome:
    """The memory table's bench rows, then the table beside the formula (on the CPU)."""
    outcome = run_bench("memory table", (*MEMORY_RUN, "--out-dir", str(out.resolve())), timeout)
    found = sorted(out.glob("bench_cuda-*_gpu-check-memory.csv"))
    if outcome.exit_code == NOT_RUN:
        return outcome
    if outcome.exit_code != 0 or not found:
        outcome.result = None
        outcome.tail = outcome.tail or "the bench wrote no memory rows"
        return outcome
    page = out / f"memory_table_{slug(device)}.md"
    command = [sys.executable, "-m", "genesis_fp16.bench.memory", str(found[-1]), "--out"]
    proc = subprocess.run([*command, str(page)], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        outcome.exit_code, outcome.result = proc.returncode, None
        outcome.tail = "\n".join(proc.stderr.splitlines()[-TAIL_LINES:])
        return outcome
    outcome.result = {"exit_code": 0, "table": str(page)}
    print(proc.stdout, flush=True)
    return outcome


def run_footprint(out: Path, device: str, timeout: float | None = RUN_TIMEOUT_S) -> RunOutcome:
    """se_darwin's bytes with the CUDA graph pool of its captured step measured
    (``benchmarks/se_darwin_footprint.py --device cuda``), to ``<out>``."""
    page = out / f"se_darwin_footprint_{slug(device)}.md"
    argv = ["benchmarks/se_darwin_footprint.py", "--device", "cuda", "--out", str(page)]
    shown = "python " + " ".join(argv[:3])
    outcome, _ = run_python("se_darwin footprint", argv, timeout, shown)
    if outcome.exit_code == 0:
        outcome.result = {"exit_code": 0, "page": str(page)}
    return outcome


def last_json_line(stdout: str) -> dict[str, Any] | None:
    """The result object that ends a `--json` run's stdout, or None when there is none.
    A failed command's error object (``{"error", "kind", "exit_code"}``) is no result: its
    stderr, on the page, says why."""
    lines = stdout.strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and "error" not in value else None


def slug(device: str) -> str:
    """A file-name part from a device name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "cuda"


def speedup(runs: list[RunOutcome]) -> str:
    """The default se_darwin run's training seconds on CUDA against the host's CPU."""
    by_label = {run.label: run.result for run in runs}
    cuda, cpu = by_label.get("se_darwin"), by_label.get("se_darwin on cpu")
    if not cuda or not cpu:
        return "se_darwin cuda against cpu: not measured (a run failed or did not run)"
    ratio = float(cpu["wall_seconds"]) / float(cuda["wall_seconds"])
    mark = "meets" if ratio >= GPU_SPEEDUP_TARGET else "misses"
    return (
        f"se_darwin with defaults: cuda {cuda['wall_seconds']:.2f} s "
        f"({cuda['precision_used']}, {cuda['execution']}) against cpu {cpu['wall_seconds']:.2f} s "
        f"({cpu['precision_used']}, {cpu['execution']}): {ratio:.2f}x, {mark} the "
        f"{GPU_SPEEDUP_TARGET:g}x target"
    )


def bench_tables(out: Path) -> list[str]:
    """The markdown tables the bench commands wrote under ``out``."""
    lines = []
    for page in sorted(out.glob("bench_cuda-*_gpu-check*.md")):
        lines += [f"### `{page.name}`", "", page.read_text().strip(), ""]
    return lines


def render(
    info: dict[str, Any],
    tests: PytestOutcome | None,
    runs: list[RunOutcome],
    bench: list[RunOutcome] | None = None,
    out_dir: Path | None = None,
) -> str:
    """The results page: provenance, the tests' outcomes, each run and its JSON line."""
    out = [f"# make gpu-check on {info['device']} ({info['date']})", ""]
    out += ["Written by `make gpu-check` (tests/gpu_check.py); every figure below is measured.", ""]
    out += ["| | |", "| --- | --- |"]
    out += [f"| {key} | {value} |" for key, value in info.items()]
    if tests is not None:
        out += ["", "## gpu-marked tests, one process per file", ""]
        out += [f"`{tests.command}`: **{tests.summary}**", ""]
        if tests.files:
            out += ["| file | exit | seconds | pytest |", "| --- | --- | --- | --- |"]
            out += [
                f"| `{r.path}` | {r.exit_code} | {r.wall_seconds} | {r.summary} |"
                for r in tests.files
            ]
            out += [""]
        out += ["| test | outcome |", "| --- | --- |"]
        out += [f"| `{name}` | {outcome} |" for name, outcome in sorted(tests.outcomes.items())]
        if tests.tail:
            out += ["", "```text", tests.tail, "```"]
    out += ["", "## Runs on CUDA", ""]
    for run in runs:
        if run.exit_code == NOT_RUN:
            out += [f"`{run.command}`: not run ({run.not_run})", ""]
            continue
        verdict = "ok" if run.ok else f"FAILED (exit {run.exit_code})"
        out += [f"`{run.command}`: {verdict}, {run.wall_seconds} s", ""]
        if run.result is not None:
            out += ["```json", json.dumps(run.result, sort_keys=True), "```", ""]
        if run.tail:
            out += ["```text", run.tail, "```", ""]
    out += [f"**{speedup(runs)}**", ""]
    if bench is not None:
        out += ["## Bench (`genesis-fp16 bench`, ms per step)", ""]
        for run in bench:
            if run.exit_code == NOT_RUN:
                out += [f"`{run.command}`: not run ({run.not_run})", ""]
                continue
            verdict = "ok" if run.exit_code == 0 else f"FAILED (exit {run.exit_code})"
            out += [f"`{run.command}`: {verdict}, {run.wall_seconds} s", ""]
            if run.tail:
                out += ["```text", run.tail, "```", ""]
        out += bench_tables(out_dir) if out_dir is not None else []
    for page in sorted(out_dir.glob("memory_table_*.md")) if out_dir is not None else []:
        out += ["## Memory table (peak MiB beside the formula)", "", page.read_text().strip(), ""]
    for page in sorted(out_dir.glob("se_darwin_footprint_*.md")) if out_dir is not None else []:
        text = page.read_text().strip().replace("# ", "## ", 1)
        out += [text, ""]
    out += ["## Checks", "", "```text", *check_lines(tests, [*runs, *(bench or [])]), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def verdict(tests: PytestOutcome | None, runs: list[RunOutcome], page: Path) -> str:
    """The one closing line: passed, FAILED (a check failed) or INCOMPLETE (a check did
    not run), what each piece gave, and where the results are."""
    parts = [f"tests {tests.summary}" if tests is not None else "tests not run"]
    for run in runs:
        word = (
            "ok" if run.ok else ("not run" if run.exit_code == NOT_RUN else f"exit {run.exit_code}")
        )
        parts.append(f"{run.label}: {word}")
    lines = check_lines(tests, runs)
    if any(line.startswith("FAIL") for line in lines):
        word = "FAILED"
    elif any(line.startswith("NOT RUN") for line in lines):
        word = "INCOMPLETE"
    else:
        word = "passed"
    return f"gpu-check {word}: {'; '.join(parts)}; results in {page}"


def chosen_pieces(only: str | None, skip: str | None) -> list[str]:
    """The pieces to run, in their order: all, or ``--only``'s, less ``--skip``'s."""
    named = [p.strip() for text in (only or "", skip or "") for p in text.split(",") if p.strip()]
    unknown = sorted(set(named) - set(PIECES))
    if unknown:
        raise SystemExit(f"gpu-check: no piece {', '.join(unknown)}; pieces: {', '.join(PIECES)}")
    wanted = {p.strip() for p in only.split(",")} if only else set(PIECES)
    left_out = {p.strip() for p in skip.split(",")} if skip else set()
    return [p for p in PIECES if p in wanted and p not in left_out]


def guarded(label: str, piece: Callable[[], RunOutcome]) -> RunOutcome:
    """``piece()``, or, when it raises, a failed outcome naming the error: a bug in one
    piece never loses the results of the others."""
    try:
        return piece()
    except Exception as exc:
        return _raised(label, exc)


def guarded_many(label: str, piece: Callable[[], list[RunOutcome]]) -> list[RunOutcome]:
    """``guarded`` for a piece of several outcomes."""
    try:
        return piece()
    except Exception as exc:
        return [_raised(label, exc)]


def _raised(label: str, exc: Exception) -> RunOutcome:
    why = f"gpu-check's own step raised {type(exc).__name__}: {exc}"
    return RunOutcome(label, label, 1, 0.0, None, why)


def run_pieces(pieces: list[str], out: Path, device: str, budget: Budget) -> dict[str, Any]:
    """Each chosen piece, in order, each under its timeout and the budget left."""
    out_dir = str(out.resolve())
    tests = None
    runs: list[RunOutcome] = []
    bench: list[RunOutcome] = []
    pool: list[RunOutcome] = []
    beside = None
    if "pool" in pieces and "tests" in pieces:
        # CPU work only: read beside the gpu tests (the host has cores to spare).
        beside = threading.Thread(
            target=lambda: pool.append(
                guarded(POOL_LABEL, lambda: run_pool_read(POOL_TIMEOUT_S, echo=False))
            )
        )
        beside.start()
    if "tests" in pieces:
        files = sorted(gpu_test_files(), key=lambda path: path.name in SLOW_TEST_FILES)
        warm = ForkRunner.start()
        try:
            tests = run_gpu_tests(files, Budget(budget.left() * TESTS_SHARE), warm or _stream)
        finally:
            if warm is not None:
                warm.close()
    if "training" in pieces:
        for label, args in TRAINING_RUNS.items():
            runs.append(run_training(label, args, budget.timeout(RUN_TIMEOUT_S)))
        runs.append(
            guarded("range statistics to the metrics", lambda: ranges_reach_metrics(runs[0]))
        )
    if "flight" in pieces:
        timeout = budget.timeout(2 * RUN_TIMEOUT_S)
        runs += guarded_many("forced overflow", lambda: run_overflow_replay(timeout))
    if "pool" in pieces:
        if beside is not None:
            beside.join()
            print(f"\n--- {POOL_LABEL} (beside the tests)", flush=True)
        else:
            pool.append(guarded(POOL_LABEL, lambda: run_pool_read(budget.timeout(POOL_TIMEOUT_S))))
        runs += pool
        print(pool[0].result.get("line") if pool[0].result else pool[0].tail, flush=True)
    if "gpu-vs-cpu" in pieces:
        timeout = budget.timeout(GPU_VS_CPU_TIMEOUT_S)
        runs.append(guarded("GPU against CPU", lambda: run_gpu_vs_cpu(out, device, timeout)))
    if "bench" in pieces:
        for label, args in BENCH_RUNS.items():
            args = (*args, "--out-dir", out_dir)
            bench.append(run_bench(label, args, budget.timeout(BENCH_TIMEOUT_S)))
    if "memory" in pieces:
        timeout = budget.timeout(BENCH_TIMEOUT_S)
        bench.append(guarded("memory table", lambda: run_memory_table(out, device, timeout)))
        timeout = budget.timeout(RUN_TIMEOUT_S / 2)
        bench.append(guarded("se_darwin footprint", lambda: run_footprint(out, device, timeout)))
    if "compile" in pieces:
        for label, args in COMPILE_RUNS.items():
            runs.append(run_training(label, args, budget.timeout(RUN_TIMEOUT_S)))
        for label, args in BENCH_COMPILE_RUNS.items():
            args = (*args, "--out-dir", out_dir)
            bench.append(run_bench(label, args, budget.timeout(RUN_TIMEOUT_S)))
    return {"tests": tests, "runs": runs, "bench": bench}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--only", help=f"comma-separated pieces to run, of: {', '.join(PIECES)}")
    parser.add_argument("--skip", help="comma-separated pieces to leave out")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for it all")
    parser.add_argument("--read-pool", type=int, help=argparse.SUPPRESS)  # the pool's child
    args = parser.parse_args(argv)
    if args.read_pool:
        print(json.dumps(read_pool(args.read_pool)))
        return 0
    pieces = chosen_pieces(args.only, args.skip)
    info = cuda_or_exit()
    info["pieces"] = ", ".join(pieces)
    started = time.monotonic()
    found = run_pieces(pieces, args.out, info["device"], Budget(args.budget))
    info["seconds"] = round(time.monotonic() - started, 1)
    tests, runs, bench = found["tests"], found["runs"], found["bench"]
    args.out.mkdir(parents=True, exist_ok=True)
    page = args.out / f"gpu-check_{slug(info['device'])}.md"
    page.write_text(render(info, tests, runs, bench, args.out))
    data = {
        "host": info,
        "tests": asdict(tests) if tests is not None else None,
        "runs": [asdict(r) for r in runs],
        "bench": [asdict(r) for r in bench],
        "speedup": speedup(runs),
    }
    page.with_suffix(".json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    line = verdict(tests, [*runs, *bench], page)
    print(f"\n{speedup(runs)}\n")
    print("\n".join(check_lines(tests, [*runs, *bench])))
    print(f"\n{line} ({info['seconds']} s)")
    return 0 if line.startswith("gpu-check passed") else 1


if __name__ == "__main__":
    # Run as a script, sys.path[0] is tests/, where the folder tests/genesis_fp16/ (test
    # modules, no __init__) is a namespace package that PathFinder returns before an
    # editable install's finder is asked: `genesis_fp16.metrics` would then not be found
    # (seen on the H200, 2026-11-26). The check imports nothing of its own from tests/.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    sys.exit(main())
