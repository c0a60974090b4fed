"""The resident run process (genesis_fp16/commands/resident.py): one per device, forked once by
the run worker, serves its runs one after another; a failed, stopped, killed or over-memory
run ends it, a module edited since it was imported makes it stale, and each run says
whether it reused it. CPU only: what it keeps on a GPU (the CUDA context) is unverified here."""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from genesis_fp16.commands import resident
from genesis_fp16.launch import handoff, launcher
from genesis_fp16.launch.handoff import child_env
from genesis_fp16.launch.run_worker import ForkedChild, RunWorker

CPU = {"device": "cpu", "max_mib": resident.MAX_MIB}


@pytest.fixture
def worker() -> Iterator[RunWorker]:
    started = RunWorker()
    yield started
    started.close()


def _run(
    worker: RunWorker, args: list[str], cwd: Path, options: dict[str, Any] = CPU
) -> tuple[ForkedChild, int, list[dict[str, Any]]]:
    """One run served by ``worker``: the child, its exit code and its resident records."""
    child = worker.start(args, child_env(dict(os.environ)), cwd=str(cwd), resident=options)
    assert child.stdout is not None and child.stderr is not None and child.stdin is not None
    child.stdout.read()
    err = child.stderr.read()  # EOF: the resident process let go of the run's pipes
    code = child.wait(timeout=120)
    for pipe in (child.stdin, child.stdout, child.stderr):
        pipe.close()
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    return child, code, [r for r in records if r.get("logger") == "genesis_fp16.resident"]


def _ends(pid: int, within: float = 30.0) -> bool:
    """Whether the process ``pid`` ends within ``within`` seconds: gone, or exited and not
    yet reaped by its parent (the worker reaps it at its own pace: a zombie has ended)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.timeout(300)
def test_two_runs_are_served_by_one_resident_process_and_the_second_says_it_reused_it(
    worker: RunWorker, tmp_path: Path
) -> None:
    """Two runs on the CPU: the same process (its pid, the worker's child, not reaped)
    serves both; the first says it is fresh, the second that it reused it."""
    first, code, said = _run(worker, ["train", "--help"], tmp_path)
    assert code == 0 and first.resident_run == 1
    assert [r["reused"] for r in said] == [False] and said[0]["resident_pid"] == first.pid
    second, code, said = _run(worker, ["train", "--help"], tmp_path)
    assert code == 0 and second.pid == first.pid and second.resident_run == 2
    assert [r["reused"] for r in said] == [True]
    assert f"resident run process {first.pid} (cpu) reused: run 2" in said[0]["event"]
    os.kill(first.pid, 0)  # alive between runs


@pytest.mark.timeout(300)
def test_a_failed_run_ends_its_resident_process_and_the_next_run_gets_a_fresh_one(
    worker: RunWorker, tmp_path: Path
) -> None:
    """A run that exits non-zero gets its code, its resident process says it ends and
    ends; the next run is served by a fresh process, whose first record says why."""
    first, _, _ = _run(worker, ["train", "--help"], tmp_path)
    failed, code, said = _run(worker, ["no-such-command"], tmp_path)
    assert code == 2 and failed.pid == first.pid
    assert "ends after this run: its run exited with code 2" in said[-1]["event"]
    fresh, code, said = _run(worker, ["train", "--help"], tmp_path)
    assert code == 0 and fresh.pid != first.pid and fresh.resident_run == 1
    assert f"{first.pid}, the one before, ended: its run exited with code 2" in said[0]["event"]
    assert _ends(first.pid)


@pytest.mark.timeout(300)
def test_a_resident_process_over_its_memory_bound_ends_after_its_run_and_says_so(
    worker: RunWorker, tmp_path: Path
) -> None:
    """Over its bound (1 MiB here: any process is) after a successful run, the resident
    process says so on the run's stderr and ends; the run itself succeeded."""
    first, code, said = _run(worker, ["train", "--help"], tmp_path, {"device": "cpu", "max_mib": 1})
    assert code == 0
    assert "is over its bound of 1 MiB (GENESIS_FP16_RUN_RESIDENT_MAX_MIB)" in said[-1]["event"]
    fresh, code, _ = _run(worker, ["train", "--help"], tmp_path)
    assert code == 0 and fresh.pid != first.pid


@pytest.mark.timeout(300)
def test_a_resident_process_killed_between_runs_is_replaced(
    worker: RunWorker, tmp_path: Path
) -> None:
    """SIGKILL of an idle resident process: the worker reaps it, and the next run is
    served by a fresh one."""
    first, _, _ = _run(worker, ["train", "--help"], tmp_path)
    os.kill(first.pid, signal.SIGKILL)
    time.sleep(0.5)  # the worker's loop reaps it within its 0.05 s poll
    fresh, code, said = _run(worker, ["train", "--help"], tmp_path)
    assert code == 0 and fresh.pid != first.pid and said[0]["reused"] is False


def _request(tmp_path: Path, steps: int, name: str) -> Any:
    from genesis_fp16.plugin_api import TrainRequest
    from genesis_fp16_infrastructure.data.synthetic import generate_pool

    pool = tmp_path / "pool.json"
    if not pool.exists():
        pool.write_text(json.dumps(generate_pool(100, seed=0)))
    return TrainRequest(
        agent="se_darwin",
        precision="fp32",
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / name,
        data_path=pool,
        steps=steps,
    )


def _resident_events(logs: list[dict[str, Any]]) -> list[str]:
    return [str(r["event"]) for r in logs if r.get("child_logger") == "genesis_fp16.resident"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_stopped_by_sigterm_or_killed_ends_its_resident_process(
    worker: RunWorker, tmp_path: Path
) -> None:
    """A se_darwin run stopped by its timeout (SIGTERM: it checkpoints and ends with its
    result) ends its resident process, said in the relayed log; the next run gets a fresh
    one and trains, reusing nothing; a run killed over its memory limit fails with reason
    memory, and the run after it is served by a fresh process too."""
    with structlog.testing.capture_logs() as logs:
        launcher.train_in_child(_request(tmp_path, 2, "a"), worker=worker, resident_max_mib=8192)
        stopped = launcher.train_in_child(
            _request(tmp_path, 10**6, "b"), timeout=20, worker=worker, resident_max_mib=8192
        )
        assert 1 <= stopped.steps < 10**6
        launcher.train_in_child(_request(tmp_path, 2, "c"), worker=worker, resident_max_mib=8192)
    events = _resident_events(logs)
    assert "reused: run 2" in events[1]
    assert "ends after this run: its run was stopped by SIGTERM" in events[2]
    assert "a fresh process for this run" in events[3] and "stopped by SIGTERM" in events[3]
    with pytest.raises(launcher.LaunchError) as killed:
        launcher.train_in_child(
            _request(tmp_path, 10**6, "d"), memory_limit=1, worker=worker, resident_max_mib=8192
        )
    assert killed.value.reason == "memory"
    with structlog.testing.capture_logs() as logs:
        launcher.train_in_child(_request(tmp_path, 2, "e"), worker=worker, resident_max_mib=8192)
    assert "a fresh process for this run" in _resident_events(logs)[0]


def test_an_edited_module_makes_the_resident_process_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module imported by a run (outside the interpreter's directories) whose file
    changed since: the process is stale and names the file; an untouched one is not."""
    source = tmp_path / "resident_probe_agent.py"
    source.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    state = resident.Resident("cpu", 8192, resident._Baseline.take())
    import resident_probe_agent  # noqa: F401  (a run's import)

    try:
        state.note_sources()
        assert str(source) in state.sources and state.stale() is None
        source.write_text("VALUE = 22\n")
        assert state.stale() == f"{source} changed since it was imported (an edited plugin)"
    finally:
        sys.modules.pop("resident_probe_agent", None)


def test_what_a_run_changes_is_put_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Environment, directory, argv, sys.path, a signal handler, the root logger's
    handlers, sys.stderr, a warning filter and torch's process-wide settings (threads,
    default dtype, deterministic algorithms, matmul precision) and the garbage
    collector's threshold that a run left are put back once the baseline is restored."""
    import warnings

    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    baseline = resident._Baseline.take()
    handler = logging.StreamHandler()
    before = signal.getsignal(signal.SIGUSR1)
    torch_before = resident._torch_state()
    filters = list(warnings.filters)
    threshold = gc.get_threshold()
    try:
        os.environ["RESIDENT_PROBE"] = "1"
        os.chdir("/")
        sys.argv = ["x", "train", "y"]
        sys.path.insert(0, str(tmp_path))
        signal.signal(signal.SIGUSR1, lambda signum, frame: None)
        logging.getLogger().addHandler(handler)
        sys.stderr = sys.stdout
        warnings.filterwarnings("ignore", message="resident probe")
        torch.set_num_threads(torch.get_num_threads() + 1)
        torch.set_default_dtype(torch.float64)
        torch.use_deterministic_algorithms(True)
        torch.set_float32_matmul_precision("medium")
        gc.set_threshold(threshold[0] + 1, 3, 4)
        baseline.restore()
        assert "RESIDENT_PROBE" not in os.environ and os.getcwd() == str(tmp_path)
        assert sys.argv[1:] == [] and signal.getsignal(signal.SIGUSR1) == before
        assert handler not in logging.getLogger().handlers and sys.stderr is baseline.streams[1]
        assert str(tmp_path) not in sys.path and warnings.filters == filters
        assert (
            resident._torch_state() == torch_before and torch.get_default_dtype() == torch.float32
        )
        assert gc.get_threshold() == threshold
    finally:
        gc.set_threshold(*threshold)
        os.environ.pop("RESIDENT_PROBE", None)
        signal.signal(signal.SIGUSR1, before)
        warnings.filters[:] = filters
        resident._set_torch_state(torch_before)


FIXTURE_PLUGINS = Path(__file__).resolve().parents[2] / "fixtures" / "plugins"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_second_run_in_the_process_sees_its_own_state_not_what_the_first_left(
    tmp_path: Path,
) -> None:
    """Two fixture_good runs in one resident process; the first leaves an environment
    variable, another directory, a longer argv, a SIGUSR1 handler and a root log handler
    behind (FIXTURE_PROBE_FILE), sets the garbage collector's threshold and leaves an
    unreachable reference cycle. The second sees its own directory and argv, and none of
    what the first left: the same state the first found. Each ran at the resident
    process's threshold (RUN_GC_THRESHOLD), and the cycle was collected between them."""
    probes = tmp_path / "probes.jsonl"
    env = child_env(dict(os.environ))
    env["PYTHONPATH"] = os.pathsep.join([str(FIXTURE_PLUGINS), env.get("PYTHONPATH", "")])
    env |= {
        "GENESIS_FP16_STATE_DIR": str(tmp_path / "state"),
        "GENESIS_FP16_PLUGIN_ALLOWLIST": "fixture_good",
        "GENESIS_FP16_SAMPLE_COUNT": "16",
        "FIXTURE_STEP_SECONDS": "0",
        "FIXTURE_PROBE_FILE": str(probes),
    }
    worker = RunWorker()
    try:
        pids = []
        for n, steps in ((1, "1"), (2, "2")):
            cwd = tmp_path / f"run{n}"
            cwd.mkdir()
            args = ["train", "fixture_good", "--steps", steps]
            child = worker.start(args, env, cwd=str(cwd), resident=CPU)
            assert child.stdout is not None and child.stderr is not None
            assert child.stdin is not None
            out = threading.Thread(target=child.stdout.read)  # neither pipe may fill
            out.start()
            err = child.stderr.read()
            out.join()
            assert child.wait(timeout=300) == 0, err[-2000:]
            assert child.resident_run == n
            for pipe in (child.stdin, child.stdout, child.stderr):
                pipe.close()
            pids.append(child.pid)
    finally:
        worker.close()
    first, second = (json.loads(line) for line in probes.read_text().splitlines())
    assert pids[0] == pids[1] == first["pid"] == second["pid"]
    assert first["cwd"] == str(tmp_path / "run1") and second["cwd"] == str(tmp_path / "run2")
    assert first["argv"][-1] == "1" and second["argv"] == ["train", "fixture_good", "--steps", "2"]
    assert first["left_env"] is None and second["left_env"] is None
    assert second["sigusr1"] == first["sigusr1"] != "left_behind"
    assert second["root_handlers"] == first["root_handlers"]
    assert first["gc_threshold"][0] == second["gc_threshold"][0] == resident.RUN_GC_THRESHOLD
    assert second["gc_threshold"] == first["gc_threshold"]  # not the (123, 4, 5) left
    assert not first["left_cycle_alive"] and not second["left_cycle_alive"]


def test_stop_watching_ends_the_daemon_watch_without_acting() -> None:
    """A run's daemon watch ended by stop_watching returns quietly: the process (a
    resident one, serving on) is neither signalled nor ended when its pipe closes."""
    read, write = os.pipe()
    thread = handoff.watch_daemon(read, grace=0.1)
    handoff.stop_watching()
    assert not thread.is_alive() and thread not in threading.enumerate()
    os.close(write)  # EOF now would have SIGTERMed this process
    os.close(read)


def test_a_cuda_error_left_by_a_run_ends_the_resident_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CPU stand-in for a poisoned CUDA context (unverified on a GPU here): when
    ``torch.cuda.synchronize()`` raises after a run, the process says it must end and why;
    a healthy context, a failed run and a stopped run say their own reasons."""
    import types

    state = resident.Resident("cuda:0", 10**9, resident._Baseline.take())
    cuda = types.SimpleNamespace(is_initialized=lambda: True, synchronize=lambda: None)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert resident._why_end(state, 0, False) is None
    assert resident._why_end(state, 1, False) == "its run exited with code 1"
    assert resident._why_end(state, 0, True) == "its run was stopped by SIGTERM"

    def poisoned() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    cuda.synchronize = poisoned
    why = resident._why_end(state, 0, False)
    assert why == "a CUDA error: RuntimeError: CUDA error: an illegal memory access was encountered"
