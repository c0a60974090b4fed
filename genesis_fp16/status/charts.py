"""The three pictures of an agent's past, as :class:`~genesis_fp16.status.svg.Chart`\\ s
built from its :class:`~genesis_fp16.status.history.AgentHistory` (no drawing here):

- :func:`quality_chart`: the served model's score over time, a staircase that moves
  when a model is promoted or rolled back; marks where the gate promoted, rejected or
  held a candidate (at the candidate's score) and where the served model was rolled
  back or repaired (at the score of the model served after it);
- :func:`scale_chart`: each recent run's final loss scale (powers of two) and its
  skipped steps (bars), with a mark above a run the precision guard demoted;
- :func:`watch_chart`: the live watch's running difference (served model minus its
  predecessor, mean per record) with its anytime-valid bounds and the margin, marks
  where it found a regression or rolled back.

Promotions come from the runs' gate verdicts (they carry both scores); rollbacks and
repairs from the pointer's journal (the operator's too). The journal keeps the last 16
transitions and the history the last runs: a rollback older than the journal is taken
from its run's live figures, a promotion older than the history from the journal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from genesis_fp16.status.history import PROMOTIONS, AgentHistory, Transition
from genesis_fp16.status.report import watch_words
from genesis_fp16.status.svg import Chart, Mark
from genesis_fp16_infrastructure.api import Outcome, RunEntry

Point = tuple[float, float | None]
# The figures told by "higher is better" (reported beside the gate, never gated); every
# gated loss column (contract.judging) is lower is better, and 0 or more.
HIGHER_IS_BETTER = ("auc",)
# The values a score can take: its axis stays inside them (a loss column: 0 or more)
SCORE_BOUNDS: dict[str, tuple[float | None, float | None]] = {"auc": (0.0, 1.0)}


def quality_chart(history: AgentHistory) -> Chart:
    """The served model's score over time, promotions, rejections and rollbacks marked."""
    metric = history.metric or "score"
    better = "higher" if metric in HIGHER_IS_BETTER else "lower"
    on = f" on set {history.metric_set}" if history.metric_set else ""
    line: list[Point] = []
    marks: list[Mark] = []
    scored_on: str | None = None  # the set of records the line's last score is on
    for entry in history.runs:
        scored_on = _gate_points(entry, line, marks, scored_on)
    # A promotion the journal holds from before the first run kept: the runs miss it.
    first_run = min(
        (e.run.finished_at - e.run.duration_seconds for e in history.runs), default=math.inf
    )
    for change in history.transitions:
        _transition_points(change, first_run, line, marks)
    oldest_change = min((t.at for t in history.transitions), default=math.inf)
    for entry in history.runs:  # rollbacks the journal no longer holds
        live = entry.live
        if live is not None and live.rolled_back and entry.run.finished_at < oldest_change:
            marks.append(
                Mark(entry.run.finished_at, None, Outcome.ROLLED_BACK, "rolled back (live)")
            )
    return Chart(
        title=f"served model's {metric}{on} ({better} is better), promotions and rollbacks",
        y_label=f"{metric}{on}",
        line=tuple(line),
        marks=tuple(marks),
        step=True,
        empty="no gate verdict or served-model change recorded yet",
        y_bounds=SCORE_BOUNDS.get(metric, (0.0, None) if history.metric else (None, None)),
        kinds=(Outcome.PROMOTED, Outcome.REJECTED, Outcome.HELD, Outcome.ROLLED_BACK, "repair"),
    )


def _gate_points(
    entry: RunEntry, line: list[Point], marks: list[Mark], scored_on: str | None
) -> str | None:
    """A run's gate verdict: the served score after it, and its mark; the set its scores
    are on. Scores on other records than the line's last are never joined to it: the
    line breaks, and goes on from the served model's score on the gate's records, so a
    promotion is drawn against its predecessor on the same records (a first model's
    score on every current record is no yardstick for one on the held-out fifth)."""
    gate, at = entry.gate, entry.run.finished_at
    if gate is None:
        return scored_on
    # the primary column's scores; a rejection's reason names the column it was worse on
    candidate, served = (side.get(gate.primary or "") for side in (gate.candidate, gate.served))
    score = f"{gate.primary} {_g(candidate)}"
    against = "" if gate.served_id is None else f" vs {gate.served_id} ({_g(served)})"
    on = f" on set {gate.set}" if gate.set else ""
    label = f"{gate.candidate_id or 'candidate'} {score}{against}{on}; {entry.run.reason}"
    if line and gate.set != scored_on:
        line.append((at, None))  # the break
        if gate.served_id is not None:
            line.append((at, served))  # the served model on the gate's records
    if gate.outcome == Outcome.PROMOTED:
        line.append((at, candidate))
        marks.append(Mark(at, candidate, Outcome.PROMOTED, label))
        return gate.set
    line.append((at, served))
    marked = (Outcome.REJECTED, Outcome.HELD, Outcome.ROLLED_BACK)
    kind = gate.outcome if gate.outcome in marked else Outcome.HELD
    marks.append(Mark(at, candidate, kind, label))
    return gate.set


def _transition_points(
    change: Transition, first_run: float, line: list[Point], marks: list[Mark]
) -> None:
    """A journal transition: rollbacks and repairs always, promotions the runs miss."""
    served = f"{change.served or '?'}"
    kind: str
    if change.kind == "rollback":
        why = f": {change.reason}" if change.reason else ""
        label = f"rolled back to {served} from {change.dropped or '?'}{why}"
        kind = Outcome.ROLLED_BACK
    elif change.kind == "repair":
        label, kind = f"repaired: serves {served}", "repair"
    elif change.kind in PROMOTIONS and (change.kind == "manual" or change.at < first_run):
        label, kind = f"{change.kind}: serves {served}", Outcome.PROMOTED
    else:
        return
    line.append((change.at, change.score))
    marks.append(Mark(change.at, change.score, kind, label))


def scale_chart(history: AgentHistory) -> Chart:
    """Each recent run's final loss scale and skipped steps; demotions marked."""
    runs = history.runs
    marks = tuple(
        Mark(float(index), None, "demoted", f"run {index}: demoted {'; '.join(entry.demotions)}")
        for index, entry in enumerate(runs, 1)
        if entry.demotions
    )
    return Chart(
        title=f"loss scale and skipped steps, last {len(runs)} runs",
        y_label="loss scale",
        line=tuple((float(i), e.loss_scale) for i, e in enumerate(runs, 1)),
        bars=tuple((float(i), e.skipped_steps) for i, e in enumerate(runs, 1)),
        bars_label="skipped steps",
        marks=marks,
        log_y=True,
        x_time=False,
        empty="no run recorded yet",
        kinds=("demoted",),
    )


def watch_chart(history: AgentHistory, watch: Mapping[str, Any] | None) -> Chart:
    """The live watch's difference, its bounds and margin; regressions marked. The
    pointer's figures now are the last point (at the time the watch wrote them) when no
    run reported them. ``watch``: the served model's watch state, the one the page's
    watch row says (:func:`~genesis_fp16.status.report.watch_words`): the chart's title
    and, with nothing to draw, its note say it in the same words."""
    points = [(e.run.finished_at, e.live) for e in history.runs if e.live is not None]
    now, at = history.live_now, history.live_at
    if now is not None and at is not None and (not points or points[-1][1] != now):
        points.append((at, now))
    marks = []
    for at, live in points:  # the primary column drawn, the regressed ones named
        if live.rolled_back or live.regression:
            kind = Outcome.ROLLED_BACK if live.rolled_back else "regression"
            what = "rolled back" if live.rolled_back else "regression, not rolled back"
            on = f" on {', '.join(live.regressed)}" if live.regressed else ""
            difference = live.watched.difference
            marks.append(Mark(at, difference, kind, f"{what}{on}: {_g(difference)}"))
    margin = points[-1][1].watched.margin if points else None
    said = watch_words(watch)
    return Chart(
        title=f"live watch ({said}): served model minus its predecessor, bounds and margin",
        y_label="difference",
        line=tuple((at, live.watched.difference) for at, live in points),
        band=tuple((at, live.watched.lower, live.watched.upper) for at, live in points),
        marks=tuple(marks),
        rule=margin,
        rule_label="" if margin is None else f"margin {_g(margin)}",
        empty=said,
        kinds=("regression", Outcome.ROLLED_BACK),
    )


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
