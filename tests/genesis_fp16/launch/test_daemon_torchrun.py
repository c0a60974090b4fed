"""The real daemon running an agent with NPROC=2 as a supervised torchrun child."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from daemon_harness import DaemonFactory, DaemonProcess

AGENT = "se_darwin"
RUNS = "genesis_fp16_training_runs_total"
OUTCOMES = ("success", "failed", "stopped")


def _settings(**extra: str) -> dict[str, str]:
    """A small se_darwin in two gloo processes; the first run starts at once."""
    return {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
        "GENESIS_FP16_AGENTS__SE_DARWIN__NPROC": "2",
        # gloo ranks on any host: auto would be cuda on a GPU host (one GPU per rank).
        "GENESIS_FP16_AGENTS__SE_DARWIN__DEVICE": "cpu",
        "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "fp32",
        "GENESIS_FP16_SAMPLE_COUNT": "200",
        "GENESIS_FP16_LOG_INTERVAL": "2",
        "GENESIS_FP16_SCHEDULE": "3600",
        "OMP_NUM_THREADS": "1",  # two ranks on a 2-core machine
        **extra,
    }


def _outcomes(daemon: DaemonProcess) -> dict[str, float | None]:
    return {o: daemon.sample(RUNS, agent=AGENT, outcome=o) for o in OUTCOMES}


def _processes_in(folder: Path) -> list[int]:
    """Live processes (zombies excluded) whose working folder is ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and cwd == str(folder) and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(90)
def test_nproc_2_run_is_a_torchrun_child_and_exports_rank_0s_metrics(
    daemon_factory: DaemonFactory,
) -> None:
    """NPROC=2: one run in 2 torchrun ranks; /metrics has its success, steps and rank 0's loss."""
    daemon = daemon_factory(_settings(GENESIS_FP16_STEPS_PER_RUN="6"), fixtures=False)
    daemon.wait_for(lambda: _outcomes(daemon)["success"], "a torchrun run", timeout=75)
    assert _outcomes(daemon) == {"success": 1, "failed": 0, "stopped": 0}
    (launched,) = [r for r in daemon.logs() if str(r["event"]).startswith("launching torchrun")]
    assert launched["event"].startswith("launching torchrun with 2 process(es): ")
    assert "-m torch.distributed.run --standalone --nproc-per-node 2 " in launched["event"]
    assert launched["agent"] == AGENT
    # The ranks' records come through the daemon's logging, with this run's context.
    joined = [r for r in daemon.logs() if str(r["event"]).startswith("joined process")]
    assert {r["event"].split(" (")[0] for r in joined} == {
        "joined process group: rank 0 of 2",
        "joined process group: rank 1 of 2",
    }
    for record in joined:
        assert (record["agent"], record["run_id"]) == (AGENT, launched["run_id"])
        assert record["logger"] == "genesis_fp16.torchrun"
        assert record["child_logger"] == "genesis_fp16.distributed"
    assert not [r for r in daemon.logs() if r.get("unparsed")]
    (finished,) = daemon.events("training run finished")
    assert finished["outcome"] == "success" and finished["steps"] == 6
    s = daemon.sample
    assert s("genesis_fp16_optimizer_steps_total", agent=AGENT) == 6
    assert s("genesis_fp16_skipped_steps_total", agent=AGENT) == 0
    # Rank 1 logs a different train loss for its shard; the gauge holds rank 0's.
    assert s("genesis_fp16_train_loss", agent=AGENT) == finished["final_train_loss"]
    assert s("genesis_fp16_eval_loss", agent=AGENT) == finished["eval"]["loss"]
    assert s("genesis_fp16_precision", agent=AGENT, precision="fp32") == 1
    assert (s("genesis_fp16_last_success_timestamp_seconds", agent=AGENT) or 0) > 1e9
    checkpoint = daemon.workdir / finished["checkpoint"]
    assert checkpoint.name == "ckpt-0000000006.pt" and checkpoint.is_file()


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(90)
def test_run_past_its_timeout_is_stopped_with_a_checkpoint_and_the_daemon_serves_on(
    daemon_factory: DaemonFactory,
) -> None:
    """RUN_TIMEOUT_SECONDS: SIGTERM at the limit, every rank exits, the run counts as stopped."""
    # torchrun and two ranks start in ~5 s here, loaded; 30 s leaves room on a slower machine
    # (a SIGTERM before the ranks are up would make the run "failed"). The run would take hours.
    timeout = 30.0
    daemon = daemon_factory(
        _settings(
            GENESIS_FP16_STEPS_PER_RUN="100000000",
            GENESIS_FP16_LOG_INTERVAL="50",
            GENESIS_FP16_AGENTS__SE_DARWIN__RUN_TIMEOUT_SECONDS=str(timeout),
        ),
        fixtures=False,
    )
    daemon.wait_for(lambda: _outcomes(daemon)["stopped"], "the timeout to stop the run", 100)
    assert _outcomes(daemon) == {"success": 0, "failed": 0, "stopped": 1}
    assert daemon.events(f"stopping the torchrun job: the {timeout}s timeout (SIGTERM)")
    assert not [r for r in daemon.logs() if "killing it" in str(r["event"])]
    (finished,) = daemon.events("training run finished")
    assert finished["outcome"] == "stopped" and finished["steps"] > 0
    assert timeout <= finished["duration_seconds"] < timeout + 30
    checkpoint = daemon.workdir / finished["checkpoint"]
    assert checkpoint.name == f"ckpt-{finished['steps']:010d}.pt" and checkpoint.is_file()
    assert daemon.sample("genesis_fp16_optimizer_steps_total", agent=AGENT) == finished["steps"]
    assert daemon.sample("genesis_fp16_last_success_timestamp_seconds", agent=AGENT) in (0, None)
    # torchrun and both ranks ran in the daemon's folder; only the daemon is left there.
    assert _processes_in(daemon.workdir) == [daemon.process.pid]
    beat = "genesis_fp16_scheduler_heartbeat_timestamp_seconds"
    first = daemon.sample(beat) or 0
    daemon.wait_for(lambda: (daemon.sample(beat) or 0) > first, "a later heartbeat", 10)
    assert daemon.get("/healthz")[0] == 200 and daemon.get("/readyz")[0] == 200


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="without CUDA, DEVICE=cuda stops serve at start-up (launch/test_devices.py)",
)
def test_more_cuda_ranks_than_gpus_is_refused_before_launch_in_one_line(
    daemon_factory: DaemonFactory,
) -> None:
    """NPROC above the GPU count on cuda: no torchrun, one failed run, a line naming NPROC."""
    nproc = max(2, torch.cuda.device_count() + 1)  # one more rank than this host has GPUs
    daemon = daemon_factory(
        _settings(
            GENESIS_FP16_AGENTS__SE_DARWIN__DEVICE="cuda",
            GENESIS_FP16_AGENTS__SE_DARWIN__NPROC=str(nproc),
        ),
        fixtures=False,
    )
    daemon.wait_for(lambda: _outcomes(daemon)["failed"], "the refused run", timeout=75)
    assert _outcomes(daemon) == {"success": 0, "failed": 1, "stopped": 0}
    (failed,) = daemon.events("training run failed")
    assert failed["error"].startswith(f"GENESIS_FP16_AGENTS__SE_DARWIN__NPROC={nproc} on cuda")
    assert f"this host has {torch.cuda.device_count()}" in failed["error"]
    assert "exception" not in failed  # a refusal, not a crash: no traceback
    assert not [r for r in daemon.logs() if str(r["event"]).startswith("launching torchrun")]
    assert daemon.get("/healthz")[0] == 200
