"""Why a run has no result: said by its exception alone; where it ran is the run's."""

from __future__ import annotations

from genesis_fp16.jobs.run_failure import RunError
from genesis_fp16.launch.launcher import LaunchError
from genesis_fp16.plugin_api import TrainRequestError


def test_a_lost_device_degrades_the_agent_naming_the_device_the_run_held() -> None:
    """The failure is classified without the run's device; ``/healthz`` names it."""
    lost = RunError.failed(LaunchError("CUDA error: unknown error", "device_unavailable"))
    assert (lost.reason, lost.degraded) == ("device_unavailable", "CUDA error: unknown error")
    assert lost.health("cuda:3") == "device cuda:3 unavailable: CUDA error: unknown error"
    full = RunError.failed(LaunchError("cannot write /x/ckpt.pt: disk full", "storage"))
    assert full.health("cuda:3") == "cannot write /x/ckpt.pt: disk full"  # not the device's
    refused = RunError.failed(TrainRequestError("option 'x' is not known"))
    assert refused.health("cuda:3") is None  # not the host's fault: not degraded
