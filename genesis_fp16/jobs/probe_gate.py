"""Run the precision probe once before an agent's first low-precision run, and export it.

With ``GENESIS_FP16_AGENTS__<AGENT>__PROBE_BEFORE_LOW_PRECISION=true``, the first run of
the agent whose precision (after ``auto`` is resolved) is bf16 or fp16 first runs
``genesis_fp16_infrastructure.probe.run_probe`` on the agent's own model and data
(``GENESIS_FP16_PROBE_STEPS`` optimizer steps, the daemon's seed, the run's device). The
result goes to ``<state>/agents/<agent>/probe_result.json``, so a restarted daemon does
not probe again (delete the file to re-probe); a failed probe is remembered the same way.

A red verdict for the precision about to run is logged as a warning and exported; the run
still goes ahead in the configured precision. The probe measures one frozen batch and a
few steps against strict tolerances, while the precision guard watches the real run and
demotes it with a rollback when fp16 really goes bad: a red probe is a reason for an
operator to look (the ``GenesisFp16ProbeRed`` alert), not for the daemon to overrule
the configuration, and nothing changes the precision silently.

The gate decides and returns (:func:`probe_before_run`: a :class:`ProbeGate`, the record
with what it means for this run); what is shown of it, the gauges
(``genesis_fp16.metrics.daemon_metrics.ProbeMetrics``) and the red warning, is shown at
the run's start (:func:`show_probe`, a subscriber of ``RunStarted``:
genesis_fp16/jobs/run_started.py), after the plan that asked.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import structlog

from genesis_fp16.config.settings import Settings
from genesis_fp16.launch.devices import deterministic_cublas
from genesis_fp16.metrics.daemon_metrics import ProbeMetrics
from genesis_fp16.plugin_api import AgentPlugin, PrecisionRequest
from genesis_fp16_infrastructure.api import (
    LOW_PRECISIONS,
    AgentFolder,
    PrecisionName,
    SetAside,
)

log = structlog.get_logger("genesis_fp16.probe_gate")

SCHEMA_VERSION = 1


class ProbeRecord(msgspec.Struct, frozen=True, tag_field="schema_version", tag=SCHEMA_VERSION):
    """What the probe found for one agent, as kept in its state folder: its JSON is
    ``msgspec.to_builtins(record)``, ``schema_version`` first."""

    at: float
    device: str
    steps: int
    seed: int
    precision: PrecisionName  # the run's precision that triggered the probe
    recommended: str
    verdict: Mapping[str, str]
    reasons: Mapping[str, list[str]]
    error: str | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ProbeRecord:
        """The record as kept; ``ValueError`` (msgspec's ``ValidationError``, naming the
        field) for one of another version or with a field of the wrong type."""
        if raw.get("schema_version") != SCHEMA_VERSION:  # the tag's check lets a missing one by
            found = raw.get("schema_version")
            raise ValueError(f"schema_version {found!r} is not {SCHEMA_VERSION}")
        return msgspec.convert(raw, cls)  # the fields' types checked, as status.report reads


def _used_precision(request: PrecisionRequest, device: str) -> PrecisionName | None:
    """What ``decide`` answers the run's request before anything is timed: a measured
    ``auto`` then says the rule's pick, the 16-bit precision a measurement may choose."""
    from genesis_fp16_infrastructure.api import PrecisionError, decide

    try:
        return decide(request, device).used
    except PrecisionError:
        return None  # the run itself will fail with the clear error


@dataclass(frozen=True)
class ProbeGate:
    """What the gate decided for one run: the agent's probe record (new or remembered;
    None when the run is fp32 and nothing was probed yet, or the record cannot be read),
    the precision ``decide`` answers the run's request before anything is timed
    (``used``), whether that request measures, and what the run leaves out for it
    (``excluded``: a measured ``auto`` does not time the red precisions, each with its
    first reason, where any other run is warned of them; :meth:`of` decides it).

    >>> ProbeGate.of("se_darwin", None, "fp16", measures=False).excluded
    {}
    """

    agent: str
    record: ProbeRecord | None
    used: PrecisionName | None
    measures: bool
    excluded: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, agent: str, record: ProbeRecord | None, used: PrecisionName | None, measures: bool
    ) -> ProbeGate:
        """The gate's decision for a record: the red precisions excluded when the run's
        request measures (``PrecisionRequest.excluded``), none for any other request."""
        return cls(agent, record, used, measures, red_precisions(record) if measures else {})


def probe_before_run(
    settings: Settings,
    agent: str,
    plugin: AgentPlugin,
    data_path: Path | None,
    device: str,
    precision: PrecisionRequest,
    folder: AgentFolder | None = None,
) -> ProbeGate:
    """Probe once before the agent's first bf16/fp16 run, and say what the record means for
    this run; shows nothing (:func:`show_probe` does) and never raises. The planner calls
    it only when the agent's ``probe_before_low_precision`` is on.

    ``precision`` is the run's planned request (``run_request.precision_request``): the
    gate asks ``decide`` what it runs, as the run will. ``folder``: the agent's, as the
    run holds it (None: made here).
    """
    folder = AgentFolder(settings.state_dir, agent) if folder is None else folder
    stuck: list[SetAside] = []
    record = folder.probe_record(
        ProbeRecord.from_json, lambda event: stuck.append(event) if event.aside is None else None
    )
    if stuck:  # not set aside: a probe whose record could never be written would run
        log.error("unusable probe record cannot be set aside: delete it", error=stuck[0].why)
        return ProbeGate.of(agent, None, None, precision.measures)
    used = _used_precision(precision, device)  # asked once: the probe's and the warning's
    if record is None and used in LOW_PRECISIONS:
        record = _probe(settings, agent, plugin, data_path, device, used)
        try:
            folder.save_probe_record(msgspec.to_builtins(record))
        except OSError as exc:
            path = folder.probe_record_path
            log.error("cannot write the probe record", path=str(path), error=str(exc))
    return ProbeGate.of(agent, record, used, precision.measures)


def show_probe(metrics: ProbeMetrics, gate: ProbeGate) -> None:
    """Export the gate's record (a failed probe exports nothing), and warn when its verdict
    is red for the precision about to run (a measured ``auto`` leaves it out instead)."""
    record = gate.record
    if record is None:
        return
    if record.error is None:
        metrics.export(gate.agent, record.verdict, record.recommended, record.at)
    if not gate.measures:
        _warn_if_red(gate.agent, record, gate.used)


def red_precisions(record: ProbeRecord | None) -> dict[str, str]:
    """The 16-bit precisions a probe record marks red, each with its first reason: a
    measured ``auto`` does not time them (``PrecisionRequest.excluded``)."""
    if record is None or record.error is not None:
        return {}
    red: dict[str, str] = {}
    for precision in LOW_PRECISIONS:
        variant = f"{precision}_autocast"
        if record.verdict.get(variant) == "red":
            first = next(iter(record.reasons.get(variant, [])), "no reason given")
            red[precision] = f"probe red: {first}"
    return red


def _probe(
    settings: Settings,
    agent: str,
    plugin: AgentPlugin,
    data_path: Path | None,
    device: str,
    used: PrecisionName,
) -> ProbeRecord:
    from genesis_fp16_infrastructure.api import run_probe

    steps, seed = settings.probe_steps, settings.seed
    deterministic_cublas(device)
    log.info("precision probe started", agent=agent, precision=used, steps=steps, device=device)
    started = time.monotonic()
    try:
        report = run_probe(plugin.probe_setup(data_path, seed), device, steps, seed)
    except Exception as exc:  # a plugin without a probe, or a probe that cannot run
        log.exception("precision probe failed; training goes on unprobed", agent=agent)
        return ProbeRecord(time.time(), device, steps, seed, used, "", {}, {}, error=repr(exc))
    record = ProbeRecord(
        at=time.time(),
        device=device,
        steps=steps,
        seed=seed,
        precision=used,
        recommended=report.recommended,
        verdict=report.verdict,
        reasons={k: list(v) for k, v in report.reasons.items()},
    )
    log.info(
        "precision probe finished",
        agent=agent,
        recommended=record.recommended,
        verdict=dict(record.verdict),
        duration_seconds=round(time.monotonic() - started, 3),
    )
    return record


def _warn_if_red(agent: str, record: ProbeRecord, used: PrecisionName | None) -> None:
    if used in red_precisions(record):
        variant = f"{used}_autocast"
        log.warning(
            "precision probe verdict is red for the precision about to run; running as "
            "configured (the precision guard still watches the run)",
            agent=agent,
            precision=used,
            variant=variant,
            reasons=record.reasons.get(variant, []),
            recommended=record.recommended,
        )
