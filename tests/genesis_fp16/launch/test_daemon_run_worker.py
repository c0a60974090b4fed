"""Runs served by the run worker (genesis_fp16/commands/zygote.py) keep process isolation: a
killed run costs only itself, a killed or stopped worker is replaced (real daemon
subprocesses). A device's runs are served by one resident run process (the one isolation
model: no setting forks a child per run or execs it any more), reused after a clean run
and fresh after a failed, stopped or killed one."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess, child_pids, child_wait, daemon_env, start_daemon

from genesis_fp16_infrastructure.data.synthetic import generate_pool

RUNS = "genesis_fp16_training_runs_total"
FORKED = re.compile(r"the run worker forked the run's process (\d+)")
READY = re.compile(r"run worker ready \(pid (\d+)\)")
SERVED = re.compile(r"the run worker's resident run process (\d+) serves the run")


def _daemon(tmp_path: Path, **env: str) -> DaemonProcess:
    return start_daemon(
        tmp_path,
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": "fixture_good",
            "GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS": "1",
            "GENESIS_FP16_SCHEDULE": "1",
            "GENESIS_FP16_STEPS_PER_RUN": "2",
            "GENESIS_FP16_SAMPLE_COUNT": "16",
            "FIXTURE_STEP_SECONDS": "0.01",
            **env,
        },
    )


def _pids(daemon: DaemonProcess, pattern: re.Pattern[str]) -> list[int]:
    """The pids the daemon's log names in records matching ``pattern``, in order."""
    found = (pattern.match(str(r.get("event", ""))) for r in daemon.logs())
    return [int(m.group(1)) for m in found if m is not None]


def _run_pids(daemon: DaemonProcess) -> list[int]:
    """The pids of the processes the runs trained in, in order: a forked child's or the
    resident run process's (one pid for the runs it served)."""
    found = (
        FORKED.match(event) or SERVED.match(event)
        for event in (str(r.get("event", "")) for r in daemon.logs())
    )
    return [int(m.group(1)) for m in found if m is not None]


def _new(daemon: DaemonProcess, seen: set[int]) -> set[int]:
    return set(_run_pids(daemon)) - seen


def _runs(daemon: DaemonProcess, outcome: str) -> float:
    return daemon.sample(RUNS, agent="fixture_good", outcome=outcome) or 0


@pytest.mark.slow
@pytest.mark.timeout(child_wait(300))
def test_a_killed_run_costs_only_itself_and_the_next_run_is_forked_again(
    tmp_path: Path,
) -> None:
    """SIGKILL of a run's process (the resident one, by default) mid-run: that run fails
    ('exit'), the daemon serves, and the next runs are served by the same worker, in a
    fresh process, and succeed."""
    daemon = _daemon(tmp_path, GENESIS_FP16_STEPS_PER_RUN="40", FIXTURE_STEP_SECONDS="0.25")
    try:
        killed: int | None = None
        seen: set[int] = set()
        while killed is None:  # a run that ends before the kill lands: the next one
            fresh = daemon.wait_for(functools.partial(_new, daemon, set(seen)), "a forked run")
            seen |= fresh
            for pid in fresh:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
        daemon.wait_for(
            lambda: daemon.sample(
                "genesis_fp16_run_failures_total", agent="fixture_good", reason="exit"
            ),
            "the killed run counted",
            timeout=60,
        )
        successes = _runs(daemon, "success")
        daemon.wait_for(lambda: _runs(daemon, "success") > successes, "a later run", 120)
        assert len(_pids(daemon, READY)) == 1  # the same worker served them all
        assert _run_pids(daemon)[-1] != killed
        assert daemon.get("/metrics")[0] == 200
    finally:
        daemon.stop()


@pytest.mark.slow
@pytest.mark.timeout(child_wait(300))
def test_a_killed_worker_is_replaced_and_the_next_run_runs(tmp_path: Path) -> None:
    """SIGKILL of the worker between runs: the daemon logs that it ended, starts another,
    and the next run is forked by the new one and succeeds."""
    daemon = _daemon(tmp_path, GENESIS_FP16_SCHEDULE="2")
    try:
        daemon.wait_for(lambda: _runs(daemon, "success") >= 1, "a first run", timeout=120)
        (worker,) = _pids(daemon, READY)
        os.kill(worker, signal.SIGKILL)
        ended = f"the run worker (pid {worker}) ended with code -9: starting another"
        daemon.wait_for(lambda: daemon.events(ended), "the dead worker noticed", timeout=60)
        successes = _runs(daemon, "success")
        daemon.wait_for(lambda: _runs(daemon, "success") > successes, "a later run", 120)
        workers = _pids(daemon, READY)
        assert len(workers) == 2 and workers[1] != worker
        assert daemon.get("/metrics")[0] == 200
    finally:
        daemon.stop()


def _forked_run_under_way(daemon: DaemonProcess) -> int:
    """Wait for a run's first progress line; the pid of the worker that served it."""
    before = len(_run_pids(daemon))
    daemon.wait_for(lambda: len(_run_pids(daemon)) > before, "a run served", timeout=120)
    daemon.wait_for(
        lambda: [r for r in daemon.logs()[-50:] if r.get("progress")],
        "its first step",
        timeout=120,
    )
    return _pids(daemon, READY)[-1]


def _slow_daemon(tmp_path: Path) -> DaemonProcess:
    """A daemon whose runs take seconds (20 steps of 0.25 s), for a signal mid-run."""
    return _daemon(
        tmp_path,
        GENESIS_FP16_STEPS_PER_RUN="20",
        FIXTURE_STEP_SECONDS="0.25",
        GENESIS_FP16_LOG_INTERVAL="1",
        GENESIS_FP16_RUN_TIMEOUT_SECONDS="60",
    )


def _recorded_then_next(daemon: DaemonProcess, successes: int) -> None:
    """Wait for the run under way (``successes`` before it) to be recorded, then for the
    next run."""
    daemon.wait_for(lambda: _runs(daemon, "success") > successes, "the run recorded", timeout=60)
    recorded = _runs(daemon, "success")
    daemon.wait_for(lambda: _runs(daemon, "success") > recorded, "the next run", 120)


@pytest.mark.slow
@pytest.mark.timeout(child_wait(300))
def test_a_run_whose_worker_is_stopped_is_recorded_and_the_next_run_gets_a_new_worker(
    tmp_path: Path,
) -> None:
    """SIGSTOP of the worker while its run trains: the child ends, and the run is recorded
    within its timeout (the daemon reads the child's end from its pidfd and its exit code
    from the kernel, not from the stopped worker); the next run replaces the stopped worker
    (saying so) and succeeds, and SIGTERM then stops the daemon cleanly and at once.
    Before, the run never ended and SIGTERM took 35 s and exited 1."""
    daemon = _slow_daemon(tmp_path)
    try:
        successes = _runs(daemon, "success")
        worker = _forked_run_under_way(daemon)
        os.kill(worker, signal.SIGSTOP)
        _recorded_then_next(daemon, successes)
        stopped = f"replacing the run worker (pid {worker}) before this run: it is stopped"
        assert any(stopped in str(r.get("event")) for r in daemon.logs())
        assert _pids(daemon, READY)[-1] != worker
        assert not daemon.events("starting the run's process by exec, not from the run worker")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait_exit(timeout=30) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGCONT)
        daemon.stop()


@pytest.mark.slow
@pytest.mark.timeout(child_wait(300))
def test_a_worker_killed_mid_run_leaves_its_run_recorded_and_the_next_run_succeeds(
    tmp_path: Path,
) -> None:
    """SIGKILL of the worker while its run trains: the run's child, a process of its own,
    trains on and the run is recorded within its timeout (with its result; its exit code,
    reaped by init, is logged as unknown); the next run is forked by a new worker and
    succeeds."""
    daemon = _slow_daemon(tmp_path)
    try:
        successes = _runs(daemon, "success")
        worker = _forked_run_under_way(daemon)
        os.kill(worker, signal.SIGKILL)
        _recorded_then_next(daemon, successes)
        assert _pids(daemon, READY)[-1] != worker
        assert daemon.events(f"the run worker (pid {worker}) ended with code -9: starting another")
    finally:
        daemon.stop()


@pytest.mark.slow
@pytest.mark.timeout(child_wait(300))
def test_a_reload_that_changes_a_setting_replaces_the_worker_before_the_next_run(
    tmp_path: Path,
) -> None:
    """An edited ``.env`` (a setting changed) and SIGHUP after a run: the next run is
    forked by a new worker, started after the reload, and the log says why."""
    daemon = _daemon(tmp_path, GENESIS_FP16_SCHEDULE="2")
    try:
        daemon.wait_for(lambda: _runs(daemon, "success") >= 1, "a first run", timeout=120)
        (worker,) = _pids(daemon, READY)
        (daemon.workdir / ".env").write_text("GENESIS_FP16_SEED=7\n")
        daemon.signal(signal.SIGHUP)
        daemon.wait_for(lambda: daemon.events("config reloaded"), "the reload", timeout=60)
        why = f"replacing the run worker (pid {worker}) before this run: the daemon reloaded"
        # A run forked before the reload may still end first (SCHEDULE=2): wait for the
        # replacement itself, then for a run after it.
        replaced = lambda: any(why in str(r.get("event")) for r in daemon.logs())  # noqa: E731
        daemon.wait_for(replaced, "the worker replaced", 120)
        successes = _runs(daemon, "success")
        daemon.wait_for(lambda: _runs(daemon, "success") > successes, "a later run", 120)
        assert _pids(daemon, READY)[-1] != worker
    finally:
        daemon.stop()


@pytest.mark.slow
@pytest.mark.timeout(child_wait(300))
def test_a_reload_that_changes_nothing_keeps_the_worker(tmp_path: Path) -> None:
    """SIGHUP with the settings as they were (logrotate's, a config tool writing the same
    file): the runs after it are forked by the same worker, warm, and no replacement is
    logged."""
    daemon = _daemon(tmp_path, GENESIS_FP16_SCHEDULE="2")
    try:
        daemon.wait_for(lambda: _runs(daemon, "success") >= 1, "a first run", timeout=120)
        (worker,) = _pids(daemon, READY)
        daemon.signal(signal.SIGHUP)
        daemon.wait_for(lambda: daemon.events("config reloaded"), "the reload", timeout=60)
        successes = _runs(daemon, "success")
        daemon.wait_for(lambda: _runs(daemon, "success") > successes + 1, "later runs", 120)
        assert _pids(daemon, READY) == [worker]
        assert not [r for r in daemon.logs() if "replacing the run worker" in str(r.get("event"))]
    finally:
        daemon.stop()


def _resident_said(daemon: DaemonProcess, text: str) -> list[dict[str, object]]:
    """The records a resident run process wrote on a run's stderr containing ``text``."""
    return [
        r
        for r in daemon.logs()
        if r.get("child_logger") == "genesis_fp16.resident" and text in str(r.get("event"))
    ]


@pytest.mark.slow
@pytest.mark.timeout(child_wait(300))
def test_runs_of_an_agent_are_served_by_one_resident_process_which_says_it_reused_it(
    tmp_path: Path,
) -> None:
    """Two scheduled runs succeed in the same process (the same pid in the launcher's
    record), a child of the one worker, which is the daemon's child and has not initialised
    CUDA; the second run's log says it reused that process; no run was started by exec or
    had a child of its own."""
    daemon = _daemon(tmp_path)
    try:
        daemon.wait_for(lambda: _runs(daemon, "success") >= 2, "two runs", timeout=120)
        served = _pids(daemon, SERVED)
        assert len(served) >= 2 and served[0] == served[1]
        workers = _pids(daemon, READY)
        assert len(workers) == 1 and workers[0] in child_pids(daemon.process.pid)
        assert served[0] not in child_pids(daemon.process.pid)  # the worker's child
        reused = _resident_said(daemon, f"resident run process {served[0]} (cpu) reused: run 2")
        assert reused and reused[0]["resident_pid"] == served[0]
        assert not _pids(daemon, FORKED)  # no run had a child of its own
        assert not daemon.events("starting the run's process by exec, not from the run worker")
        ready = next(r for r in daemon.logs() if READY.match(str(r.get("event", ""))))
        assert "CUDA not initialised" in ready["event"]
    finally:
        daemon.stop()


@pytest.mark.slow
@pytest.mark.timeout(child_wait(300))
def test_a_resident_process_killed_or_timed_out_fails_or_stops_its_run_and_the_next_is_fresh(
    tmp_path: Path,
) -> None:
    """A run past its timeout is stopped by SIGTERM, and its resident process says it ends;
    a resident process SIGKILLed mid-run fails its run ('exit'); each time the next run is
    served by a fresh process and succeeds."""
    daemon = _daemon(
        tmp_path,
        GENESIS_FP16_STEPS_PER_RUN="40",
        FIXTURE_STEP_SECONDS="0.25",
        GENESIS_FP16_LOG_INTERVAL="1",
        GENESIS_FP16_RUN_TIMEOUT_SECONDS="4",
    )
    try:
        stopped = "ends after this run: its run was stopped by SIGTERM"
        daemon.wait_for(lambda: _resident_said(daemon, stopped), "a run timed out", timeout=180)
        first = int(str(_resident_said(daemon, stopped)[0]["resident_pid"]))
        fresh = f"{first}, the one before, ended: its run was stopped by SIGTERM"
        daemon.wait_for(lambda: _resident_said(daemon, fresh), "a fresh process", timeout=120)
        served = _pids(daemon, SERVED)
        os.kill(served[-1], signal.SIGKILL)
        daemon.wait_for(
            lambda: daemon.sample(
                "genesis_fp16_run_failures_total", agent="fixture_good", reason="exit"
            ),
            "the killed run counted",
            timeout=60,
        )
        daemon.wait_for(lambda: _pids(daemon, SERVED)[-1] != served[-1], "a later run", 120)
        assert daemon.get("/metrics")[0] == 200
    finally:
        daemon.stop()


def _se_darwin_daemon(workdir: Path, data: Path, **env: str) -> DaemonProcess:
    """A daemon of se_darwin alone on ``data``, fp32, a few fixed steps, runs asked for."""
    workdir.mkdir()
    return start_daemon(
        workdir,
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin",
            "GENESIS_FP16_AGENTS__SE_DARWIN__DATA_PATH": str(data),
            "GENESIS_FP16_STEPS_PER_RUN": "20",
            "GENESIS_FP16_SCHEDULE": "3600",
            "GENESIS_FP16_RUN_AT_START": "false",
            # fp32: a measured auto's first choice follows the host's load, not the data
            "ENABLE_FP16_TRAINING": "false",
            **env,
        },
        fixtures=False,
    )


def _asked_run(daemon: DaemonProcess, count: int) -> dict[str, object]:
    """`genesis-fp16 run se_darwin`, then its (the ``count``-th) finished record."""
    asked = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "run", "se_darwin"],
        cwd=daemon.workdir,
        env=daemon_env({"GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin"}, fixtures=False),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert asked.returncode == 0, asked.stderr
    finished = functools.partial(daemon.events, "training run finished")
    daemon.wait_for(lambda: len(finished()) >= count, f"run {count}", timeout=240)
    return finished()[count - 1]


def _pool_files(data: Path, seeds: tuple[int, ...]) -> None:
    """se_darwin pool files, one a seed, written a minute ago (as a pool that arrived)."""
    data.mkdir(exist_ok=True)
    for seed in seeds:
        path = data / f"pool-{seed}.json"
        path.write_text(json.dumps(generate_pool(300, seed=seed)))
        past = time.time_ns() - 60 * 10**9
        os.utime(path, ns=(past, past))


# What differs between two runs of the same training: its clock and its folders' names.
_NOT_TRAINED = ("seconds", "served_id", "candidate_id", "judged_on")


def _trained(record: dict[str, object]) -> tuple[object, ...]:
    """What a run trained to: its outcome, steps, data, eval and verdict (no timings, no
    names of its folders)."""
    gate = dict(record.get("gate") or {})  # type: ignore[call-overload]
    verdict = {k: v for k, v in gate.items() if k not in _NOT_TRAINED}
    return (*(record.get(k) for k in ("outcome", "steps", "data", "eval", "precision")), verdict)


@pytest.mark.slow
@pytest.mark.timeout(child_wait(900))
def test_a_later_se_darwin_run_reuses_what_its_resident_process_read_and_trains_the_same(
    tmp_path: Path,
) -> None:
    """Two `run se_darwin` in one resident process, a pool file added between them: the
    second run's log says what it reused from memory (the first file's joined pool, only
    the new file's records joined onto it) and it trains to what the same second run
    trains to where nothing is kept (GENESIS_FP16_RUN_RESIDENT_KEEP_MIB=0; before issue 91
    item 4 the comparison was a child forked per run, a mode since removed), where nothing
    is reused and nothing is said."""
    results = {}
    for name, env in (("kept", {}), ("unkept", {"GENESIS_FP16_RUN_RESIDENT_KEEP_MIB": "0"})):
        data = tmp_path / f"data-{name}"
        _pool_files(data, (1,))
        daemon = _se_darwin_daemon(tmp_path / name, data, **env)
        try:
            _asked_run(daemon, 1)
            _pool_files(data, (2,))
            results[name] = _trained(_asked_run(daemon, 2))
            said = [str(r.get("event")) for r in daemon.logs()]
        finally:
            daemon.stop()
        reused = [line for line in said if line.startswith("reused from memory: ")]
        if name == "kept":
            # The second run's first read grows the first file's joined pool by the new
            # one's records (it sorts after); later reads of a run take the pool whole.
            pool = "reused from memory: the joined pool of 300 records of 1 file(s) unchanged"
            assert pool + ", grown by 1 file(s) (300 records joined) to 600 records" in reused
        else:
            assert not reused
    assert results["kept"] == results["unkept"]
