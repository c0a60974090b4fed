"""A finished run's records: the last run, and the history's entries with their gate and live marks.

:class:`LastRun` is one finished run (what ``last_run.json`` holds alone);
:class:`RunEntry` is one line of the run history, its reports beside it (the gate's
:class:`GateMark`, the live watch's :class:`LiveMark`). The history's file,
``run_history.jsonl``, is :mod:`~genesis_fp16_infrastructure.agent_folder.run_history`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from genesis_fp16_infrastructure.agent_folder.lifecycle_figures import finite
from genesis_fp16_infrastructure.precision_names import PrecisionName, RequestedName

TEXT_CHARS = 160  # a score's name, a model's id, a drift warning
# A last run's reason is cut to REASON_CHARS; a measured auto on CUDA names six rows
# (three precisions, eager and captured) in its precision's reason.
REASON_CHARS = 400
PRECISION_REASON_CHARS = 1000
MARK_COLUMNS = 4  # the columns a gate or live mark keeps, the primary first
NAME_CHARS = 32  # a column's name (contract.judging: at most 32 characters)


@dataclass(frozen=True)
class LastRun:
    """One finished run: its outcome (``success``, ``up_to_date``, ``failed``,
    ``stopped``), the precision it trained in and was asked for, when it ended (Unix
    time), how long it took, why it ended so (one line), who ran it (``daemon`` or
    ``train``) and its optimizer steps."""

    outcome: str
    precision: PrecisionName | None
    precision_requested: RequestedName | None
    finished_at: float
    duration_seconds: float
    reason: str
    source: str
    steps: int | None
    eval: dict[str, float] | None = None  # the run's eval figures (`model list` shows them)
    # Why it ran in that precision (a measured auto: every timed precision, its spread).
    precision_reason: str = ""


class GateMark(msgspec.Struct, frozen=True):
    """The gate's verdict on the run's candidate: the outcome, the two models' ids and
    their finite scores on the gate's first set by column (the loss columns, then the
    reported ones, such as ``auc``), the ``primary`` first. The set that decided, and
    the column a rejection was worse on, are in the run's reason."""

    outcome: str
    set: str | None = None
    primary: str | None = None
    candidate: dict[str, float] = msgspec.field(default_factory=dict)
    served: dict[str, float] = msgspec.field(default_factory=dict)
    candidate_id: str | None = None
    served_id: str | None = None


class LiveColumn(msgspec.Struct, frozen=True):
    """One column's live test: the mean difference (served minus predecessor, in the
    column's units), its anytime-valid bounds, the margin, and whether it regressed."""

    difference: float | None = None
    lower: float | None = None
    upper: float | None = None
    margin: float | None = None
    regression: bool = False

    @classmethod
    def of(cls, figures: Mapping[str, Any]) -> LiveColumn:
        """A column's figures in a live watch's JSON: what is not finite or true left out."""
        d, lo, up, m = (finite(figures.get(k)) for k in ("difference", "lower", "upper", "margin"))
        return cls(d, lo, up, m, figures.get("regression") is True)


class LiveMark(msgspec.Struct, frozen=True):
    """The live watch's running figures after the run: the records scored, whether it
    found a regression and rolled back, and each column's test (``metrics``, the
    ``primary`` first)."""

    records: int
    regression: bool
    rolled_back: bool
    primary: str | None = None
    metrics: dict[str, LiveColumn] = msgspec.field(default_factory=dict)

    @property
    def watched(self) -> LiveColumn:
        """The primary column's test: what the watch chart draws."""
        return self.metrics.get(self.primary or "", LiveColumn())

    @property
    def regressed(self) -> tuple[str, ...]:
        """The columns whose test found a regression."""
        return tuple(name for name, column in self.metrics.items() if column.regression)

    @classmethod
    def of(cls, live: Mapping[str, Any]) -> LiveMark:
        """The figures of a live watch's JSON (a run's report, or the served entry's, which
        a hand may have edited): what is not a finite number, a count or true left out."""
        records, metrics, primary = live.get("records"), live.get("metrics"), live.get("primary")
        if not isinstance(metrics, Mapping):  # one column beside the rest, before the map
            primary = live.get("metric") if isinstance(live.get("metric"), str) else "loss"
            metrics = {primary: live}
        columns = {str(k): c for k, c in metrics.items() if isinstance(c, Mapping)}
        primary = primary if isinstance(primary, str) and primary in columns else None
        kept = sorted(columns.items(), key=lambda item: item[0] != primary)[:MARK_COLUMNS]
        return cls(
            records=records if isinstance(records, int) and not isinstance(records, bool) else 0,
            regression=live.get("regression") is True,
            rolled_back=live.get("rolled_back") is True,
            primary=None if primary is None else cut(primary, NAME_CHARS),
            metrics={cut(name, NAME_CHARS): LiveColumn.of(column) for name, column in kept},
        )


class RunEntry(msgspec.Struct, frozen=True):
    """One finished run as the history keeps it: its last-run record (why it trained in
    its precision too), its loss scale and skipped steps, the guard's demotions (one line
    each), the records it quarantined, the drift warning (None: none flagged), the gate's
    verdict and the live watch's figures."""

    run: LastRun
    loss_scale: float | None = None
    skipped_steps: int | None = None
    demotions: tuple[str, ...] = ()
    quarantined: int | None = None
    drift: str | None = None
    gate: GateMark | None = None
    live: LiveMark | None = None

    @classmethod
    def of_error(cls, outcome: str, reason: str, duration: float, source: str) -> RunEntry:
        """The entry of a run that ended without a result (failed, or stopped as it
        started): its record alone."""
        reason = cut(reason, REASON_CHARS)
        return cls(LastRun(outcome, None, None, time.time(), round(duration, 3), reason, source, 0))


def text(value: Any) -> str | None:
    """``value`` as one cut line (:func:`cut`), None kept."""
    return None if value is None else cut(str(value))


def cut(text: str, chars: int = TEXT_CHARS) -> str:
    """``text`` on one line (a traceback's newlines would break it), cut to ``chars``."""
    line = " ".join(str(text).split())
    return line if len(line) <= chars else line[: chars - 1] + "…"
