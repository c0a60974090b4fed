"""The daemon's precision guard: metrics, memory across restarts, reset, precedence, promotion."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_fork import run_cli
from daemon_harness import FIXTURE_PLUGINS, DaemonFactory, DaemonProcess, daemon_env
from fake_results import train_result
from prometheus_client import CollectorRegistry

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.guard_state import record_run
from genesis_fp16.jobs.run_request import expected_precision, precision_request
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import PrecisionRequest, TrainResult
from genesis_fp16_infrastructure.agent_folder.files import newest_aside
from genesis_fp16_infrastructure.folder import (
    AgentFolder,
)
from genesis_fp16_infrastructure.training.precision.decide import decide
from genesis_fp16_infrastructure.training.precision.guard_config import GuardConfig
from genesis_fp16_infrastructure.training.precision.precision_memory import remember_demotions
from genesis_fp16_infrastructure.training.reports import Demotion

GUARD_PLUGINS = Path(__file__).resolve().parents[2] / "fixtures" / "guard_plugins"
AGENT = "fixture_fault"
DEMOTION = Demotion("fp16", "bf16", "overflow_rate", 15, 10)
ENV = {
    "PYTHONPATH": os.pathsep.join([str(GUARD_PLUGINS), str(FIXTURE_PLUGINS)]),
    "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
    "ENABLE_FP16_TRAINING": "true",
    "GENESIS_FP16_STEPS_PER_RUN": "30",
    "GENESIS_FP16_LOG_INTERVAL": "10",
    "GENESIS_FP16_SCHEDULE": "3600",
    "GENESIS_FP16_GUARD_CHECK_INTERVAL": "5",
    "GENESIS_FP16_GUARD_OVERFLOW_WINDOW": "5",
    "GENESIS_FP16_GUARD_OVERFLOW_WARMUP": "0",
    # bf16 stays on the ladder on a CPU without native bf16 too: the same demotion anywhere.
    "GENESIS_FP16_GUARD_BF16_NEEDS_NATIVE": "false",
    "FIXTURE_FAULT_STEP": "12",
}


def _finished_runs(daemon: DaemonProcess) -> float:
    value = daemon.sample("genesis_fp16_training_runs_total", agent=AGENT, outcome="success")
    return value or 0.0


def _started_precisions(daemon: DaemonProcess) -> list[tuple[str, str | None]]:
    """Each started run's requested precision and the floor its request carries."""
    return [
        (str(e.get("precision")), e.get("floor")) for e in daemon.events("training run started")
    ]


@pytest.mark.slow
def test_demotion_shows_in_metrics_survives_restart_and_reset_clears_it(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """fp16 overflow demotes to bf16 in /metrics and state; a restart stays bf16; reset clears."""
    daemon = daemon_factory(ENV)
    daemon.wait_for(lambda: _finished_runs(daemon) >= 1, "the first run", timeout=90)
    demotions = daemon.sample(
        "genesis_fp16_precision_demotions_total",
        agent=AGENT,
        **{"from": "fp16", "to": "bf16"},
        reason="overflow_rate",
    )
    assert demotions == 1
    assert daemon.sample("genesis_fp16_precision", agent=AGENT, precision="bf16") == 1
    assert daemon.sample("genesis_fp16_precision", agent=AGENT, precision="fp16") == 0
    (logged,) = daemon.events("precision demoted")
    assert (logged["precision_from"], logged["precision_to"]) == ("fp16", "bf16")
    assert (logged["reason"], logged["step"], logged["rollback_step"]) == ("overflow_rate", 15, 10)
    assert _started_precisions(daemon) == [("fp16", None)]
    folder = AgentFolder(daemon.state_dir, AGENT)
    state_path, memory = folder.precision_state_path, folder.precision_memory()
    assert memory is not None
    assert (memory.demoted_from, memory.demoted_to, memory.reason) == (
        "fp16",
        "bf16",
        "overflow_rate",
    )
    daemon.stop()
    assert daemon.process.returncode == 0

    again = daemon_factory(ENV)
    again.wait_for(lambda: _finished_runs(again) >= 1, "the run after a restart", timeout=90)
    assert _started_precisions(again) == [("fp16", "bf16")]  # decide() runs it at the floor
    assert again.sample("genesis_fp16_precision", agent=AGENT, precision="bf16") == 1
    assert not again.events("precision demoted")  # bf16 trains cleanly: no new demotion
    listing = _cli(tmp_path, "agents", "--json")
    (entry,) = [e for e in json.loads(listing.stdout) if e["name"] == AGENT]
    assert entry["precision_guard"]["demoted_to"] == "bf16"
    again.stop()

    reset = _cli(tmp_path, "precision", "reset", AGENT)
    assert "precision demotion cleared (was fp16 -> bf16)" in reset.stdout
    assert not state_path.exists()
    assert "no precision demotion remembered" in _cli(tmp_path, "precision", "show", AGENT).stdout


def _cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = daemon_env(ENV, fixtures=False)
    done = run_cli(
        [*args],
        cwd=workdir,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


def _settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(state_dir=tmp_path, **values)  # type: ignore[arg-type]


def _remember(tmp_path: Path, demotion: Demotion = DEMOTION) -> Path:
    folder = AgentFolder(tmp_path, AGENT)
    folder.save_precision_memory(remember_demotions(None, [demotion]))
    return folder.precision_state_path


def _planned(settings: Settings, device: str = "cpu") -> str | None:
    """What decide() answers the agent's planned request before the run (the gauge's)."""
    return expected_precision(precision_request(settings, AGENT)[0], device)


def test_memory_lowers_the_precision_but_fp16_off_switch_wins(tmp_path: Path) -> None:
    """A remembered fp16->bf16 is the request's floor, so fp16 runs bf16;
    ENABLE_FP16_TRAINING=false still gives fp32."""
    fp16 = _settings(tmp_path, ENABLE_FP16_TRAINING=True)
    assert _planned(fp16) == "fp16"
    _remember(tmp_path)
    request, reason = precision_request(fp16, AGENT)
    assert (request.requested, request.floor, reason) == (
        "fp16",
        "bf16",
        "ENABLE_FP16_TRAINING=true",
    )
    assert "demoted fp16 -> bf16" in request.floor_reason
    assert f"precision reset {AGENT}" in request.floor_reason
    assert _planned(fp16) == "bf16"
    off = _settings(tmp_path, ENABLE_FP16_TRAINING=False)
    request, reason = precision_request(off, AGENT)
    assert (request.requested, request.floor) == ("fp32", None)
    assert reason == "ENABLE_FP16_TRAINING=false (rollback to fp32)"
    fp32 = _settings(tmp_path, agents={AGENT: {"precision": "fp32"}})
    assert _planned(fp32) == "fp32"  # already more robust
    unguarded = _settings(tmp_path, ENABLE_FP16_TRAINING=True, guard_enabled=False)
    assert _planned(unguarded) == "fp16"
    assert unguarded.guard is None


def test_guard_settings_default_to_the_guard_configs_defaults(tmp_path: Path) -> None:
    """Every GuardConfig field has its GENESIS_FP16_GUARD_ setting, defaulting alike."""
    assert _settings(tmp_path).guard == GuardConfig()


def test_a_zero_guard_setting_turns_its_trigger_off(tmp_path: Path) -> None:
    """0 in the settings is None in GuardConfig for the triggers that can be off."""
    zeros = ("nonfinite_limit", "overflow_rate_limit", "divergence_factor", "overflow_warmup")
    off = _settings(tmp_path, **{f"guard_{name}": 0 for name in zeros})
    config = off.guard
    assert config is not None
    assert (config.nonfinite_limit, config.overflow_rate_limit, config.divergence_factor) == (
        None,
        None,
        None,
    )
    assert config.overflow_warmup == 0  # not a trigger: 0 warm-up steps


def test_auto_that_resolves_to_the_remembered_precision_takes_the_memory(tmp_path: Path) -> None:
    """auto stays auto in the request, the memory its floor: decide() runs an auto that
    lands on the remembered bf16 at the floor, with the memory's reason."""
    auto = _settings(tmp_path)
    assert precision_request(auto, AGENT)[0].floor is None
    _remember(tmp_path)
    request, _ = precision_request(auto, AGENT)
    assert (request.requested, request.mode, request.floor) == ("auto", "measure", "bf16")
    decision = decide(request, "cpu")
    if decide(PrecisionRequest("auto"), "cpu").used == "bf16":
        assert (decision.used, decision.reason.startswith("precision guard memory")) == (
            "bf16",
            True,
        )
    else:  # auto is fp32 here, already more robust than the memory
        assert decision.used == "fp32"


def test_an_explicit_request_meets_the_memory_without_probing_the_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit fp16 under a remembered bf16 floor is planned as bf16 without asking the
    device (no CUDA start in the daemon's process); only an auto by the rule needs it, and
    a measured auto with nothing measured yet is left to its run."""
    from genesis_fp16_infrastructure.training.precision import decide as decide_module

    def no_probe(device: object) -> object:
        raise AssertionError(f"the device {device} was probed")

    _remember(tmp_path)
    monkeypatch.setattr(decide_module, "detect_capabilities", no_probe)
    fp16 = _settings(tmp_path, ENABLE_FP16_TRAINING=True)
    assert _planned(fp16, "cuda") == "bf16"
    assert _planned(_settings(tmp_path), "cuda") is None  # measured: the run decides
    with pytest.raises(AssertionError, match="was probed"):  # the stand-in is live
        _planned(_settings(tmp_path, auto_precision="rule"), "cuda")


def test_a_broken_state_file_keeps_the_agent_at_the_most_robust_precision(
    tmp_path: Path,
) -> None:
    """A garbled state file neither crashes the job nor lets a demotion it may have held be
    forgotten (issue 37): it is set aside and the agent trains in fp32 until a reset."""
    path = _remember(tmp_path)
    path.write_text("garbage")
    settings = _settings(tmp_path, ENABLE_FP16_TRAINING=True)
    assert _planned(settings) == "fp32"
    assert newest_aside(path).read_text() == "garbage"  # type: ignore[union-attr]


def _result(precision: str, demotions: list[Demotion], stopped: bool = False) -> TrainResult:
    return train_result(
        agent=AGENT,
        precision_requested="fp16",
        precision_used=precision,
        stopped_early=stopped,
        demotions=demotions,
    )


def test_record_run_counts_remembers_and_promotes_after_clean_runs(tmp_path: Path) -> None:
    """Demotions increment the counter and write the file; N clean bf16 runs promote back."""
    settings = _settings(tmp_path, guard_promote_after_runs=2)
    metrics = DaemonMetrics(CollectorRegistry(), version="test")
    folder = AgentFolder(tmp_path, AGENT)
    record_run(settings, metrics, AGENT, _result("bf16", [DEMOTION]))
    labels = {"agent": AGENT, "from": "fp16", "to": "bf16", "reason": "overflow_rate"}
    assert metrics.registry.get_sample_value("genesis_fp16_precision_demotions_total", labels) == 1
    memory = folder.precision_memory()
    assert memory is not None and memory.demoted_to == "bf16" and memory.clean_runs == 0

    record_run(settings, metrics, AGENT, _result("bf16", [], stopped=True))  # does not count
    record_run(settings, metrics, AGENT, _result("fp32", []))  # ran elsewhere: does not count
    memory = folder.precision_memory()
    assert memory is not None and memory.clean_runs == 0
    record_run(settings, metrics, AGENT, _result("bf16", []))
    memory = folder.precision_memory()
    assert memory is not None and memory.clean_runs == 1
    record_run(settings, metrics, AGENT, _result("bf16", []))
    assert not folder.precision_state_path.exists()  # promoted: the next run asks for fp16 again


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_guard_demotes_a_two_rank_torchrun_job_started_by_the_daemon(
    daemon_factory: DaemonFactory,
) -> None:
    """NPROC=2 on gloo: the ranks get the daemon's guard; fp16 overflow demotes to bf16."""
    env = {
        **ENV,
        "GENESIS_FP16_AGENTS__FIXTURE_FAULT__NPROC": "2",
        "GENESIS_FP16_AGENTS__FIXTURE_FAULT__DEVICE": "cpu",
        "OMP_NUM_THREADS": "1",  # two ranks on a 2-core machine
    }
    daemon = daemon_factory(env)
    daemon.wait_for(lambda: _finished_runs(daemon) >= 1, "the torchrun run", timeout=150)
    (finished,) = daemon.events("training run finished")
    assert (finished["precision_requested"], finished["precision_used"]) == ("fp16", "bf16")
    assert finished["precision_reason"].startswith("ENABLE_FP16_TRAINING=true")
    assert "precision guard" in finished["precision_reason"]
    (logged,) = daemon.events("precision demoted")
    assert (logged["precision_from"], logged["precision_to"]) == ("fp16", "bf16")
    assert logged["reason"] == "overflow_rate"
    demotions = daemon.sample(
        "genesis_fp16_precision_demotions_total",
        agent=AGENT,
        **{"from": "fp16", "to": "bf16"},
        reason="overflow_rate",
    )
    assert demotions == 1
    # Rank 0's own records came through the launcher's relay: it ran under torchrun.
    assert any(r.get("logger") == "genesis_fp16.torchrun" for r in daemon.logs())


@pytest.mark.slow
def test_a_run_whose_every_gradient_is_nan_fails_and_degrades_healthz(
    daemon_factory: DaemonFactory,
) -> None:
    """A real daemon, fp16 asked, NaN gradients at every step with a finite loss: the guard
    walks down the ladder and the run ends failed (nonfinite_gradients) within one run,
    counted, and /healthz says degraded naming the agent."""
    daemon = daemon_factory(
        {
            **ENV,
            "FIXTURE_FAULT_KIND": "nan_grad",
            "FIXTURE_FAULT_STEP": "0",
        }
    )
    failures = ("genesis_fp16_run_failures_total",)
    runs = ("genesis_fp16_training_runs_total",)
    # The failure's reason is counted before the run is (run_ended._count: count_run,
    # finish_run): wait for both, or a loaded machine reads between them.
    daemon.wait_for(
        lambda: (
            daemon.sample(*failures, agent=AGENT, reason="nonfinite_gradients")
            and daemon.sample(*runs, agent=AGENT, outcome="failed")
        ),
        "a run failed for NaN gradients and was counted",
        timeout=180,
    )
    assert _finished_runs(daemon) == 0
    assert daemon.sample(*runs, agent=AGENT, outcome="failed") == 1
    status, body = daemon.get("/healthz")
    assert status == 503 and AGENT in body, body
