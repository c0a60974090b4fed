"""What a finished run announces: its precision demotions and fault bundles, written to the
agent's outbox before they are counted or logged, by whoever ran it (the daemon's
``record_run``, or an operator's foreground ``train`` in the state folder); the daemon's
delivery thread posts them, at its next pass for a run made while it was down."""

from __future__ import annotations

from pathlib import Path

import structlog

from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import outbox

log = structlog.get_logger("genesis_fp16.events")


def announce_run(folder: Path, agent: str, result: TrainResult) -> None:
    """Write ``result``'s demotions and fault bundles to the outbox of the agent's folder
    ``folder``. A full disk loses the announcement, logged, never the run's record."""
    found = [("demotion", d.to_json()) for d in result.demotions]
    found += [("fault_bundle", b.to_json()) for b in result.fault_bundles]
    for kind, data in found:
        try:
            outbox.record(folder, kind, data)
        except OSError as exc:
            log.error(
                "cannot write the event to the outbox", agent=agent, kind=kind, error=str(exc)
            )
