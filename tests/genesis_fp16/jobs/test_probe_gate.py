"""The daemon's probe gate: probe once before the first bf16/fp16 run, remember, export."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import msgspec
import pytest
from daemon_harness import FIXTURE_PLUGINS, DaemonFactory
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.config.settings import AgentSettings, Settings
from genesis_fp16.jobs.job_state import DeviceSlots, JobContext, Run
from genesis_fp16.jobs.planning import plan_run
from genesis_fp16.jobs.probe_gate import (
    ProbeGate,
    ProbeRecord,
    _probe,
    probe_before_run,
    red_precisions,
    show_probe,
)
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics, ProbeMetrics
from genesis_fp16.plugin_api import AgentPlugin, PrecisionRequest
from genesis_fp16_infrastructure.agent_folder.files import newest_aside
from genesis_fp16_infrastructure.api import AgentFolder, capabilities_of

PROBE_PLUGIN = Path(__file__).resolve().parents[1] / "probe_plugin"
sys.path.insert(0, str(PROBE_PLUGIN))
from probe_toy_agent import plugin as probe_toy  # noqa: E402

sys.path.insert(0, str(FIXTURE_PLUGINS))
from fixture_agents.good import plugin as fixture_good  # noqa: E402


def _settings(tmp_path: Path, enabled: bool = True) -> Settings:
    return Settings(
        state_dir=tmp_path / "state",
        probe_steps=2,
        agents={"probe_toy": AgentSettings(probe_before_low_precision=enabled)},
    )


def _stored(state_dir: Path, agent: str) -> ProbeRecord | None:
    """The probe record kept in the agent's folder, read as the gate reads it."""
    return AgentFolder(state_dir, agent).probe_record(ProbeRecord.from_json)


def _gate_shown(
    settings: Settings,
    metrics: ProbeMetrics,
    agent: str,
    plugin: AgentPlugin,
    data_path: Path | None,
    device: str,
    precision: PrecisionRequest,
) -> ProbeRecord | None:
    """The gate's decision (``probe_before_run``) shown as a run's start shows it
    (``show_probe``): the agent's probe record, new or remembered, or None."""
    gate = probe_before_run(settings, agent, plugin, data_path, device, precision)
    show_probe(metrics, gate)
    return gate.record


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_probe_runs_once_before_bf16_and_is_exported(tmp_path: Path) -> None:
    """A bf16 run is probed; the record is stored and exported; a second call reads it back."""
    settings, registry = _settings(tmp_path), CollectorRegistry()
    metrics = DaemonMetrics(registry, "t")
    record = _gate_shown(
        settings, metrics.probe, "probe_toy", probe_toy, None, "cpu", PrecisionRequest("bf16")
    )
    assert record is not None and record.error is None and record.precision == "bf16"
    stored = _stored(settings.state_dir, "probe_toy")
    assert stored == record
    colour = {"green": 0, "amber": 1, "red": 2}
    for variant, verdict in record.verdict.items():
        if verdict in colour:
            labels = {"agent": "probe_toy", "variant": variant}
            assert _value(registry, "genesis_fp16_probe_verdict", **labels) == colour[verdict]
    recommended = {"agent": "probe_toy", "variant": record.recommended}
    assert _value(registry, "genesis_fp16_probe_recommended", **recommended) == 1
    bf16 = colour[record.verdict["bf16_autocast"]]
    labels = {"agent": "probe_toy", "precision": "bf16"}
    assert _value(registry, "genesis_fp16_probe_precision_verdict", **labels) == bf16
    # Probing again would fail (fixture_good has no probe): the stored record is used.
    again = _gate_shown(
        settings, metrics.probe, "probe_toy", fixture_good, None, "cpu", PrecisionRequest("fp16")
    )
    assert again == record


def test_no_probe_when_off_or_fp32(tmp_path: Path) -> None:
    """The gate is off by default (a planned bf16 run is not probed), and an fp32 run is
    never probed."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, "t")
    probe = metrics.probe
    bf16 = {"probe_toy": AgentSettings(precision="bf16")}
    off = Settings(state_dir=tmp_path / "state", agents=bf16)
    ctx = JobContext(off, metrics, DeviceSlots(1), threading.Event())
    run = Run(ctx, "probe_toy", off, off.agent("probe_toy"))
    planned = plan_run(run, probe_toy, capabilities_of(probe_toy), "cpu")
    assert planned.precision.requested == "bf16"
    assert not AgentFolder(off.state_dir, "probe_toy").probe_record_path.exists()
    on = _settings(tmp_path)
    assert (
        _gate_shown(on, probe, "probe_toy", probe_toy, None, "cpu", PrecisionRequest("fp32"))
        is None
    )
    assert not AgentFolder(on.state_dir, "probe_toy").probe_record_path.exists()
    assert _value(registry, "genesis_fp16_probe_timestamp_seconds", agent="probe_toy") is None


def test_failed_probe_is_remembered_and_does_not_raise(tmp_path: Path) -> None:
    """A plugin whose probe_setup raises: the error is stored, nothing exported, no re-probe."""
    settings = Settings(
        state_dir=tmp_path / "state",
        agents={"fixture_good": AgentSettings(probe_before_low_precision=True)},
    )
    registry = CollectorRegistry()
    probe = DaemonMetrics(registry, "t").probe
    # bf16 asked for explicitly: auto is fp32 on a CPU without native bf16, which is not probed.
    record = _gate_shown(
        settings, probe, "fixture_good", fixture_good, None, "cpu", PrecisionRequest("bf16")
    )
    assert record is not None and "NotImplementedError" in str(record.error)
    assert _stored(settings.state_dir, "fixture_good") == record
    assert _value(registry, "genesis_fp16_probe_timestamp_seconds", agent="fixture_good") is None


def test_a_cuda_probe_sets_deterministic_cublas_unless_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA the gate sets ``CUBLAS_WORKSPACE_CONFIG`` before probing, as ``genesis-fp16
    probe`` does: torch refuses a cuBLAS call under the probe's deterministic algorithms
    without it, and the probe would fail. A value already set is kept. On a CPU: the
    fixture's probe_setup raises before anything touches the device."""
    settings = _settings(tmp_path)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    record = _probe(settings, "fixture_good", fixture_good, None, "cuda:0", "fp16")
    assert "NotImplementedError" in str(record.error)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    _probe(settings, "fixture_good", fixture_good, None, "cuda:0", "fp16")
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    _probe(settings, "fixture_good", fixture_good, None, "cpu", "fp16")
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ  # a CPU probe leaves it alone


def _red_fp16(bf16: str = "green") -> ProbeRecord:
    """A stored probe record whose fp16_autocast verdict is red."""
    return ProbeRecord(
        at=1.0,
        device="cpu",
        steps=2,
        seed=0,
        precision="fp16",
        recommended="bf16_autocast",
        verdict={"fp32": "green", "bf16_autocast": bf16, "fp16_autocast": "red"},
        reasons={"fp16_autocast": ["activation headroom: red (0: 7.0e+04)"]},
    )


def test_red_verdict_for_the_running_precision_is_a_warning(tmp_path: Path) -> None:
    """A stored red fp16_autocast verdict logs a warning before an fp16 run, not a bf16 one."""
    settings = _settings(tmp_path)
    red = _red_fp16()
    AgentFolder(settings.state_dir, "probe_toy").save_probe_record(msgspec.to_builtins(red))
    registry = CollectorRegistry()
    probe = DaemonMetrics(registry, "t").probe
    with capture_logs() as logs:
        _gate_shown(settings, probe, "probe_toy", probe_toy, None, "cpu", PrecisionRequest("bf16"))
        assert not [r for r in logs if r["log_level"] == "warning"]
        _gate_shown(settings, probe, "probe_toy", probe_toy, None, "cpu", PrecisionRequest("fp16"))
    (warning,) = [r for r in logs if r["log_level"] == "warning"]
    assert (
        warning["variant"] == "fp16_autocast" and warning["reasons"] == red.reasons["fp16_autocast"]
    )
    labels = {"agent": "probe_toy", "precision": "fp16"}
    assert _value(registry, "genesis_fp16_probe_precision_verdict", **labels) == 2


MEASURED = PrecisionRequest("auto", mode="measure")


def test_the_gate_asks_the_planned_request_floor_included(tmp_path: Path) -> None:
    """fp16 under a remembered fp32 floor runs fp32, so decide() says there is nothing
    to probe; the same request without the floor probes."""
    settings = _settings(tmp_path)
    probe = DaemonMetrics(CollectorRegistry(), "t").probe
    floored = PrecisionRequest("fp16", floor="fp32", floor_reason="remembered")
    assert _gate_shown(settings, probe, "probe_toy", probe_toy, None, "cpu", floored) is None
    record = _gate_shown(
        settings, probe, "probe_toy", probe_toy, None, "cpu", PrecisionRequest("bf16")
    )
    assert record is not None and record.precision == "bf16"


def test_a_red_verdict_keeps_the_precision_out_of_a_measured_auto(tmp_path: Path) -> None:
    """Under auto=measure the red precision is not timed (and no 'running as configured'
    warning is logged: it will not run); a failed or absent probe excludes nothing."""
    settings = _settings(tmp_path)
    red = _red_fp16(bf16="amber")
    assert red_precisions(red) == {"fp16": "probe red: activation headroom: red (0: 7.0e+04)"}
    assert red_precisions(None) == {}
    failed = ProbeRecord(1.0, "cpu", 2, 0, "fp16", "", {}, {}, error="RuntimeError()")
    assert red_precisions(failed) == {}
    AgentFolder(settings.state_dir, "probe_toy").save_probe_record(msgspec.to_builtins(red))
    probe = DaemonMetrics(CollectorRegistry(), "t").probe
    with capture_logs() as logs:
        record = _gate_shown(settings, probe, "probe_toy", probe_toy, None, "cuda", MEASURED)
    assert record == red and not [r for r in logs if r["log_level"] == "warning"]


def test_the_gate_decides_and_the_start_shows(tmp_path: Path) -> None:
    """``probe_before_run`` reads (or probes) and returns its decision, exporting and
    warning nothing; ``show_probe`` (the run's start) exports it and warns of the red
    precision about to run; a measured auto's decision excludes the red ones instead."""
    settings = _settings(tmp_path)
    red = _red_fp16()
    AgentFolder(settings.state_dir, "probe_toy").save_probe_record(msgspec.to_builtins(red))
    registry = CollectorRegistry()
    probe = DaemonMetrics(registry, "t").probe
    with capture_logs() as logs:
        gate = probe_before_run(
            settings, "probe_toy", probe_toy, None, "cpu", PrecisionRequest("fp16")
        )
    assert gate == ProbeGate("probe_toy", red, "fp16", measures=False, excluded={})
    assert logs == []
    assert _value(registry, "genesis_fp16_probe_timestamp_seconds", agent="probe_toy") is None
    with capture_logs() as logs:
        show_probe(probe, gate)
    (warning,) = [r for r in logs if r["log_level"] == "warning"]
    assert warning["precision"] == "fp16"
    assert _value(registry, "genesis_fp16_probe_timestamp_seconds", agent="probe_toy") == red.at
    measured = probe_before_run(settings, "probe_toy", probe_toy, None, "cuda", MEASURED)
    assert measured.excluded == red_precisions(red) != {}


def test_a_probe_that_ran_is_shown_even_when_its_plan_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan that fails after the request is built (here its progress report, raising):
    the run fails, and no probe record is kept unexported: the probe is the plan's last
    step, so a plan that fails has not probed, and a probe that ran is shown at the start."""
    from genesis_fp16.jobs import planning
    from genesis_fp16.jobs.agent_job import run_agent_job

    def broken(steps: int, interval: int) -> None:
        raise RuntimeError("cannot report progress")

    monkeypatch.setattr(planning, "Progress", broken)
    agents = {"probe_toy": AgentSettings(probe_before_low_precision=True, precision="bf16")}
    settings = Settings(state_dir=tmp_path / "state", probe_steps=2, agents=agents)
    registry = CollectorRegistry()
    ctx = JobContext(settings, DaemonMetrics(registry, "t"), DeviceSlots(1), threading.Event())
    run_agent_job(ctx, "probe_toy", probe_toy, capabilities_of(probe_toy))
    labels = {"agent": "probe_toy", "outcome": "failed"}
    assert _value(registry, "genesis_fp16_training_runs_total", **labels) == 1
    stored = _stored(settings.state_dir, "probe_toy")
    shown = _value(registry, "genesis_fp16_probe_timestamp_seconds", agent="probe_toy")
    assert stored is None or shown == stored.at  # base: kept, and shown only at a later run


@pytest.mark.slow
def test_daemon_probes_before_the_first_low_precision_run_and_not_after_restart(
    daemon_factory: DaemonFactory,
) -> None:
    """probe_toy's verdict gauges appear; a restarted daemon re-exports without probing."""
    env = {
        "PYTHONPATH": os.pathsep.join([str(PROBE_PLUGIN), str(FIXTURE_PLUGINS)]),
        "GENESIS_FP16_PLUGIN_ALLOWLIST": "probe_toy,fixture_good",
        "GENESIS_FP16_AGENTS__PROBE_TOY__PROBE_BEFORE_LOW_PRECISION": "true",
        "GENESIS_FP16_AGENTS__PROBE_TOY__PRECISION": "bf16",
        "GENESIS_FP16_PROBE_STEPS": "2",
        "GENESIS_FP16_STEPS_PER_RUN": "2",
        "GENESIS_FP16_SAMPLE_COUNT": "96",
        "GENESIS_FP16_SCHEDULE": "3600",
        "FIXTURE_STEP_SECONDS": "0",
    }
    daemon = daemon_factory(env)

    def probed() -> float | None:
        return daemon.sample("genesis_fp16_probe_timestamp_seconds", agent="probe_toy")

    daemon.wait_for(probed, "the probe of probe_toy", timeout=90)
    bf16 = daemon.sample(
        "genesis_fp16_probe_precision_verdict", agent="probe_toy", precision="bf16"
    )
    assert bf16 in (0, 1, 2)
    assert daemon.sample("genesis_fp16_probe_verdict", agent="probe_toy", variant="fp32") == 0
    (started,) = [e for e in daemon.events("precision probe started") if e["agent"] == "probe_toy"]
    assert started["precision"] == "bf16"
    # fixture_good is not configured to probe; its runs go on without a probe.
    daemon.wait_for(
        lambda: daemon.sample(
            "genesis_fp16_training_runs_total", agent="fixture_good", outcome="success"
        ),
        "a fixture_good run",
    )
    assert daemon.sample("genesis_fp16_probe_timestamp_seconds", agent="fixture_good") is None
    stored = _stored(daemon.state_dir, "probe_toy")
    assert stored is not None and stored.precision == "bf16"
    daemon.stop()

    restarted = daemon_factory(env)
    restarted.wait_for(
        lambda: restarted.sample("genesis_fp16_probe_timestamp_seconds", agent="probe_toy"),
        "the remembered probe of probe_toy",
    )
    assert restarted.sample("genesis_fp16_probe_timestamp_seconds", agent="probe_toy") == stored.at
    assert not restarted.events("precision probe started")


@pytest.mark.parametrize("kind", ["torn", "oversize", "folder"])
def test_an_unusable_probe_record_is_set_aside_counted_and_probed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A torn or 1 MiB+ probe_result.json, or a folder at its name: set aside as
    .unusable, counted under file=probe_result, and the agent probed again (here
    fixture_good, whose probe fails at once and is stored) instead of never again."""
    from genesis_fp16_infrastructure.agent_folder import files

    skipped: list[tuple[str, str]] = []
    monkeypatch.setattr(files, "_listeners", [lambda e: skipped.append((e.agent, e.label))])
    settings = Settings(
        state_dir=tmp_path / "state",
        agents={"fixture_good": AgentSettings(probe_before_low_precision=True)},
    )
    path = AgentFolder(settings.state_dir, "fixture_good").probe_record_path
    path.parent.mkdir(parents=True)
    if kind == "torn":
        path.write_text('{"precision": "bf16", "verd')
    elif kind == "oversize":
        path.write_text(" " * (2 << 20))
    else:
        path.mkdir()
    probe = DaemonMetrics(CollectorRegistry(), "t").probe
    record = _gate_shown(
        settings, probe, "fixture_good", fixture_good, None, "cpu", PrecisionRequest("bf16")
    )
    assert record is not None and "NotImplementedError" in str(record.error)  # probed again
    assert newest_aside(path) is not None
    assert _stored(settings.state_dir, "fixture_good") == record
    assert skipped == [("fixture_good", "probe_result")]
