"""Per-run curves: TensorBoard event files, one run per job, under ``<dir>/<agent>/<run_id>``.

Prometheus keeps each agent's *last* value; a run's history (how the loss fell, when the
loss scale halved, which steps were skipped) is what TensorBoard shows. Set
``GENESIS_FP16_TRACKING_DIR`` (or ``train --tracking-dir``) and every run writes, at each
log interval, through ``torch.utils.tensorboard``:

- ``train/loss``, ``train/loss_scale``, ``train/skipped_steps``,
  ``train/overflow_rate_window``, ``train/grad_norm``, ``train/samples_per_second``;
- ``precision/fp32``, ``precision/bf16``, ``precision/fp16``: 1 for the precision that
  ran at that step, 0 for the others;

``range/<module>/<stat>`` at the run's last sampled step when range statistics are on
(the modules nearest fp16's overflow and underflow, over the run's samples), and at
its end ``eval/<metric>`` and ``execution/<mode>`` (1 for what the steps ran as) at the
last step, with a text ``run`` naming the request and the outcome.

A tracker never fails a run: a write that fails (a full disk) is logged once, counted in
:attr:`RunTracker.failures`, and the tracker stops writing for the rest of that run.

>>> tracker = RunTracker(Path("runs"), "se_darwin", "3f2a9c1d0b7e")       # doctest: +SKIP
>>> tracker.log_summary(summary)                                          # doctest: +SKIP
>>> tracker.close()                                                       # doctest: +SKIP
0
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from genesis_fp16_infrastructure.api import EXECUTION_MODES, PRECISIONS

if TYPE_CHECKING:
    from genesis_fp16.plugin_api import TrainRequest

log = structlog.get_logger("genesis_fp16.tracking")

# Seconds between the writer's flushes to disk: what a TensorBoard open on a long run lags.
FLUSH_SECONDS = 30


class RunTracker:
    """One run's TensorBoard event files; every method swallows and counts write errors.

    Make it before the run, feed it each ``TrainingSummary``
    (:meth:`log_summary`) and the ``TrainResult`` (:meth:`log_result`), then
    :meth:`close` it: that returns the number of failed writes. ::

        tracker = RunTracker(Path("/var/lib/genesis-fp16/runs"), "se_darwin", run_id)
        tracker.log_start({"precision requested": "auto", "device": "cuda"})
        request = replace(request, on_log=tracker.log_summary)
        tracker.log_result(run_plugin(plugin, request))  # judging.run
        tracker.close()
    """

    def __init__(self, root: Path, agent: str, run_id: str) -> None:
        """A tracker writing under ``root/agent/run_id``; one that cannot create its folder
        or file is made closed, with the failure logged and counted."""
        self.path = Path(root) / agent / run_id
        self.failures = 0
        self._writer: Any = None  # None once a write failed: the run goes on without curves
        self._last_step: int | None = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.path), flush_secs=FLUSH_SECONDS)
        except Exception as exc:  # an unwritable folder, a full disk
            self._failed(exc)

    def log_start(self, fields: Mapping[str, object]) -> None:
        """What the run was asked to do, as the text ``run`` (TensorBoard's Text tab)."""
        self._write(lambda w: w.add_text("run", _table(fields), 0))

    def log_summary(self, summary: Any) -> None:
        """One log interval's ``TrainingSummary``, at its step (skipped steps included)."""
        step = int(summary.step)
        self._last_step = step
        scalars = {
            "train/loss": summary.train_loss,
            "train/loss_scale": summary.loss_scale,
            "train/skipped_steps": summary.skipped_steps,
            "train/overflow_rate_window": summary.overflow_rate_window,
            "train/grad_norm": summary.grad_norm,
            "train/samples_per_second": summary.samples_per_second,
        }
        for name in PRECISIONS:
            scalars[f"precision/{name}"] = float(summary.precision == name)
        self._scalars(scalars, step)

    def log_result(self, result: Any) -> None:
        """The ``TrainResult``: its eval metrics and execution at the run's last step, and
        the outcome as the text ``run``."""
        step = self._last_step if self._last_step is not None else int(result.steps)
        scalars: dict[str, float] = {f"eval/{k}": v for k, v in dict(result.eval).items()}
        for mode in EXECUTION_MODES:
            scalars[f"execution/{mode}"] = float(result.execution == mode)
        self._scalars(scalars, step)
        outcome = {
            "outcome": result.outcome,
            "precision used": f"{result.precision_used} ({result.precision_reason})",
            "execution": f"{result.execution} ({result.execution_reason})",
            "steps": result.steps,
            "skipped steps": result.skipped_steps,
            "final train loss": result.final_train_loss,
        }
        self._write(lambda w: w.add_text("run", _table(outcome), step))
        if getattr(result, "ranges", None) is not None:
            self.log_range(result.ranges)

    def log_range(self, summary: Any, k: int = 8) -> None:
        """A run's range statistics (``TrainResult.ranges``, a ``RangeSummary``) at its
        last sampled step: ``range/<module>/<stat>`` for the ``k`` modules nearest fp16's
        overflow and the ``k`` nearest its underflow, and ``range/(all)/<stat>``."""
        values = {
            f"range/{row.module}/{stat}": value
            for row in summary.nearest(k).values()
            for stat, value in row.to_json().items()
            if stat != "module" and value is not None
        }
        values["range/samples"] = float(summary.samples)
        self._scalars(values, int(summary.last_step))

    def close(self) -> int:
        """Flush and close the files; returns the number of writes that failed or were
        dropped after a failure, also logged in one line."""
        if self._writer is not None:
            self._write(lambda w: w.close())
            self._writer = None
        if self.failures:
            log.warning("run tracking incomplete", path=str(self.path), failed_writes=self.failures)
        return self.failures

    def _scalars(self, values: Mapping[str, float], step: int) -> None:
        def write(writer: Any) -> None:
            for tag, value in values.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    writer.add_scalar(tag, float(value), step)

        self._write(write)

    def _write(self, call: Callable[[Any], object]) -> None:
        if self._writer is None:
            if self.failures:  # dropped: the writer gave up after an earlier failure
                self.failures += 1
            return
        try:
            call(self._writer)
        except Exception as exc:  # the event file's own thread re-raises its write errors
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        writer, self._writer = self._writer, None
        log.warning(
            "run tracking failed; the run goes on without its curves",
            path=str(self.path),
            error=f"{type(exc).__name__}: {exc}",
        )
        if writer is not None:
            with contextlib.suppress(Exception):  # the same error again: logged, counted
                writer.close()


def open_tracker(
    root: Path | None, agent: str, run_id: str, request: TrainRequest
) -> RunTracker | None:
    """The run's tracker under ``root/agent/run_id`` (genesis_fp16/metrics/tracking.py), with what
    it was asked to do; None when tracking is off."""
    if root is None:
        return None
    tracker = RunTracker(root, agent, run_id)
    tracker.log_start(
        {
            "agent": agent,
            "run id": run_id,
            "precision requested": f"{request.precision.requested} ({request.precision_reason})",
            "device": request.device,
            "steps": request.steps,
            "epochs": request.epochs,
            "data": request.data_path,
        }
    )
    log.info("tracking the run", path=str(tracker.path))
    return tracker


def _table(fields: Mapping[str, object]) -> str:
    """A two-column markdown table (TensorBoard renders text summaries as markdown)."""
    rows = [f"| {name} | {value} |" for name, value in fields.items()]
    return "\n".join(["| | |", "|---|---|", *rows])
