"""A device this torch cannot run is refused up front; one lost while running is counted."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from daemon_harness import daemon_env, free_port
from in_process import train_in_process
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.config.settings import Settings, SettingsError
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.launch.devices import check_devices, device_lost, device_problem
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import API_VERSION, TrainRequest
from genesis_fp16_infrastructure.api import Capabilities

# More GPUs than any host has: refused on every host, with or without CUDA.
NO_SUCH_GPU = "cuda:99"
without_cuda = pytest.mark.skipif(
    torch.cuda.is_available(), reason="this torch sees a CUDA device: cuda is not refused here"
)


def _torch(cuda: str | None, gpus: int, version: str = "2.11.0+cu130") -> Any:
    """A stand-in for the torch module: its build's CUDA version and the GPUs it sees."""
    return SimpleNamespace(
        __version__=version,
        version=SimpleNamespace(cuda=cuda, hip=None),
        cuda=SimpleNamespace(is_available=lambda: gpus > 0, device_count=lambda: gpus),
    )


def test_device_problem_names_the_torch_build_and_what_it_found() -> None:
    """No CUDA build, no GPU, too few: one line naming the build; a GPU that exists: None."""
    cpu_build = _torch(None, 0, "2.13.0+cpu")
    assert device_problem("cuda", cpu_build) == (
        "this torch (2.13.0+cpu) was built without CUDA; use cpu or auto"
    )
    assert device_problem("cuda", _torch("13.0", 0)) == (
        "this torch (2.11.0+cu130) found no CUDA device; use cpu or auto"
    )
    assert device_problem("cuda:3", _torch("13.0", 1)) == (
        "cuda:3 asked, this torch (2.11.0+cu130) found 1 CUDA device (0 to 0)"
    )
    assert device_problem("cuda:1", _torch("13.0", 2)) is None
    assert device_problem("cuda", _torch("13.0", 1)) is None


def test_cpu_and_auto_never_need_torch() -> None:
    """cpu and auto always run: the check does not even look at torch (config check stays fast)."""
    assert device_problem("cpu", object()) is None
    assert device_problem("auto", object()) is None


def test_check_devices_names_each_unusable_setting_of_enabled_agents() -> None:
    """One line per setting, naming variable and value; a disabled agent's device is not asked."""
    settings = Settings(
        device="cuda",
        agents={  # type: ignore[arg-type]
            "se_darwin": {"device": "cuda:3"},
            "rlhf_ppo": {"device": "cuda:0"},
            "idle": {"device": "cuda:5", "enabled": False},
        },
    )
    check_devices(settings.model_copy(update={"agents": {}}), _torch("13.0", 1))
    with pytest.raises(SettingsError) as caught:
        check_devices(settings, _torch("13.0", 1))
    assert caught.value.errors == [
        "GENESIS_FP16_AGENTS__SE_DARWIN__DEVICE=cuda:3: cuda:3 asked, this torch (2.11.0+cu130) "
        "found 1 CUDA device (0 to 0)"
    ]
    with pytest.raises(SettingsError) as caught:
        check_devices(settings, _torch(None, 0, "2.13.0+cpu"))
    assert [line.split(":", 1)[0] for line in caught.value.errors] == [
        "GENESIS_FP16_DEVICE=cuda",
        "GENESIS_FP16_AGENTS__RLHF_PPO__DEVICE=cuda",
        "GENESIS_FP16_AGENTS__SE_DARWIN__DEVICE=cuda",
    ]


def test_device_lost_recognizes_a_missing_gpu_not_a_model_bug() -> None:
    """No GPU, a GPU off the bus (also as a cause): recognized; a device-side assert or OOM: not."""
    assert device_lost(RuntimeError("No CUDA GPUs are available")) == "No CUDA GPUs are available"
    try:
        try:
            raise RuntimeError("CUDA error: unknown error\nCUDA kernel errors might be ...")
        except RuntimeError as inner:
            raise ValueError("batch 3 failed") from inner
    except ValueError as outer:
        assert device_lost(outer) == "CUDA error: unknown error"
    assert device_lost(RuntimeError("CUDA error: device-side assert triggered")) is None
    assert device_lost(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate")) is None
    assert device_lost(ValueError("bad data")) is None


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=tmp_path,
        env=daemon_env(env),
        capture_output=True,
        text=True,
        timeout=120,
    )


@without_cuda
def test_config_check_serve_and_train_refuse_cuda_on_a_torch_without_it(tmp_path: Path) -> None:
    """The real commands on this CPU torch: exit 2, one line naming the setting and the build."""
    build = f"this torch ({torch.__version__}) was built without CUDA"
    agent = "GENESIS_FP16_AGENTS__SE_DARWIN__DEVICE"
    checked = _cli(tmp_path, "config", "check", **{agent: "cuda"})
    assert checked.returncode == 2
    assert checked.stderr.splitlines() == [
        f"genesis-fp16: error: {agent}=cuda: {build}; use cpu or auto"
    ]
    port = str(free_port())
    served = _cli(tmp_path, "serve", GENESIS_FP16_DEVICE="cuda", GENESIS_FP16_METRICS_PORT=port)
    assert served.returncode == 2
    assert served.stderr.splitlines() == [
        "genesis-fp16: error: invalid configuration: "
        f"GENESIS_FP16_DEVICE=cuda: {build}; use cpu or auto"
    ]
    assert not (tmp_path / "state").exists()  # refused before anything was created
    trained = _cli(tmp_path, "train", "se_darwin", "--device", "cuda", "--steps", "2")
    assert trained.returncode == 2
    assert trained.stderr.splitlines() == [
        f"genesis-fp16: error: --device cuda: {build}; use cpu or auto"
    ]
    assert "Traceback" not in trained.stderr


def test_train_names_the_setting_its_unusable_device_came_from() -> None:
    """train's refusal names the agent's own device setting, else the daemon's."""
    from genesis_fp16.cli import DeviceUnavailable
    from genesis_fp16.commands.train_checks import refuse_unusable_device

    args = argparse.Namespace(agent="se_darwin", device=None)
    own = Settings(agents={"se_darwin": {"device": NO_SUCH_GPU}})  # type: ignore[dict-item]
    for settings, where in (
        (Settings(device=NO_SUCH_GPU), "GENESIS_FP16_DEVICE"),
        (own, "GENESIS_FP16_AGENTS__SE_DARWIN__DEVICE"),
    ):
        with pytest.raises(DeviceUnavailable, match=f"^{where}={NO_SUCH_GPU}: this torch"):
            refuse_unusable_device(args, settings.agent("se_darwin"), NO_SUCH_GPU)


def test_config_check_refuses_a_gpu_index_this_host_lacks(tmp_path: Path) -> None:
    """cuda:99 on any host: config check exits 2 naming the variable and what torch found."""
    result = _cli(tmp_path, "config", "check", GENESIS_FP16_DEVICE=NO_SUCH_GPU)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"genesis-fp16: error: GENESIS_FP16_DEVICE={NO_SUCH_GPU}: ")
    assert f"this torch ({torch.__version__})" in line


def test_a_reload_naming_an_unusable_device_keeps_the_running_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A .env edit to cuda:99 is a counted failed reload; the daemon keeps its old settings."""
    from genesis_fp16.service.daemon import Daemon

    for key in [k for k in os.environ if k.startswith("GENESIS_FP16_")]:
        monkeypatch.delenv(key)
    env_file = tmp_path / ".env"
    env_file.write_text(f"GENESIS_FP16_DEVICE={NO_SUCH_GPU}\n")
    settings = Settings(state_dir=tmp_path)
    daemon = Daemon(settings, env_file, CollectorRegistry(), notifier=None)
    with capture_logs() as logs:
        assert daemon.reload() is False
    assert daemon.settings is settings
    (failed,) = [e for e in logs if e["event"].startswith("config reload failed")]
    assert failed["error"].startswith(f"GENESIS_FP16_DEVICE={NO_SUCH_GPU}: ")
    reloads = daemon.registry.get_sample_value(
        "genesis_fp16_config_reloads_total", {"outcome": "failure"}
    )
    assert reloads == 1


class _LosesItsGpu:
    api_version = API_VERSION
    name = "gpu_agent"

    def train(self, request: TrainRequest) -> Any:
        raise RuntimeError("CUDA error: unknown error\nCompile with TORCH_USE_CUDA_DSA ...")


def _context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **settings: Any) -> JobContext:
    for key in [k for k in os.environ if k.startswith("GENESIS_FP16_")]:
        monkeypatch.delenv(key)
    return JobContext(
        Settings(state_dir=tmp_path, auto_precision="rule", **settings),
        DaemonMetrics(CollectorRegistry(), "test"),
        DeviceSlots(1),
        threading.Event(),
    )


def _failures(ctx: JobContext, agent: str, reason: str) -> float | None:
    return ctx.metrics.registry.get_sample_value(
        "genesis_fp16_run_failures_total", {"agent": agent, "reason": reason}
    )


def test_a_gpu_lost_during_a_run_is_counted_as_such_and_health_says_degraded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run failing with a lost-device error: reason device_unavailable, one line, /healthz 503."""
    from genesis_fp16.service.daemon import Daemon

    agent = _LosesItsGpu.name
    train_in_process(monkeypatch)  # a test's plugin object is no entry point for a process
    ctx = _context(
        tmp_path,
        monkeypatch,
        agents={agent: {"data_path": tmp_path, "device": "cpu"}},
    )
    with capture_logs() as logs:
        run_agent_job(ctx, agent, _LosesItsGpu(), Capabilities())  # type: ignore[arg-type]
    assert _failures(ctx, agent, "device_unavailable") == 1
    assert not _failures(ctx, agent, "error")
    (failed,) = [e for e in logs if e["event"] == "training run failed"]
    assert failed["error"] == "CUDA error: unknown error" and "exc_info" not in failed
    daemon = Daemon(ctx.settings, tmp_path / ".env", CollectorRegistry(), notifier=None)
    daemon.context = ctx
    daemon.beat()
    ok, why = daemon.health()
    assert not ok
    assert why == f"degraded: {agent}: device cpu unavailable: CUDA error: unknown error"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_child_run_whose_gpu_is_gone_reports_it_and_the_daemon_counts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process-isolated run on a GPU that vanished after start-up: the child refuses in one
    line, and the job counts device_unavailable and marks the agent degraded."""
    from genesis_fp16.config.plugins import load_plugin

    ctx = _context(tmp_path, monkeypatch, device=NO_SUCH_GPU, steps_per_run=2, sample_count=200)
    with capture_logs() as logs:
        run_agent_job(ctx, "se_darwin", *load_plugin("se_darwin"))
    assert _failures(ctx, "se_darwin", "device_unavailable") == 1
    (failed,) = [e for e in logs if e["event"] == "training run failed"]
    assert failed["error"].startswith(f"the run request's device {NO_SUCH_GPU}: this torch (")
    assert ctx.degraded["se_darwin"].startswith(f"device {NO_SUCH_GPU} unavailable: ")


def test_a_child_that_loses_its_gpu_mid_run_tells_the_daemon_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """train --request failing with 'No CUDA GPUs are available': its last line has that kind."""
    from genesis_fp16 import cli
    from genesis_fp16.commands import train

    def gone(args: Any) -> int:
        raise RuntimeError("No CUDA GPUs are available")

    monkeypatch.setattr(train, "run", gone)
    request = tmp_path / "run_request.json"
    with pytest.raises(RuntimeError):  # the traceback still goes to stderr, for the log
        cli.main(["train", "se_darwin", "--request", str(request)])
    told = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert told == {
        "error": "RuntimeError: No CUDA GPUs are available",
        "kind": "device_unavailable",
        "exit_code": 1,
    }
