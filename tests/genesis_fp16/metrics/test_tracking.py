"""Per-run curves: a real daemon job writes TensorBoard event files that TensorBoard reads
back, one run per job; a failing disk is logged and counted, never a failed run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from daemon_harness import clear_daemon_env, force_jobs
from prometheus_client import CollectorRegistry
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from genesis_fp16.config.plugins import load_plugin
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics

ROOT = Path(__file__).resolve().parents[3]


def read_run(path: Path) -> EventAccumulator:
    """TensorBoard's own reader over one run's folder."""
    events = EventAccumulator(str(path))
    events.Reload()
    return events


def _steps(events: EventAccumulator, tag: str) -> list[int]:
    return [event.step for event in events.Scalars(tag)]


@pytest.mark.slow
def test_daemon_jobs_write_one_readable_run_each_from_their_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two se_darwin jobs (fp16, each in a child process) give two runs under
    runs/se_darwin/<run_id>: loss, loss scale, skipped steps and precision at every log
    interval, eval metrics and execution at the last step; the second, forced (on the same
    data a job of the daemon's own is up to date and takes no step), continues the steps."""
    clear_daemon_env(monkeypatch)
    settings = Settings(
        state_dir=tmp_path / "state",
        tracking_dir=tmp_path / "runs",
        steps_per_run=10,
        log_interval=5,
        sample_count=200,
        agents={"se_darwin": {"precision": "fp16"}},  # type: ignore[dict-item]
    )
    ctx = JobContext(
        settings, DaemonMetrics(CollectorRegistry(), "test"), DeviceSlots(1), threading.Event()
    )
    loaded = load_plugin("se_darwin")
    first_runs: list[Path] = []
    for _ in range(2):
        run_agent_job(ctx, "se_darwin", *loaded)
        first_runs = first_runs or list((tmp_path / "runs" / "se_darwin").iterdir())
        force_jobs(monkeypatch)
    runs = list((tmp_path / "runs" / "se_darwin").iterdir())
    assert len(runs) == 2 and all(re.fullmatch(r"[0-9a-f]{12}", run.name) for run in runs)
    (second,) = set(runs) - set(first_runs)
    for run, steps in ((first_runs[0], [5, 10]), (second, [15, 20])):
        events = read_run(run)
        for tag in ("train/loss", "train/loss_scale", "train/skipped_steps", "precision/fp16"):
            assert _steps(events, tag) == steps, (run, tag)
        assert [e.value for e in events.Scalars("precision/fp16")] == [1.0, 1.0]
        assert [e.value for e in events.Scalars("precision/bf16")] == [0.0, 0.0]
        assert all(e.value >= 1 for e in events.Scalars("train/loss_scale"))
        assert _steps(events, "eval/loss") == [steps[-1]]
        assert [e.value for e in events.Scalars("execution/eager")] == [1.0]
        assert events.Tags()["tensors"] == ["run/text_summary"]  # the request, the outcome
    failures = ctx.metrics.registry.get_sample_value(
        "genesis_fp16_tracking_write_failures_total", {"agent": "se_darwin"}
    )
    assert failures == 0.0  # the series is there, and nothing was lost


def test_a_full_disk_is_logged_counted_and_never_raised(tmp_path: Path) -> None:
    """Under a file-size limit (EFBIG, as a full disk's ENOSPC) the tracker's writes fail:
    no exception reaches the caller, one warning names the path, the failures are counted."""
    script = f"""
import resource, signal, sys
from pathlib import Path
from genesis_fp16.service.logsetup import configure_logging
from genesis_fp16.metrics.tracking import RunTracker
from genesis_fp16_infrastructure.training import TrainingSummary

configure_logging("json", "INFO")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
tracker = RunTracker(Path({str(tmp_path)!r}), "agent", "run")
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
for step in range(1, 200):
    tracker.log_summary(TrainingSummary(
        "fp16", step, step, 0, 0.0, 0.0, 65536.0, 1.0, 1.0 / step, 0, 64, 10.0, 1.0, False
    ))
print("failures", tracker.close())
"""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    failures = int(proc.stdout.split()[-1])
    assert failures >= 1
    warnings = [line for line in proc.stderr.splitlines() if "run tracking failed" in line]
    assert len(warnings) == 1, proc.stderr
    assert "File too large" in warnings[0] and str(tmp_path / "agent" / "run") in warnings[0]


@pytest.mark.slow
def test_train_tracking_dir_writes_a_readable_run_and_a_pipe_gets_no_bar(tmp_path: Path) -> None:
    """`train --tracking-dir` writes one run TensorBoard reads back (every 10 steps, the
    eval at the last, the range statistics at their last sample) and names it in --json,
    and the plot script draws it; stderr on a pipe carries no bar or carriage return,
    only log records."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(PYTHONPATH=str(ROOT), GENESIS_FP16_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "train", "se_darwin", "--steps", "20",
         "--precision", "bf16", "--tracking-dir", str(tmp_path / "runs"), "--json"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (run,) = (tmp_path / "runs" / "se_darwin").iterdir()
    assert out["tracking"] == {"path": str(run), "failed_writes": 0}
    events = read_run(run)
    assert _steps(events, "train/loss") == [10, 20]
    assert [e.value for e in events.Scalars("precision/bf16")] == [1.0, 1.0]
    assert _steps(events, "eval/auc") == [20]
    ranges = out["ranges"]  # on by default: sampled from the run's step 3
    assert ranges["samples"] >= 1 and 3 <= ranges["last_step"] <= 20
    assert _steps(events, "range/(all)/headroom_overflow") == [ranges["last_step"]]
    assert _steps(events, "range/samples") == [ranges["last_step"]]
    assert "\r" not in proc.stderr and "%|" not in proc.stderr
    assert all(line.startswith("{") for line in proc.stderr.splitlines()), proc.stderr
    picture = tmp_path / "curves.png"  # the script behind docs/run-curves.png reads it too
    plot = [sys.executable, str(ROOT / "benchmarks" / "plot_run_curves.py"), str(run)]
    drawn = subprocess.run([*plot, "--out", str(picture)], capture_output=True, text=True)
    assert drawn.returncode == 0, drawn.stderr
    assert picture.read_bytes().startswith(b"\x89PNG")


def test_tracking_dir_is_refused_with_a_request_file(tmp_path: Path) -> None:
    """A daemon's run (--request) is tracked by the daemon: --tracking-dir there is a
    one-line usage error, exit 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    proc = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "train", "se_darwin", "--request",
         str(tmp_path / "run.json"), "--tracking-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, env={**env, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "genesis-fp16: error: --request carries the whole run; drop --tracking-dir"
    ]


def test_tracking_dir_without_tensorboard_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`train --tracking-dir` where tensorboard cannot be imported: exit 2 before any
    training, one line naming the flag and the extra to install."""
    from genesis_fp16.cli import main

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # what `import tensorboard` fails on
    monkeypatch.setenv("GENESIS_FP16_STATE_DIR", str(tmp_path))
    assert main(["train", "se_darwin", "--tracking-dir", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "genesis-fp16: error: --tracking-dir: tensorboard is not installed: "
        "pip install 'genesis-fp16[tensorboard]'"
    ]
    assert not (tmp_path / "runs").exists()
