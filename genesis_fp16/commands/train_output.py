"""What `genesis-fp16 train` shows: the progress bar on a terminal, the JSON lines the
daemon's launcher reads, and the closing summary.

:func:`~genesis_fp16.commands.train.run` picks where each summary goes (``fan_out`` of
the bar, the launcher's lines and the tracker), and prints :func:`describe` of the result
at the end unless ``--json`` asked for the JSON object::

    on_log = fan_out(bar.update if bar else None, tracker.log_summary if tracker else None)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TextIO

from genesis_fp16.launch.progress_text import Progress
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import (
    Outcome,
    TrainingSummary,
    files,
    on_set_aside,
)

# Steps between two summaries when a terminal's bar or a tracker wants them.
PROGRESS_INTERVAL = 10
# How a run that returned a result ends (docs/commands.md): 0 finished (success, up to
# date, or a candidate the gate rejected); 1 a run that learned nothing; 75 stopped by
# Ctrl-C or SIGTERM with a checkpoint (sysexits' EX_TEMPFAIL: run it again to continue;
# 3 is a daemon's orphaned child's). Bad input is 2, a second Ctrl-C 130.
EXIT_STOPPED = 75
EXIT_CODES = {"failed": 1, "stopped": EXIT_STOPPED}


def print_diagnostics(values: Mapping[str, float]) -> None:
    """One ``{"diagnostics": ...}`` line for the launcher (a non-finite value as null)."""
    finite = {k: v if math.isfinite(v) else None for k, v in values.items()}
    print(json.dumps({"diagnostics": finite}, allow_nan=False), flush=True)


def relay_to_daemon() -> Callable[[Mapping[str, float]], None]:
    """In a daemon's child: print each state file set aside in this process, one
    ``{"set_aside": ...}`` line (the launcher counts it in the daemon), and return the
    printer of the run's live diagnostics."""
    on_set_aside(lambda event: print(json.dumps(files.relayed(event)), flush=True))
    return print_diagnostics


def print_progress(summary: TrainingSummary) -> None:
    """One ``{"progress": summary}`` line for the launcher."""
    print(json.dumps({"progress": summary.to_json()}, allow_nan=False), flush=True)


class ProgressBar:
    """tqdm's bar on a terminal: steps of this run, rate and ETA, loss, precision, skips.

    Drawn while :meth:`showing` is entered; records logged meanwhile go through
    ``tqdm.write``: they print on lines of their own above the bar, drawn again below.
    """

    def __init__(self, total: int | None, stream: TextIO) -> None:
        self.total = total
        self.stream = stream
        self.bar: Any = None
        self.counter = Progress(total, PROGRESS_INTERVAL)  # this run's steps, from its checkpoint

    @contextlib.contextmanager
    def showing(self) -> Iterator[None]:
        from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs (types-tqdm not in dev)
        from tqdm.contrib.logging import logging_redirect_tqdm  # type: ignore[import-untyped]

        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):  # not a terminal after all, or a closed one
            columns = 0
        # A terminal that reports no width (0, as a bare pty) would get no bar from tqdm.
        width = {"dynamic_ncols": True} if columns else {"ncols": 100}
        with logging_redirect_tqdm():
            self.bar = tqdm(total=self.total, file=self.stream, unit="step", **width)
            try:
                yield
            finally:
                self.bar.close()  # leaves the bar's last state on a line of its own

    def update(self, summary: TrainingSummary) -> None:
        if self.bar is None:
            return
        done = self.counter.done(summary.step)
        self.bar.set_postfix_str(
            f"loss {summary.train_loss:.4f}, {summary.precision}, skipped {summary.skipped_steps}",
            refresh=False,
        )
        self.bar.update(done - self.bar.n)


def describe(result: TrainResult, tracking: Mapping[str, Any] | None = None) -> str:
    """The closing summary of a run (and its ``tracking``: where its curves went): first
    what became of it, in one short line (:func:`verdict`), then the numbers. The long
    reasons (the precision's, the execution's, the gate's in full) are in ``--json`` and
    the log."""
    metrics = "  ".join(f"{k}={_number(v, '.4g')}" for k, v in result.eval.items())
    checkpoint = str(result.checkpoint) if result.checkpoint else None
    return (
        f"{result.agent}: {verdict(result)}\n"
        f"  {result.steps} steps in {result.precision_used} (requested "
        f"{result.precision_requested}), {result.execution}\n"
        f"  train loss {_number(result.final_train_loss, '.4f')}, {result.skipped_steps} "
        f"skipped, {_number(result.samples_per_second, '.0f')} samples/s, "
        f"{_number(result.wall_seconds, '.1f')}s\n"
        f"  eval: {metrics}\n"
        f"  checkpoint: {checkpoint}  quarantined: {result.quarantined}"
        + _describe_tracking(tracking)
        + _describe_bundle(result.fault_bundle)
    )


def verdict(result: TrainResult) -> str:
    """What became of the run, and the short reason: ``served: held_out: loss 0.41 vs
    served 0.43 on 400 records, ...``, ``rejected: ...``, ``up to date: ...``,
    ``stopped: ...``."""
    outcome, gate = result.outcome, result.gate
    if outcome == Outcome.UP_TO_DATE:
        records = result.data.records if result.data is not None else None
        return f"up to date: the model has learned all {records} records, no step taken"
    if outcome == Outcome.STOPPED:  # SIGTERM or Ctrl-C, or the daemon's stop
        return f"stopped at step {result.steps}, checkpointed: run train again to finish"
    if outcome == Outcome.FAILED:
        return f"failed: {result.failure} ({result.failure_detail})"
    if gate is None:
        return f"done: {result.steps} steps (no promotion gate: the newest checkpoint is the model)"
    if gate.outcome == Outcome.REJECTED:
        return f"rejected: {_gate_reason(result, passed=False)}; the served model stays"
    if gate.outcome == Outcome.INCONCLUSIVE:  # issue 62: kept, judged again as records arrive
        needs = f"about {gate.records_needed} records" if gate.records_needed else "more records"
        return f"inconclusive: kept, judged again when {needs} show it; the served model stays"
    if gate.outcome == Outcome.HELD:  # the operator pinned the served model
        return f"held by the pin: {_gate_reason(result, passed=True)}; the pinned model stays"
    if gate.outcome == Outcome.PROMOTED:
        if gate.served_id is None:
            auc = _number(result.eval.get("auc"), ".3f")
            return f"served: the first model, nothing to beat (AUC {auc})"
        return f"served: {_gate_reason(result, passed=True)}"
    return f"done: {result.steps} steps (no promotion gate: the newest checkpoint is the model)"


def _gate_reason(result: TrainResult, passed: bool) -> str:
    """The deciding figures of the run's gate in a few words: both models' mean loss on the
    first set (the gate's scores), else the first set that passed (or did not) in its own
    words, else the gate's reason, cut short: the verdict file has every set."""
    gate = result.gate
    assert gate is not None  # verdict() asks it of a judged run only
    cand, served = gate.candidate, gate.served
    metric = next(iter(cand.losses), "") if cand is not None else ""
    if cand is not None and served is not None and metric in served.losses:
        ours, theirs = cand.losses[metric], served.losses[metric]
        return f"{metric} {ours:.3f} vs {theirs:.3f} on {cand.records} {cand.name} records"
    sets = [c for c in gate.comparisons if c.passed is passed and c.reason]
    return (sets[0].reason if sets else gate.reason)[:160]


def _describe_bundle(path: str | None) -> str:
    return f"\n  fault bundle: {path} (genesis-fp16 replay {path})" if path else ""


def _describe_tracking(tracking: Mapping[str, Any] | None) -> str:
    if tracking is None:
        return ""
    failed = tracking["failed_writes"]
    return f"\n  curves: {tracking['path']}" + (f" ({failed} writes failed)" if failed else "")


def _number(value: float | None, spec: str) -> str:
    """``value`` formatted, or n/a: a run of 0 steps has no train loss (NaN)."""
    return "n/a" if value is None or math.isnan(value) else format(value, spec)
