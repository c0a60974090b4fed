"""The real `genesis-fp16 serve` subprocess: training, metrics, reload, shutdown, systemd."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, daemon_env, launch, start_daemon

GOOD = "fixture_good"
ALL_FIXTURES = "fixture_good,fixture_broken,fixture_wrong_api,fixture_raising"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """A daemon with the good plugin beside broken ones, after the good one's first run."""
    daemon = start_daemon(
        tmp_path_factory.mktemp("trained"),
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": ALL_FIXTURES,
            "GENESIS_FP16_STEPS_PER_RUN": "4",
            "GENESIS_FP16_LOG_INTERVAL": "2",
            "GENESIS_FP16_SAMPLE_COUNT": "64",
            "GENESIS_FP16_SCHEDULE": "3600",
            "FIXTURE_STEP_SECONDS": "0.01",
        },
    )
    runs = ("genesis_fp16_training_runs_total",)
    daemon.wait_for(lambda: daemon.sample(*runs, agent=GOOD, outcome="success"), "a good run")
    daemon.wait_for(
        lambda: daemon.sample(*runs, agent="fixture_raising", outcome="failed"), "a failed run"
    )
    yield daemon
    daemon.stop()


def test_ready_and_series_move_after_a_short_job(trained: DaemonProcess) -> None:
    """/readyz answers, /livez is the daemon's heartbeat and the series carry the run's counts."""
    status, body = trained.get("/readyz")
    assert status == 200 and GOOD in body
    assert trained.get("/healthz")[0] == 200
    assert trained.get("/livez") == (200, "alive: scheduler heartbeat is fresh\n")
    s = trained.sample
    assert s("genesis_fp16_optimizer_steps_total", agent=GOOD) == 4
    assert s("genesis_fp16_samples_total", agent=GOOD) == 64
    assert s("genesis_fp16_skipped_steps_total", agent=GOOD) == 0
    assert s("genesis_fp16_training_run_duration_seconds_count", agent=GOOD) == 1
    assert (s("genesis_fp16_last_success_timestamp_seconds", agent=GOOD) or 0) > 1e9
    assert (s("genesis_fp16_scheduler_heartbeat_timestamp_seconds") or 0) > 1e9
    assert s("genesis_fp16_train_loss", agent=GOOD) is not None
    assert s("genesis_fp16_eval_loss", agent=GOOD) is not None
    active = [
        p
        for p in ("fp32", "bf16", "fp16")
        if s("genesis_fp16_precision", agent=GOOD, precision=p) == 1
    ]
    finished = trained.events("training run finished")[0]
    assert active == [finished["precision_used"]]
    assert list((trained.state_dir / "agents" / GOOD / "checkpoints").glob("*.pt"))


def test_process_series_show_memory_and_open_files(trained: DaemonProcess) -> None:
    """/metrics carries the process's memory, open files and CPU (a leak or fd flood shows)."""
    s = trained.sample
    assert (s("process_resident_memory_bytes") or 0) > 10 * 2**20
    assert (s("process_open_fds") or 0) > 0
    assert (s("process_max_fds") or 0) >= 1024
    assert s("process_cpu_seconds_total") is not None


def test_broken_plugins_are_counted_and_the_good_one_trains(trained: DaemonProcess) -> None:
    """Import failure and wrong API are counted per plugin; a raising job is a failed run."""
    s = trained.sample
    assert s("genesis_fp16_plugin_load_failures_total", plugin="fixture_broken") == 1
    assert s("genesis_fp16_plugin_load_failures_total", plugin="fixture_wrong_api") == 1
    assert s("genesis_fp16_training_runs_total", agent="fixture_raising", outcome="failed") == 1
    assert s("genesis_fp16_training_runs_total", agent=GOOD, outcome="success") == 1
    assert any("not_installed_anywhere" in str(r.get("error")) for r in trained.logs())


def test_job_records_carry_agent_and_run_id(trained: DaemonProcess) -> None:
    """structlog and stdlib records of a job (infrastructure.*, relayed from the run's
    process) carry agent and run_id."""
    job_records = [r for r in trained.logs() if r.get("progress")]
    assert job_records and all(r.get("agent") == GOOD and r.get("run_id") for r in job_records)
    # A run in its own process (the default isolation): its records are relayed, their
    # logger kept as child_logger.
    stdlib = [
        r
        for r in trained.logs()
        if str(r.get("child_logger", r.get("logger", ""))).startswith(
            "genesis_fp16_infrastructure."
        )
    ]
    assert stdlib and all(r.get("agent") and r.get("run_id") for r in stdlib)
    assert any(str(r.get("logger", "")).startswith("apscheduler") for r in trained.logs())


def _progress(daemon: DaemonProcess) -> list[dict[str, object]]:
    return [r for r in daemon.logs() if r.get("progress")]


def test_progress_reads_step_of_total_percent_and_eta_and_the_log_has_no_noise(
    trained: DaemonProcess,
) -> None:
    """A run's progress lines read "step 2/4, 50%, ETA 0 s"; APScheduler's "Adding job
    tentatively" is not logged at the default level."""
    lines = [str(r["event"]) for r in _progress(trained) if r.get("agent") == GOOD]
    assert lines[:2] and re.fullmatch(r"step 2/4, 50%, ETA \d+ s", lines[0]), lines
    assert lines[1].startswith("step 4/4, 100%, ETA 0 s"), lines
    assert not [r for r in trained.logs() if "tentatively" in str(r.get("event"))]


def test_metrics_pass_promtool(trained: DaemonProcess, promtool: str) -> None:
    """The real /metrics exposition passes `promtool check metrics` with no warnings."""
    text = trained.metrics_text()
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0 and not checked.stdout.strip() and not checked.stderr.strip(), (
        checked.stdout + checked.stderr
    )


def _write_env(path: Path, text: str) -> None:
    path.write_text(text)


@pytest.mark.slow
def test_sighup_rollback_makes_the_next_run_fp32(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """SIGHUP with ENABLE_FP16_TRAINING=false: the fp16 run stops at a step, the next is fp32."""
    env_file = tmp_path / ".env"
    _write_env(env_file, "ENABLE_FP16_TRAINING=true\n")
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": GOOD,
            "GENESIS_FP16_STEPS_PER_RUN": "60",
            "GENESIS_FP16_LOG_INTERVAL": "1",
            "GENESIS_FP16_SAMPLE_COUNT": "64",
            "GENESIS_FP16_WATCH_ENV_FILE": "false",
            "FIXTURE_STEP_SECONDS": "0.05",
        }
    )
    precision = "genesis_fp16_precision"
    daemon.wait_for(lambda: daemon.sample(precision, agent=GOOD, precision="fp16") == 1, "fp16 run")
    daemon.wait_for(lambda: _progress(daemon), "a step in fp16")
    _write_env(env_file, "ENABLE_FP16_TRAINING=false\n")
    daemon.signal(signal.SIGHUP)
    daemon.wait_for(lambda: daemon.sample(precision, agent=GOOD, precision="fp32") == 1, "fp32")
    assert daemon.sample(precision, agent=GOOD, precision="fp16") == 0
    assert daemon.sample("genesis_fp16_config_reloads_total", outcome="success") == 1
    stopped = daemon.wait_for(
        lambda: [r for r in daemon.events("training run finished") if r["outcome"] == "stopped"],
        "the fp16 run to stop at a step boundary",
    )
    assert stopped[0]["precision_used"] == "fp16"
    # The rerun's start is logged after the stop's record: waited for, not raced (under load).
    runs = "training run started"
    daemon.wait_for(lambda: len(daemon.events(runs)) >= 2, "the fp32 run to start")
    started = daemon.events(runs)
    assert [r["precision"] for r in started] == ["fp16", "fp32"]
    assert started[1]["reason"].startswith("ENABLE_FP16_TRAINING=false")

    # An invalid new configuration keeps the running one and is counted.
    _write_env(env_file, "ENABLE_FP16_TRAINING=false\nGENESIS_FP16_DEVICE_CONCURRENCY=0\n")
    daemon.signal(signal.SIGHUP)
    reloads = "genesis_fp16_config_reloads_total"
    daemon.wait_for(lambda: daemon.sample(reloads, outcome="failure") == 1, "failed reload")
    assert daemon.sample("genesis_fp16_config_last_reload_successful") == 0
    assert daemon.get("/readyz")[0] == 200
    failed = daemon.events("config reload failed, keeping the running configuration")
    assert "GENESIS_FP16_DEVICE_CONCURRENCY" in failed[0]["error"]


def _notify_socket(tmp_path: Path) -> tuple[socket.socket, str]:
    # AF_UNIX paths are limited to ~108 bytes; pytest's tmp_path can be longer.
    path = f"/tmp/gfp16-notify-{os.getpid()}-{tmp_path.name[-20:]}.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(30)
    return sock, path


def _receive_until(sock: socket.socket, wanted: str) -> list[str]:
    messages: list[str] = []
    while wanted not in messages:
        messages.append(sock.recv(4096).decode())
    return messages


@pytest.mark.slow
def test_sigterm_checkpoints_and_exits_zero_with_sd_notify(tmp_path: Path) -> None:
    """Under systemd: READY=1, WATCHDOG=1, then on SIGTERM STOPPING=1, a checkpoint, exit 0."""
    sock, path = _notify_socket(tmp_path)
    try:
        daemon = launch(
            tmp_path,
            {
                "GENESIS_FP16_PLUGIN_ALLOWLIST": GOOD,
                "GENESIS_FP16_STEPS_PER_RUN": "1000",
                "GENESIS_FP16_LOG_INTERVAL": "1",
                "GENESIS_FP16_SAMPLE_COUNT": "64",
                "FIXTURE_STEP_SECONDS": "0.05",
                "NOTIFY_SOCKET": path,
                "WATCHDOG_USEC": "1000000",
            },
        )
        try:
            assert _receive_until(sock, "READY=1")[0] == "READY=1"
            assert "WATCHDOG=1" in _receive_until(sock, "WATCHDOG=1")
            daemon.wait_for(lambda: _progress(daemon), "a training step")
            daemon.signal(signal.SIGTERM)
            assert "STOPPING=1" in _receive_until(sock, "STOPPING=1")
            assert daemon.wait_exit(timeout=25) == 0, daemon.tail()
        finally:
            daemon.stop()
    finally:
        sock.close()
        os.unlink(path)
    finished = daemon.events("training run finished")
    assert finished and finished[-1]["outcome"] == "stopped" and finished[-1]["steps"] < 1000
    checkpoint = Path(tmp_path / finished[-1]["checkpoint"])
    assert (
        checkpoint.is_file()
        and checkpoint.parent == tmp_path / "state/agents" / GOOD / "checkpoints"
    )
    assert daemon.events("stopped cleanly")


def test_invalid_setting_stops_start_up_with_a_clear_error(tmp_path: Path) -> None:
    """An invalid value: exit 2 and one line naming the variable and the problem."""
    env = daemon_env({"GENESIS_FP16_METRICS_PORT": "70000", "GENESIS_FP16_LOG_FORMAT": "xml"})
    result = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "serve"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "GENESIS_FP16_METRICS_PORT" in result.stderr and "65535" in result.stderr
    assert "GENESIS_FP16_LOG_FORMAT" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("setting", "value", "named", "code"),
    [
        # Checked with the settings, as every command reads them: exit 2 (issue 38).
        ("GENESIS_FP16_STATE_DIR", "state_is_a_file", "GENESIS_FP16_STATE_DIR", 2),
        ("GENESIS_FP16_METRICS_ADDR", "256.1.1.1", "GENESIS_FP16_METRICS_ADDR", 1),
    ],
)
def test_a_setting_that_fails_when_used_is_one_line_naming_it(
    tmp_path: Path, setting: str, value: str, named: str, code: int
) -> None:
    """A state folder that is a file (exit 2), an address that does not exist (exit 1): one
    line naming the setting and its value (not a bare errno text)."""
    (tmp_path / "state_is_a_file").write_text("not a folder")
    env = daemon_env({setting: value})
    result = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "serve"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == code, result.stderr
    errors = [x for x in result.stderr.splitlines() if x.startswith("genesis-fp16: error:")]
    assert len(errors) == 1 and named in errors[0] and value in errors[0], result.stderr


def test_misspelt_rollback_switch_stops_start_up(tmp_path: Path) -> None:
    """ENABLE_FP16_TRAINIG=false in .env: serve exits 2 in one line with 'did you mean'."""
    (tmp_path / ".env").write_text("ENABLE_FP16_TRAINIG=false\n")
    result = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "serve"],
        cwd=tmp_path,
        env=daemon_env({}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "ENABLE_FP16_TRAINIG is not a setting; did you mean ENABLE_FP16_TRAINING?" in (
        result.stderr
    )
    assert not (tmp_path / "state").exists()


@pytest.mark.slow
def test_misspelt_rollback_switch_on_sighup_is_a_counted_failed_reload(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """SIGHUP after ENABLE_FP16_TRAINIG=false: failure counted, gauge 0, still fp16."""
    env_file = tmp_path / ".env"
    _write_env(env_file, "ENABLE_FP16_TRAINING=true\n")
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": GOOD,
            "GENESIS_FP16_STEPS_PER_RUN": "2",
            "GENESIS_FP16_SAMPLE_COUNT": "64",
            "GENESIS_FP16_WATCH_ENV_FILE": "false",
        }
    )
    precision = "genesis_fp16_precision"
    daemon.wait_for(lambda: daemon.sample(precision, agent=GOOD, precision="fp16") == 1, "fp16")
    _write_env(env_file, "ENABLE_FP16_TRAINIG=false\n")
    daemon.signal(signal.SIGHUP)
    reloads = "genesis_fp16_config_reloads_total"
    daemon.wait_for(lambda: daemon.sample(reloads, outcome="failure") == 1, "a failed reload")
    assert daemon.sample("genesis_fp16_config_last_reload_successful") == 0
    assert not daemon.sample(reloads, outcome="success")
    failed = daemon.events("config reload failed, keeping the running configuration")
    assert "did you mean ENABLE_FP16_TRAINING?" in failed[0]["error"]
    assert daemon.sample(precision, agent=GOOD, precision="fp16") == 1
    assert not daemon.sample(precision, agent=GOOD, precision="fp32")


@pytest.mark.slow
def test_reload_shadowed_by_the_environment_is_logged(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """ENABLE_FP16_TRAINING=true in the environment, false in .env: the reload says so.
    GENESIS_FP16_RUN_ISOLATION=thread in .env (removed by issue 91): the daemon starts and
    logs, once, that it is ignored."""
    _write_env(tmp_path / ".env", "GENESIS_FP16_SEED=0\nGENESIS_FP16_RUN_ISOLATION=thread\n")
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": GOOD,
            "GENESIS_FP16_RUN_AT_START": "false",
            "GENESIS_FP16_WATCH_ENV_FILE": "false",
            "ENABLE_FP16_TRAINING": "true",
        }
    )
    said = "the removed setting's warning"
    (ignored,) = daemon.wait_for(lambda: daemon.events("removed setting ignored"), said)
    assert ignored["detail"].startswith("GENESIS_FP16_RUN_ISOLATION (in "), ignored
    assert "is ignored: it was removed; a run with NPROC=1 is always served" in ignored["detail"]
    _write_env(tmp_path / ".env", "ENABLE_FP16_TRAINING=false\n")
    daemon.signal(signal.SIGHUP)
    shadowed = daemon.wait_for(
        lambda: daemon.events("env file value shadowed by the environment"), "the warning"
    )
    assert "ENABLE_FP16_TRAINING=false" in shadowed[0]["detail"]
    assert "ENABLE_FP16_TRAINING=true" in shadowed[0]["detail"]


def test_port_in_use_names_the_port_and_its_setting(tmp_path: Path) -> None:
    """Another process on the metrics port: exit 1, one line naming it and the setting."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = daemon_env(
            {"GENESIS_FP16_METRICS_PORT": str(port), "GENESIS_FP16_PLUGIN_ALLOWLIST": GOOD}
        )
        result = subprocess.run(
            [sys.executable, "-m", "genesis_fp16", "serve"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("genesis-fp16: error")]
    assert len(errors) == 1, result.stderr
    assert f"127.0.0.1:{port}: address already in use" in errors[0]
    assert "GENESIS_FP16_METRICS_PORT" in errors[0]
