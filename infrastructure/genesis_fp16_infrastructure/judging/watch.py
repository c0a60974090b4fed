"""A judged plugin's live watch: the served model against its predecessor on later records.

Each judged run first scores the current records with the served model (the gate needs
them too). Records whose ids neither the served model nor its predecessor (the pointer's
``history[0]``) knew when it was judged (:mod:`.stores`: ``judged_ids.npz``), and that
this watch has not scored before, are scored by the predecessor as well and appended, in
arrival order, to ``judged-live-<predecessor>.npz`` in the served model's candidate
folder: each record counts once, in one fixed order, as the bound below requires.

The test, on each loss column the plugin declares (``RecordLosses.losses``): both
losses clipped to ``[0, loss_span]`` (the plugin's declared span: the bound needs
bounded differences), the paired differences (served - predecessor) get the
anytime-valid empirical-Bernstein bounds below (**The bound**) at ``ALPHA / k`` for
``k`` columns; when a column's lower bound passes its margin (the plugin's
``judging_margin``, else 5% of the predecessor's mean loss there, never under a declared
``judging_margin_floor``), the served model is
worse than the one before it beyond the margin. Why ``ALPHA / k`` (Bonferroni): each
column's bounds hold over the whole watch except with probability ``ALPHA / k``, so all
hold together except with at most ``ALPHA``, whatever the columns' dependence; Holm's
step-down tests nothing at a wider level before a first failure, which already rolls
back (docs/judging.md). The A/A self-test replays the columns together.
Unless the operator pinned it (then ``held``), the predecessor is served again through
:func:`~genesis_fp16_infrastructure.agent_folder.transitions.rollback`, and the dropped
model's verdict becomes ``rolled_back`` with reason ``live_regression``, the figures,
and the columns that regressed. The running figures (a
:class:`~genesis_fp16_infrastructure.contract.reports.LiveReport`'s JSON, a map by
column) go into the served entry of ``served.json`` as ``live``.

What counts as a "later record" is the plugin's: its ids. The scaffold's are lines of
its data file (a new file brings new ids); rlhf_ppo's are evaluation episodes of the
current task file (a changed task file brings new episodes).

The live watch per segment, and its A/A self-test: what the watch decides and what it
would wrongly decide on this data.

**Segments.** A watched record may carry a segment key (se_darwin: the Genesis agent
that made the record; a plugin that declares none: one segment). A model much worse on
one segment and equal elsewhere moves the mean over all records by that segment's share
only; each segment is therefore watched on its own records as well, and the watch finds
a regression when the overall test *or any segment's* does.

The family's error is split by a fixed allocation (Bonferroni over slots, anytime-valid
because each test is): the overall test gets ``alpha / 2``, and each of ``SLOTS`` segment
slots ``alpha / (2 SLOTS)``. Segments take slots in order of their first record (known
before any label is: the order is fixed in advance, as the bound needs); past the
``SLOTS``-th, later segments share the last slot, ``OTHER``. Under a null where every
segment's expected difference is at most the margin, the chance that any of these tests
ever passes it is at most ``alpha / 2 + SLOTS * alpha / (2 SLOTS) = alpha``. With one
declared segment the family is the overall test alone, at ``alpha``. Why a split and not
an e-value mixture: the split names the segment that failed, and where one segment
carries the evidence the mixture's gain is a few records.

**The self-test.** The watch's own records, its recent ``RECENT`` paired differences,
are replayed ``REPLAYS`` times under the hardest null the test must withstand: each
segment's differences centred on its own mean, moved to the margin, each sign flipped at
random (``margin + s_i (d_i - mean_segment)``: every segment's expected difference is
then exactly the margin, with this data's spread). Each replay runs the whole decision
at every record (every record a look: more looks than the runs make), and the share of
replays that would have rolled back is the false-rollback rate the watch would have on
this data, with its 95% Wilson interval. A sound watch keeps it at most ``alpha``.

>>> d = np.array([0.0, 0.1, -0.1] * 200)
>>> figures = judge(d, np.array(["a", "b", "c"] * 200), span=4.6, margin=0.01, alpha=0.05)
>>> figures.regression, [s.name for s in figures.segments or ()]
(False, ['a', 'b', 'c'])
>>> self_test([(d, None, 0.01)], span=4.6, alpha=0.05).replays
200

**The bound.** An anytime-valid bound on a mean of bounded paired differences: the live
watches' test.

The live watch (every judged plugin's)
looks at the served model's paired per-record loss differences from its predecessor at
every run, for as long as it is served. A fixed-sample interval looked at that often
would cross any threshold sooner or later by luck; a *confidence sequence* holds at
every look at once.

This is the predictable plug-in empirical-Bernstein confidence sequence of Waudby-Smith
and Ramdas ("Estimating means of bounded random variables by betting", JRSSB 2024, its
Theorem 2), one-sided at each end. For observations ``x_i`` in ``[0, 1]``::

    mu_hat_t   = (1/2 + sum_{i<=t} x_i) / (t + 1)
    var_hat_t  = (1/4 + sum_{i<=t} (x_i - mu_hat_i)^2) / (t + 1)
    lambda_t   = min(sqrt(2 log(1/alpha) / (var_hat_{t-1} t log(1 + t))), CAP)
    v_t        = 4 (x_t - mu_hat_{t-1})^2,  psi(l) = (-log(1 - l) - l) / 4
    lower_t    = (sum lambda_i x_i - log(1/alpha) - sum v_i psi(lambda_i)) / sum lambda_i

``P(lower_t > mean for some t) <= alpha``, however often it is looked at, whenever each
``x_i``'s expectation given the ones before is at most that mean (Ville's inequality on
a nonnegative supermartingale); the upper bound is the mirror image. Records need not be
identically distributed: under a null where every record's expected difference is at
most the margin, ``lower_t > margin`` at any look is a false alarm with probability at
most ``alpha``. Each ``lambda_i`` uses only the records before ``i``, so the records'
order must be fixed before their outcomes are seen (the watch keeps arrival order).

Differences (nats, or any loss's units) are mapped onto ``[0, 1]`` from ``[-span, span]``.

>>> bound = mean_bounds(np.array([0.3, 0.5, 0.4] * 200), span=4.6, alpha=0.05)
>>> bound.lower > 0.2
True
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec
import numpy as np

from genesis_fp16_infrastructure.agent_folder.candidates import (
    KeptCandidate,
    utc_now,
)
from genesis_fp16_infrastructure.agent_folder.layout import JUDGED_WATCH
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Outcome, Verdict
from genesis_fp16_infrastructure.agent_folder.pointer import ServedPointer
from genesis_fp16_infrastructure.agent_folder.transaction import Transaction, transaction
from genesis_fp16_infrastructure.contract.judging import RecordLosses, at_rows, judging_margin
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError, plugin_name
from genesis_fp16_infrastructure.contract.reports import (
    LiveFigures,
    LiveReport,
    SelfTest,
    WatchSegment,
)
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.errors import ServedPointerError
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.judging.scoring_copy import CheckpointChangedError, losses_of
from genesis_fp16_infrastructure.judging.served import Served
from genesis_fp16_infrastructure.training.checkpoint_load import reusing_loads

logger = logging.getLogger(__name__)

ALPHA = 0.05  # a false rollback's probability over one model's whole watch, at most
LIVE_REGRESSION = "live_regression"


def watch(request: TrainRequest, served: Served) -> LiveReport | None:
    """Score the new records (module docstring), update the figures, roll back on a
    regression. ``served``: the served model as the run read it (a pointer's: its losses
    on the current records, the ids it knew); the predecessor is scored on the new
    records (:func:`~.scoring_copy.losses_of`, logged when it cannot be). Returns the report
    (the run's ``live``), or None when there is nothing to watch: no predecessor, a model
    whose known records are not kept, no new record, or a predecessor that cannot be
    scored."""
    plugin, folder = served.plugin, Path(request.checkpoint_dir)
    name = plugin_name(plugin)
    pointer, served_now, served_known = served.pointer, served.losses, served.known
    assert pointer is not None and served_now is not None  # a pointer's model is scored
    if not pointer.history:
        return None
    served_c = (folder / str(pointer.served.checkpoint)).parent
    previous = pointer.history[0]
    known = [served_known, stores.read_known_ids((folder / str(previous.checkpoint)).parent)]
    if known[0] is None or known[1] is None:
        logger.warning("%s: live watch off: a model's known records are not kept", name)
        return None
    store = JUDGED_WATCH.at(served_c, str(previous.id))
    kept = stores.read_watch(store, served_now.primary)
    ids, new = served_now.id_hashes, np.ones(len(served_now.ids), dtype=bool)
    seen_by = [known[0], known[1], np.sort(kept["ids"])]
    knew = served.scored_knew  # the served model's, as its scoring's listing looked them up
    if knew is not None:
        new, seen_by = ~knew, seen_by[1:]
    for seen in seen_by:  # asked of those still new
        still = np.flatnonzero(new)
        new[still] = ~schema.known(ids[still], seen)
    fresh = _within_bound(name, store, kept, served_now, np.flatnonzero(new).tolist())
    if not fresh:
        return None
    only = [served_now.ids[i] for i in fresh]
    try:
        # In a resident process the predecessor's state is the one kept since it was
        # served (a reusing_loads() block: its bytes hashed and matched, not unpickled)
        with reusing_loads():
            before = losses_of(plugin, folder / str(previous.checkpoint), request, only)
    except CheckpointChangedError:
        raise
    except TrainRequestError as exc:  # the predecessor cannot be scored: logged, not watched
        logger.warning("%s", exc)
        return None
    row = {id_: k for k, id_ in enumerate(before.ids)}
    picked = [i for i in fresh if served_now.ids[i] in row]
    named = served_now.segments
    scored = {
        "ids": ids[picked],
        "segments": np.array(
            ["" if named is None else named[i][: stores.SEGMENT_CHARS] for i in picked], dtype=str
        ),
    }
    rows, missing = [row[served_now.ids[i]] for i in picked], np.full(len(picked), np.nan)
    for metric in served_now.metrics():  # every loss column: a column the predecessor
        theirs = before.losses.get(metric)  # does not score is NaN there (not tested)
        # The new records' losses alone, by the column's array: a record of rows keeps
        # its columns so, and no tuple of every scored record's floats is made
        scored[f"served/{metric}"] = served_now.column_array(metric)[picked]
        scored[f"previous/{metric}"] = (
            missing if theirs is None else np.array(at_rows(theirs, rows), float)
        )
    kept = stores.extend_watch(kept, scored)
    stores.write_watch(store, kept)
    span, metrics = float(plugin.loss_span), served_now.metrics()
    figures = figures_of(kept, span, plugin, metrics, str(previous.id), len(picked))
    return decide_live(folder, name, str(pointer.served.id), figures)


def _within_bound(
    name: str, store: Path, kept: Mapping[str, np.ndarray], losses: RecordLosses, fresh: list[int]
) -> list[int]:
    """The first of the ``fresh`` rows that the store takes within its reader's bound
    (:func:`~.stores.room`), before the predecessor is asked to score them; the rest
    are not watched, said in one line."""
    named = losses.segments
    chars = max((len(named[i][: stores.SEGMENT_CHARS]) for i in fresh), default=1) if named else 1
    columns = [f"{side}/{m}" for m in losses.metrics() for side in ("served", "previous")]
    fits = stores.room(kept, columns, chars, len(fresh))
    if fits < len(fresh):
        bound = stores.decoded_bound(JUDGED_WATCH)
        logger.warning(
            "%s: live watch store %s full: %d new record(s) not watched (the store holds at "
            "most %d bytes decoded, the bound its reader enforces); its figures stand",
            name, store, len(fresh) - fits, bound,
        )  # fmt: skip
    return fresh[:fits]


def rolled_back_to(candidates: Sequence[KeptCandidate], served_id: str | None) -> np.ndarray | None:
    """Issue 92: the records the newest model this watch rolled back to ``served_id`` knew
    (its verdict ``rolled_back``, reason ``live_regression``, watched against
    ``served_id``), as sorted id hashes. The records newer than it, those that showed it
    worse, are the gate's set ``newest`` (judging.run): a candidate trained on the
    records that made it worse is likely worse there again, and its gain elsewhere (the
    poison's own held-out records reward it) must not excuse it, so it must be shown no
    worse there too, a required question (fewer than two such records: ``undecided``
    until more arrive). None: no such model, or its known records are not kept (logged).
    ``candidates``: the folder's, as a judged run's phase read them (no read here)."""
    for kept in reversed(candidates):
        candidate, verdict = kept.path, kept.verdict
        if verdict.outcome != Outcome.ROLLED_BACK or verdict.reason != LIVE_REGRESSION:
            continue
        if verdict.live is None or verdict.live.against != served_id:
            continue
        known = stores.read_known_ids(candidate)
        if known is None:
            logger.warning("rolled-back candidate %s keeps no known records", candidate.name)
            return None
        logger.info("judged on the records newer than %s too (rolled back)", candidate.name)
        return known
    return None


def figures_of(
    kept: Mapping[str, np.ndarray],
    span: float,
    plugin: object,
    metrics: Sequence[str],
    against: str | None = None,
    new_records: int = 0,
) -> LiveReport:
    """The running figures of a watch's records (in arrival order), against the model
    ``against`` with ``new_records`` of them new this run: each loss column's of
    ``metrics`` (the primary first) at ``ALPHA / len(metrics)`` with its own margin, and
    the family's A/A self-test. The model watched and the time are :func:`decide_live`'s to
    say (``served`` is empty until then)."""
    names = _segment_names(kept.get("segments"))
    level, columns, tests = ALPHA / len(metrics), {}, []
    for metric in metrics:
        served = np.asarray(kept.get(f"served/{metric}", []), dtype=np.float64)
        previous = np.asarray(kept.get(f"previous/{metric}", []), dtype=np.float64)
        on = np.isfinite(served) & np.isfinite(previous)  # the records scored on it
        served, previous = np.clip(served[on], 0.0, span), np.clip(previous[on], 0.0, span)
        margin = judging_margin(plugin, float(previous.mean()) if on.any() else 0.0, metric)
        d, segments = served - previous, None if names is None else names[on]
        # Each record's segment (se_darwin: its Genesis agent): the column's test at half
        # its level and each segment's beside it; none declared: the column's test alone.
        columns[metric] = replace(
            judge(d, segments, span, margin, level),
            served_loss=round(float(served.mean()), 6) if on.any() else None,
            previous_loss=round(float(previous.mean()), 6) if on.any() else None,
        )
        tests.append((d, segments, margin))
    return LiveReport(
        served="",
        against=against,
        records=len(kept["ids"]),
        new_records=new_records,
        alpha=ALPHA,
        regression=any(c.regression for c in columns.values()),
        primary=metrics[0],
        metrics=columns,
        self_test=self_test(tests, span, level, seed=len(kept["ids"])),
    )


def _segment_names(segments: np.ndarray | None) -> np.ndarray | None:
    """The records' segment names for the test, None when no record has one; a record
    kept before segments were (an older store), ``(unsegmented)``."""
    if segments is None or not len(segments) or not (segments != "").any():
        return None
    return np.where(segments == "", "(unsegmented)", segments)


def decide_live(
    folder: Path, agent: str, watched: str, figures: LiveReport | Mapping[str, object]
) -> LiveReport:
    """The watch's decision on its ``figures`` of the served model ``watched``
    (:func:`figures_of`'s, or a LiveReport's JSON but what the watch did): write them
    into the pointer, or roll back, under the pointer's lock and only while the model
    watched is still the one served (an operator may have changed it meanwhile: then
    nothing is written). Returns the report: the figures, rolled back (``now_served``)
    or ``held`` and why."""
    if isinstance(figures, LiveReport):
        report = replace(figures, updated_at=utc_now(), served=watched)
    else:
        report = LiveReport.from_json({**figures, "updated_at": utc_now(), "served": watched})
    try:
        with transaction(folder) as tx:
            current = tx.pointer
            if current is None or current.served.id != watched:
                return replace(report, held="the served model changed meanwhile")
            report = _staged(tx, current, report)
    except ServedPointerError:
        return replace(report, held="the pointer changed and cannot be read")
    if report.rolled_back:  # logged once committed
        said = (agent, watched, report.now_served, _detail(report))
        logger.warning("%s: served model %s rolled back to %s: %s", *said)
    elif report.regression:
        logger.warning("%s: live regression of %s held: %s", agent, watched, report.held)
    return report


def _staged(tx: Transaction, current: ServedPointer, report: LiveReport) -> LiveReport:
    """The watch's decision on the model ``current`` serves, staged in ``tx``: the
    rollback, or the figures written into the pointer (its journal and sequence as they
    are); the report as decided."""
    if report.regression and current.pinned is not None:
        report = replace(report, held="pinned by the operator")
    elif report.regression:
        verdict = Verdict(reason=LIVE_REGRESSION, live=report, detail=_detail(report))
        try:
            now = tx.rollback(verdict=verdict)
        except ServedPointerError as exc:  # its predecessor's checkpoint is gone
            report = replace(report, held=str(exc))
        else:
            return replace(report, rolled_back=True, now_served=now.id)
    tx.record_live(msgspec.structs.replace(current.served, live=report))
    return report


def _detail(report: LiveReport) -> str:
    """The rollback's reason in one line: each column that regressed, with its figures."""
    said = [
        f"{metric} {f.served_loss:.6g} vs its predecessor's {f.previous_loss:.6g} on "
        f"{f.records} later record(s), at least {f.lower:.6g} worse (anytime, "
        f"{1 - f.alpha:.1%}), margin {f.margin:.6g}"
        for metric, f in report.metrics.items()
        if f.regression
    ]
    return "live regression: " + "; ".join(said)


CAP = 0.5  # the largest bet; Waudby-Smith and Ramdas suggest 1/2 or 3/4
# -log1p(-lambda) - lambda at lambda = CAP, by the same ufuncs as :func:`_bets`' others
_AT_CAP = float((-np.log1p(np.full(1, -CAP)) - CAP)[0])


@dataclass(frozen=True)
class MeanBounds:
    """The plain mean of the observations and its anytime-valid bounds (each one-sided
    at ``alpha``: together a ``1 - 2 alpha`` interval), in the observations' units;
    ``evidence``: against "the mean is at most the margin", where one was given (else 1)."""

    count: int
    mean: float
    lower: float
    upper: float
    alpha: float
    evidence: float = 1.0


def mean_bounds(
    values: np.ndarray, span: float, alpha: float, margin: float | None = None
) -> MeanBounds:
    """The bounds after the last of ``values`` (in ``[-span, span]``, in arrival order);
    with no values, ``[-span, span]``. With a ``margin``, the evidence too: ``exp`` of
    :func:`log_evidence`'s last entry (at most ``exp(700)``), from the same bets. Cost: a
    few vector passes over the values."""
    d = np.asarray(values, dtype=np.float64)
    n = len(d)
    if n == 0:
        return MeanBounds(0, math.nan, -span, span, alpha)
    x = np.clip((d + span) / (2 * span), 0.0, 1.0)
    lam, penalties = _bets(x, alpha)
    weight = float(np.sum(lam))
    centre = float(np.sum(lam * x)) / weight
    half = (math.log(1.0 / alpha) + float(np.sum(penalties))) / weight
    lower, upper = max(centre - half, 0.0), min(centre + half, 1.0)
    evidence = 1.0
    if margin is not None:
        last = float(_evidence(x, lam, penalties, (margin + span) / (2 * span))[-1])
        evidence = math.exp(min(last, 700))
    return MeanBounds(
        n,
        float(d.mean()),
        lower * 2 * span - span,
        upper * 2 * span - span,
        alpha,
        evidence,
    )


def _bets(x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Each observation's bet ``lambda_t`` and variance term ``v_t psi(lambda_t)``, along
    the last axis of ``x`` (in ``[0, 1]``; one row per sequence). The formulas' steps in
    their order, so their bits, in place: fresh arrays cost the A/A self-test a sixth.

    ``log1p`` is worked out only for the bets under ``CAP``: a watch's loss differences
    are small beside their span, so nearly every bet is capped, and one ``log1p`` an
    element was a fifth of this function's time and more on a loaded host (a 200 x 2,000
    replay, all capped: 12.1 -> 9.4 ms, ``benchmarks/watch_bets_cost.py``). A capped
    bet's term is ``_AT_CAP``, the same value by the same ufuncs; where most bets are
    under it, every one is worked out."""
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mu = np.cumsum(x, axis=-1)
    mu = np.divide(np.add(mu, 0.5, out=mu), t + 1, out=mu)
    var = np.cumsum(np.square(x - mu), axis=-1)
    var = np.divide(np.add(var, 0.25, out=var), t + 1, out=var)
    lam = np.concatenate((np.full((*x.shape[:-1], 1), 0.25), var[..., :-1]), axis=-1)
    lam = np.multiply(np.multiply(lam, t, out=lam), np.log1p(t), out=lam)
    lam = np.minimum(np.sqrt(np.divide(2 * math.log(1.0 / alpha), lam, out=lam), out=lam), CAP)
    v = np.concatenate((np.full((*x.shape[:-1], 1), 0.5), mu[..., :-1]), axis=-1)
    v = np.multiply(np.square(np.subtract(x, v, out=v), out=v), 4, out=v)
    return lam, np.divide(np.multiply(v, _psi_terms(lam), out=v), 4, out=v)


def _psi_terms(lam: np.ndarray) -> np.ndarray:
    """``-log1p(-lam) - lam`` of each bet (:func:`_bets`): ``_AT_CAP`` where it is capped."""
    free = lam < CAP
    count = int(np.count_nonzero(free))
    if 2 * count > lam.size:
        return -np.log1p(-lam) - lam
    terms = np.full(lam.shape, _AT_CAP)
    if count:
        under = lam[free]
        terms[free] = -np.log1p(-under) - under
    return terms


def log_evidence(values: np.ndarray, span: float, alpha: float, margin: float) -> np.ndarray:
    """The running log e-value against "the mean is at most ``margin``", after each of
    ``values`` (last axis; a 2-D array is one sequence per row). It is the bound's own
    supermartingale: ``lower_t > margin`` exactly when it passes ``log(1 / alpha)``, so
    ``exp`` of the last entry is the evidence so far, on the scale where ``1 / alpha``
    decides. Cost: a few vector passes.

    >>> steps = log_evidence(np.array([0.3] * 400), span=4.6, alpha=0.05, margin=0.01)
    >>> bool(steps[-1] > math.log(20)), bool(steps[10] > math.log(20))
    (True, False)
    """
    d = np.asarray(values, dtype=np.float64)
    if d.shape[-1] == 0:
        return np.zeros(d.shape)
    x = np.clip((d + span) / (2 * span), 0.0, 1.0)
    return _evidence(x, *_bets(x, alpha), (margin + span) / (2 * span))


def _evidence(x: np.ndarray, lam: np.ndarray, penalty: np.ndarray, m: float) -> np.ndarray:
    """:func:`log_evidence`'s path from the observations ``x`` (in ``[0, 1]``, overwritten:
    np.clip made them), their bets (:func:`_bets`) and the margin ``m`` on their scale."""
    np.multiply(np.subtract(x, m, out=x), lam, out=x)
    return np.cumsum(np.subtract(x, penalty, out=x), axis=-1, out=x)


WIDTH = 1.4  # the bound's half-width over sigma sqrt(2 log(1/alpha) / n), from 3,000 records on


def records_needed(bounds: MeanBounds, spread: float, margin: float) -> int | None:
    """About how many more records the bounds need before one of them passes ``margin``
    (the watch then decides: worse, or shown no worse), if the mean and the spread
    (``spread``: the differences' standard deviation) so far hold. The half-width tends
    to about ``WIDTH * spread * sqrt(2 log(1/alpha) / n)`` (measured: 1.35-1.45 from
    3,000 to 20,000 records; wider before, so an early estimate is low). 0 when a bound
    already passed it; None with no records, or a mean at the margin (never, at this mean).

    >>> records_needed(MeanBounds(400, 0.05, 0.0, 0.1, 0.05), spread=0.4, margin=0.01)
    775
    """
    gap = abs(bounds.mean - margin)
    if bounds.count == 0 or gap == 0 or math.isnan(gap) or math.isnan(spread):
        return None
    if bounds.lower > margin or bounds.upper < margin:
        return 0
    total = 2 * math.log(1 / bounds.alpha) * (WIDTH * spread / gap) ** 2
    return max(math.ceil(total) - bounds.count, 1)


SLOTS = 16  # segment slots, each at alpha / (2 SLOTS); a 17th segment shares the 16th
OTHER = "(other)"  # the last slot's name once more segments than slots arrived
REPLAYS = 200  # self-test replays per run: 0 of 200 puts the rate's upper bound at 1.9%
RECENT = 2000  # the self-test replays the watch's last records, at most this many
# The self-test's replays are worked out a block of them at a time, about this many bytes
# a block: every step of a block's bets then runs on arrays a core's cache holds, where
# 200 replays of 2,000 records (3.2 MB an array) went to memory at each of ~30 steps.
REPLAY_BYTES = 2**18
_Z = 1.959964  # the 95% interval's normal quantile


def slots(names: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The segments' names, in order of their first record (past ``SLOTS``, the last
    is ``OTHER``), and each record's slot."""
    order, first, codes = np.unique(np.asarray(names), return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))  # unique()'s i-th name is the rank[i]-th to arrive
    slot = np.minimum(rank, SLOTS - 1)
    shown = [""] * min(len(order), SLOTS)
    for name, s in zip(order.tolist(), slot.tolist(), strict=True):
        shown[s] = OTHER if s == SLOTS - 1 and len(order) > SLOTS else str(name)
    return shown, slot[codes]


def judge(
    differences: np.ndarray,
    names: np.ndarray | None,
    span: float,
    margin: float,
    alpha: float,
) -> LiveFigures:
    """One column's figures at its level ``alpha``: the overall bounds, evidence and
    records needed (at ``alpha / 2`` when split), and each segment's (``names``: each
    record's segment; None: one segment, no split)."""
    d = np.asarray(differences, dtype=np.float64)
    overall = _test(d, span, margin, alpha if names is None else alpha / 2)
    segments: tuple[WatchSegment, ...] | None = None
    if names is not None:
        shown, slot = slots(names)
        level = alpha / (2 * SLOTS)
        segments = tuple(
            _test(d[slot == k], span, margin, level, name) for k, name in enumerate(shown)
        )
    return LiveFigures(
        records=overall.records,
        difference=overall.difference,
        lower=overall.lower,
        upper=overall.upper,
        margin=margin,
        alpha=alpha,
        regression=overall.regression or any(s.regression for s in segments or ()),
        evidence=overall.evidence,
        records_needed=overall.records_needed,
        segments=segments,
    )


def _test(d: np.ndarray, span: float, margin: float, alpha: float, name: str = "") -> WatchSegment:
    """One test's figures at its own level: bounds, evidence (``1 / alpha`` decides),
    records needed at the margin, and whether the lower bound passed it (``name``: the
    segment's; the column's own test has none)."""
    bounds = mean_bounds(d, span, alpha, margin)  # the bets worked once, for both
    return WatchSegment(
        name=name,
        records=bounds.count,
        difference=round(bounds.mean, 6) if bounds.count else None,
        lower=round(bounds.lower, 6),
        upper=round(bounds.upper, 6),
        alpha=alpha,
        evidence=float(f"{bounds.evidence:.6g}"),
        records_needed=records_needed(bounds, float(d.std()) if len(d) else math.nan, margin),
        regression=bool(bounds.lower > margin),
    )


def self_test(
    columns: Sequence[tuple[np.ndarray, np.ndarray | None, float]],
    span: float,
    alpha: float,
    replays: int = REPLAYS,
    seed: int = 0,
) -> SelfTest:
    """The A/A self-test (module docstring) of the loss columns of the same records, each
    ``(differences, names, margin)`` and tested at ``alpha``, on their last ``RECENT``
    records: how many of ``replays`` would have rolled back on any column (each record's
    sign flipped alike in every column), the rate and its 95% interval."""
    crossed, records, flips = np.zeros(replays, dtype=np.bool_), 0, {}
    for differences, names, margin in columns:
        d = np.asarray(differences, dtype=np.float64)[-RECENT:]
        slot = np.zeros(len(d), dtype=np.int64) if names is None else slots(names[-RECENT:])[1]
        records = max(records, len(d))
        if not len(d):
            continue
        centred = d - (np.bincount(slot, d) / np.bincount(slot))[slot]
        if len(d) not in flips:  # the same draws for each column of as many records
            flips[len(d)] = np.random.default_rng(seed).choice((-1.0, 1.0), (replays, len(d)))
        # Each segment's records side by side, in their order: its test a slice of them
        order, edges = None, []
        if names is not None:
            order = np.argsort(slot, kind="stable")
            edges = np.searchsorted(slot[order], np.arange(int(slot.max()) + 2)).tolist()
        rows = max(1, REPLAY_BYTES // (8 * len(d)))
        for first in range(0, replays, rows):  # a block of replays at a time (each its own)
            replay = np.clip(margin + flips[len(d)][first : first + rows] * centred, -span, span)
            block = crossed[first : first + rows]
            block |= _crosses(replay, span, margin, alpha if names is None else alpha / 2)
            grouped = replay if order is None else replay[:, order]
            for low, high in itertools.pairwise(edges):
                block |= _crosses(grouped[:, low:high], span, margin, alpha / (2 * SLOTS))
    false = int(crossed.sum())
    lower, upper = wilson(false, replays)
    return SelfTest(
        replays=replays,
        records=records,
        false_rollbacks=false,
        rate=round(false / replays, 6),
        lower=round(lower, 6),
        upper=round(upper, 6),
    )


def _crosses(replay: np.ndarray, span: float, margin: float, alpha: float) -> np.ndarray:
    """Per row: whether the test at ``alpha`` would have passed the margin at any record."""
    if replay.shape[1] == 0:
        return np.zeros(len(replay), dtype=np.bool_)
    path = log_evidence(replay, span, alpha, margin)
    return np.asarray((path > math.log(1.0 / alpha)).any(axis=1))


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate.

    >>> [round(x, 4) for x in wilson(0, 200)]
    [0.0, 0.0188]
    """
    if trials == 0:
        return 0.0, 1.0
    p, z2 = successes / trials, _Z * _Z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = _Z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return max(centre - half, 0.0), min(centre + half, 1.0)
