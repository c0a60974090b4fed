"""The daemon's side of the precision guard: the remembered floor, and remembering demotions.

A run asks for ``requested_precision`` (flag, ``ENABLE_FP16_TRAINING``, per-agent
override, auto). When the agent's precision state file remembers a demotion, that is the
run's floor (``run_request.precision_request`` puts it in the request): a request that
would run in a less robust precision than the remembered one (fp16 < bf16 < fp32) runs in
the remembered one instead (``decide`` applies it), so a restarted daemon does not go back to what
failed. Whether the floor applies is ``requested_precision``'s to say (the one place the
operator's precedence is worked out): ``ENABLE_FP16_TRAINING=false`` always wins, it
asks for fp32, which no memory lowers. ``genesis-fp16 precision reset AGENT`` deletes the memory;
``GENESIS_FP16_GUARD_PROMOTE_AFTER_RUNS=N`` deletes it after N clean runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from genesis_fp16.config.settings import Settings
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    AgentState,
    PrecisionMemory,
)

if TYPE_CHECKING:  # the daemon passes its metrics in; `train` (and a child run) never
    # needs prometheus_client, which the import would cost every process (benchmarks/
    # results/child_start_cpu-amd-epyc-2-cores.md)
    from genesis_fp16.metrics.guard_metrics import GuardMetrics

log = structlog.get_logger("genesis_fp16.guard")


def load_memory(
    settings: Settings,
    agent: str,
    state: AgentState | None = None,
    folder: AgentFolder | None = None,
) -> PrecisionMemory | None:
    """The agent's remembered demotion; ``state``: the agent's folder as a run's plan read
    it (None: the memory is read now); ``folder``: the agent's, as the run holds it (None:
    made here, when the memory is read or set aside).

    An unusable file (torn, not JSON, a folder, a FIFO, a link, over its size bound) is
    set aside as ``precision_state.json.unusable-*``, counted, logged in one line, and
    replaced by a memory whose floor is the most robust precision: a demotion it may
    have held is never forgotten into the precision that failed. `genesis-fp16
    precision reset AGENT` (the operator) clears it."""
    if state is not None and state.memory_error is None:  # as the plan read it
        return state.memory
    folder = AgentFolder(settings.state_dir, agent) if folder is None else folder
    error = None if state is None else state.memory_error
    if error is None:
        try:
            return folder.precision_memory()
        except ValueError as exc:
            error = str(exc)
    memory, moved = folder.replace_unusable_precision_memory(error)  # counted by the folder
    log.warning(
        f"unusable precision state file set aside: the agent trains in {memory.demoted_to} "
        f"until `genesis-fp16 precision reset {agent}`",
        agent=agent,
        path=str(folder.precision_state_path),
        set_aside=str(moved.aside),
        error=moved.why,
    )
    return memory


def announce_run(folder: AgentFolder, agent: str, result: TrainResult) -> None:
    """Write ``result``'s demotions and fault bundles to the outbox of the agent's folder
    ``folder`` (the one the run holds), before they are counted or logged, by whoever ran
    it (:func:`record_run`, or an operator's foreground ``train`` in the state folder); the
    daemon's delivery thread posts them, at its next pass for a run made while it was
    down. A full disk loses the announcement, logged, never the run's record."""
    found = [("demotion", d.to_json()) for d in result.demotions]
    found += [("fault_bundle", b.to_json()) for b in result.fault_bundles]
    outbox = folder.outbox
    for kind, data in found:
        try:
            outbox.record(kind, data)
        except OSError as exc:
            structlog.get_logger("genesis_fp16.events").error(
                "cannot write the event to the outbox", agent=agent, kind=kind, error=str(exc)
            )


def record_run(
    settings: Settings,
    metrics: GuardMetrics,
    agent: str,
    result: TrainResult,
    folder: AgentFolder | None = None,
) -> None:
    """Announce (the agent's outbox), count (the guard's family of ``metrics``), log and
    remember the run's demotions and fault bundles; count a clean run; maybe promote: the
    guard's memory at the end of a run (genesis_fp16/jobs/run_ended.py). ``folder``: the
    agent's, as the run holds it (None: made here)."""
    folder = AgentFolder(settings.state_dir, agent) if folder is None else folder
    announce_run(folder, agent, result)
    metrics.count_guarded(agent, result)  # announced first: an event is never counted unsent
    for d in result.demotions:
        log.warning(
            "precision demoted",
            agent=agent,
            precision_from=d.from_,
            precision_to=d.to,
            reason=d.reason,
            step=d.step,
            rollback_step=d.rollback_step,
            detail=d.detail,
        )
    for bundle in result.fault_bundles:
        log.warning(
            "fault bundle written",
            agent=agent,
            reason=bundle.reason,
            step=bundle.step,
            precision=bundle.precision,
            path=bundle.path,
            replay=f"genesis-fp16 replay {bundle.path}",
        )
    with folder.precision_memory_locked():  # `precision reset` may be rewriting it now
        _record_memory(settings, agent, folder, result)


def _record_memory(
    settings: Settings, agent: str, folder: AgentFolder, result: TrainResult
) -> None:
    demotions = tuple(result.demotions)
    previous = load_memory(settings, agent, folder=folder)
    # Without demotions, only a finished run in the remembered precision counts as clean.
    floor = previous.demoted_to if previous is not None else None
    if not demotions and (result.stopped_early or result.precision_used != floor):
        return
    try:
        memory = folder.remember_run(previous, demotions, settings.guard_promote_after_runs)
    except OSError as exc:
        path = str(folder.precision_state_path)
        log.error("cannot write the precision state file", path=path, error=str(exc))
        return
    if previous is not None and memory is None:  # the clean runs asked for: promoted
        log.info(
            "precision promoted",
            agent=agent,
            precision_from=previous.demoted_to,
            clean_runs=previous.clean_runs + 1,
        )


def describe(memory: PrecisionMemory | None) -> str:
    """One line for ``genesis-fp16 agents``; empty when nothing is remembered."""
    if memory is None:
        return ""
    return (
        f"[demoted {memory.demoted_from} -> {memory.demoted_to}: {memory.reason} at step "
        f"{memory.step}, {memory.at}; clean runs since: {memory.clean_runs}]"
    )
