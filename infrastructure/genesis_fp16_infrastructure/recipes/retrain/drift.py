"""Drift and label shift of the records new since the served model's training.

On a changed-data run, the records whose (id, label, attempt) the served model never saw
(new, relabelled or edited; ``DataFingerprint.labelled``) are compared with the records
it trained on that the pool still holds:

* each numeric feature (``NUMERIC_FEATURES``, unscaled): Jensen-Shannon distance (base 2,
  0 to 1) between histograms on the reference's deciles;
* each categorical one (agent, operator, reasoning pattern, tool): L-infinity distance,
  the largest change of one category's share;
* the success base rate: new minus reference.

Thresholds come from the noise of this run's own sizes, measured: ``NOISE_DRAWS`` samples
of as many reference records as there are new ones, each scored against the reference
the same way; a feature is flagged when its distance passes max(``MIN_DISTANCE``, 2 ×
the largest draw).

What it costs grows with the new records, not with the pool. The reference (sampled by
record hash past ``DRIFT_SAMPLE``) is each numeric feature's values in order, which give
its deciles (``torch.quantile``'s, bit for bit) and its bins' shares (a binary search per
bin bound), and each categorical feature's count of every code; the code x category
tables are built once for both sides, in C (:mod:`.drift_categories`). The new records
are binned; each noise draw's records are gathered from the reference's numbers and
binned, so that what the draws count is what is new, times ``NOISE_DRAWS``, whatever the
reference's size (a reference of fewer records than are drawn: each binned once, its
bins gathered); every draw's shares are one bincount of its records' bins per feature,
all draws at once, with no Python pass per draw or per record. Every feature is binned,
bounded and counted at once, against one matrix of bounds, not one numpy or torch call
per feature (:func:`_binned_by`, :func:`_edges`, :func:`_sorted_shares`). The pool itself
is only counted (the success rates) and looked up in (which records are new:
:mod:`.new_records`; none of it when the pool grew at its end, checked by two sums), in
numpy. The same draws, distances and flags, bit for bit, as one pass per draw
(``tests/infrastructure/recipes/retrain/test_drift_pinned.py`` and
``test_drift_cost_of_new.py``). A NaN among the numbers is refused (a ValueError naming
the feature).

In a resident run process (``keep_in_memory_bytes``: :mod:`~genesis_fp16_infrastructure.
kept_in_memory`) the reference of the pool's first labelled records (the served model's,
when the pool grew at its end) is kept from one run to the next and grown by the records
past it: measured once (a run with no served model keeps its pool's:
:func:`keep_reference`), then each run over a promoted model adds the last run's new
records alone, and each run over the same model takes it as kept. It is checked against
what it was made of before use, every record hash, categorical value and sampled number
compared; a relabel, an edit, a removal, a number moved, another sample is a mismatch:
measured again, counted (:data:`KEPT`) and logged (:mod:`.drift_reference`). Taken, grown
or measured, the report is the same, bit for bit: the same records' values. Which
records are new is kept beside it when the pool did not grow at its end, checked record
by record (:mod:`.new_records`), and so is the tool lists' table, used when this pool's
distinct lists begin with those it was made of (each compared), grown by the lists past
them (:mod:`.drift_categories`).

The label shift is flagged past max(0.05, 3 standard errors of the difference of two
rates). Vertex AI and Evidently use fixed thresholds (0.1 by default); a fixed one flags
small batches for their noise alone.

>>> report = drift_report(data.columns, served_fingerprint)  # doctest: +SKIP
>>> report.flagged, report.label_shift  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

import numpy as np
import torch

from genesis_fp16_infrastructure.contract.reports import DriftReport
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.recipes.retrain.drift_categories import Categorical as _Categorical
from genesis_fp16_infrastructure.recipes.retrain.drift_categories import categorical, tables
from genesis_fp16_infrastructure.recipes.retrain.drift_reference import (
    KEPT,
    Reference,
    SortedValues,
    feature_major,
    in_sample,
    measured,
    numbers_of,
    prefix_reference,
    refuse_nan,
    sample_level,
)
from genesis_fp16_infrastructure.recipes.retrain.new_records import (
    new_among,
    new_at_end,
    new_records,
    sorted_labelled,
)
from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES

NOISE_DRAWS = 20
MIN_DISTANCE = 0.1  # Evidently's default: below it, no batch size flags a feature
MIN_LABEL_SHIFT = 0.05
MIN_NEW = 20  # fewer new records: no report (every distance would be noise)
# The most records of either side the distances are measured on, about (the label shift
# counts them all): the new records a random sample past it, the reference a sample by
# record hash that grows with it (drift_reference). Binning a 990,000-record reference
# took 26 s of a 1,000,000-record run; 50,000 records put a decile's share within about
# 0.003.
DRIFT_SAMPLE = 50_000
# The most (feature, draw, bin) keys one bincount of the draws' shares counts: 8 MiB
# of int32 keys, whatever the draws' size.
SHARE_KEYS = 2**21
DRAW_ROWS = 8192  # drawn records gathered and binned at a time: 1.9 MB of float64 numbers
KIND = "drift reference"  # the key's first part the served model's records are kept by
__all__ = ["KEPT", "drift_report", "keep_reference"]
logger = logging.getLogger(__name__)


def drift_report(
    columns: PoolColumns,
    served: DataFingerprint | None,
    seed: int = 0,
    numeric: torch.Tensor | None = None,
    keep_in_memory_bytes: int | None = None,
    stamp: np.ndarray | None = None,
) -> DriftReport | None:
    """The run's ``drift`` report on a read's records
    (``ReadResult.columns``; its examples are never built), or None without a served
    model's fingerprint or with under ``MIN_NEW`` new records. ``numeric``:
    ``numeric_columns`` of the read's examples, when the caller has them (else they
    are built for the records measured alone). A NaN among them is a ValueError that
    names the feature. ``keep_in_memory_bytes``: the request's; past 0 the reference
    is kept for the next run and grown by it (``drift_reference``). ``stamp``: the
    stamps of ``numeric``'s rows (``KeptNumeric.stamps_of``), when sound."""
    if served is None:
        return None
    # What is kept under this key is checked before it is used: the key only names it
    key = (KIND, served.digest, served.records, len(served.labelled))
    is_new = new_at_end(columns, served)  # the pool grew at its end: no search
    at_end = is_new is not None
    among = None if at_end else new_among(columns, served)  # laid among the old: no search
    if among is not None:
        is_new = among
    elif is_new is None:
        ordered = sorted_labelled(served, key, keep_in_memory_bytes)
        is_new = new_records(columns, ordered, key, keep_in_memory_bytes)
    new_rows = torch.from_numpy(np.flatnonzero(is_new))
    n_new = len(new_rows)
    n_ref = len(is_new) - n_new
    if n_new < MIN_NEW or n_ref < MIN_NEW:
        return None
    shift, shift_threshold = _label_shift(columns, new_rows.numpy())
    generator = torch.Generator().manual_seed(seed)
    new_rows = _sample(new_rows, generator)
    features = tables(columns, keep_in_memory_bytes)  # built once, for both sides
    level = sample_level(n_ref, DRIFT_SAMPLE)
    if at_end or among is not None:  # kept, checked and grown in a resident process
        at = None if at_end else np.flatnonzero(~is_new)  # the pool's first records, or these
        ref = prefix_reference(
            columns, numeric, n_ref, level, features, keep_in_memory_bytes, stamp, at
        )
    else:
        rows = np.flatnonzero(~is_new)
        ref = measured(columns, numeric, rows[in_sample(columns.key[rows], level)], features)
    reference = _Reference.of(ref, features, columns)
    new_cols = torch.from_numpy(numbers_of(columns, numeric, new_rows.numpy()))
    distances = reference.distances(categorical(features, columns, new_rows), new_cols)
    noise = _noise(reference, len(new_rows), seed)
    thresholds = {k: max(MIN_DISTANCE, 2 * noise[k]) for k in distances}
    flagged = sorted(k for k, d in distances.items() if d > thresholds[k])
    return DriftReport(
        new_records=n_new,
        reference_records=n_ref,
        sampled={"new": len(new_rows), "reference": reference.records},
        features={k: round(v, 4) for k, v in distances.items()},
        thresholds={k: round(v, 4) for k, v in thresholds.items()},
        flagged=tuple(flagged),
        label_shift=round(shift, 4),
        label_shift_threshold=round(shift_threshold, 4),
        label_shift_flagged=abs(shift) > shift_threshold,
    )


def keep_reference(
    columns: PoolColumns,
    numeric: torch.Tensor | None,
    keep_in_memory_bytes: int | None,
    stamp: np.ndarray | None = None,
) -> None:
    """In a resident process (a budget past 0), the reference of every labelled record of
    this read measured (or grown) and kept: what a later run's report over a model trained
    on these records starts from (a run with no served model, or its data unchanged,
    reports no drift). Nothing without a budget. ``stamp``: as :func:`drift_report`'s."""
    records = len(columns.labelled)
    if (keep_in_memory_bytes or 0) <= 0 or records < MIN_NEW:
        return
    features = tables(columns, keep_in_memory_bytes)
    level = sample_level(records, DRIFT_SAMPLE)
    prefix_reference(columns, numeric, records, level, features, keep_in_memory_bytes, stamp)


class _Measured(NamedTuple):
    """The reference's numeric side: each feature's bin bounds, the bins' padded width,
    the reference's shares (feature x bin), its values in order, and the bounds as one
    matrix (feature x bound, float64, +inf past a feature's own: :func:`_padded`)."""

    bounds: list[torch.Tensor]
    width: int
    shares: torch.Tensor
    ordered: SortedValues
    padded: np.ndarray

    @classmethod
    def of(cls, values: torch.Tensor) -> _Measured:
        """Measured from ``values`` (feature x record, float32 as the features are, or
        float64): one numpy sort of each row (:meth:`of_sorted`). A NaN is refused."""
        refuse_nan(values.numpy().T)
        return cls.of_sorted(SortedValues.of(values.numpy()))

    @classmethod
    def of_sorted(cls, ordered: SortedValues) -> _Measured:
        """Measured from each feature's values in order: its deciles (``torch.quantile``'s,
        bit for bit: each the values at two ranks, lerped) and its bins' shares (how many
        are at most each bound: a binary search per bound, not a pass over the values).
        float32 values are taken as they are, the deciles lerped in float64 and each
        comparison exact (:func:`_at_most`): the same bounds and shares, bit for bit, as
        of their float64 copy."""
        records = ordered.records
        q = torch.linspace(0, 1, 11, dtype=torch.float64)
        ranks = q * (records - 1)
        below, above = ranks.long(), ranks.ceil().long()
        at = torch.from_numpy(ordered.at(torch.cat([below, above]).numpy()))
        low, high = at[:, : len(q)].double(), at[:, len(q) :].double()
        # One lerp a feature, as torch.quantile does: a batched lerp may round otherwise
        deciles = [a.lerp(b, ranks - below) for a, b in zip(low, high, strict=True)]
        bounds = _edges(torch.stack(deciles).numpy()) if deciles else []
        padded = _padded(bounds)
        return cls(bounds, padded.shape[1] + 1, _sorted_shares(ordered, padded), ordered, padded)


class _Reference:
    """The served model's records, measured once (:mod:`.drift_reference`): each numeric
    feature's bin bounds and shares; each categorical feature's codes and counts. Every
    distance is taken against it, of one set of records or of a batch of draws of its
    own records (:meth:`largest_draw_distances`: one pass over the draws, not one each, binning
    the records drawn alone: what is counted is what is new, times ``NOISE_DRAWS``)."""

    def __init__(
        self,
        categorical: dict[str, _Categorical],
        measured: _Measured,
        numbers: np.ndarray | None = None,
        counts: dict[str, torch.Tensor] | None = None,
    ) -> None:
        self.records = measured.ordered.records
        self.bounds = measured.bounds
        self.padded = measured.padded  # feature x bound: what the records are binned by
        self.width = measured.width
        self.numeric = measured.shares  # feature x bin
        self.numbers = numbers  # record x feature: what the draws are drawn from
        self.categorical = categorical
        if counts is None:
            everyone = torch.arange(self.records)[None]
            counts = {k: c.counts(everyone)[0] for k, c in categorical.items()}
        self.counts = counts
        self.seen = {k: c > 0 for k, c in self.counts.items()}  # the reference's categories

    @classmethod
    def of(
        cls, ref: Reference, features: dict[str, _Categorical], columns: PoolColumns
    ) -> _Reference:
        """A measured reference's: its categorical counts the codes' counts times each
        table (exact, in float64 integers), its draws' codes gathered through its rows'
        places in the pool (looked up once, not once a feature)."""
        counts = {}
        for name, t in features.items():
            per_code = torch.from_numpy(ref.per_code[name].astype(np.float64))
            counts[name] = per_code if t.table is None else per_code @ t.table
        places = (np.take(columns.labelled, ref.rows),)
        drawn = {name: t._replace(rows=places) for name, t in features.items()}
        return cls(drawn, _Measured.of_sorted(ref.ordered), ref.numbers, counts)

    def _bin(self, values: torch.Tensor) -> torch.Tensor:
        """Each record's bin of each feature (``values`` and the result: feature x
        record): :func:`_binned`, as a tensor."""
        return torch.from_numpy(_binned_by(values.numpy(), self.padded).astype(np.int64))

    def _drawn_bins(self, picked: torch.Tensor) -> np.ndarray:
        """The bins (feature x drawn record, uint8, in ``picked``'s order: draw x record,
        rows of the reference's numbers) of the records drawn: where the reference holds
        fewer records than are drawn (a 10,000-record pool's 9,000 against 20 draws of
        1,000), each of its records binned once and the bins gathered; else the records
        drawn alone binned (:meth:`_binned_rows`). The same bins either way: a value's
        bin is its own."""
        at = picked.numpy().ravel()
        if self.records <= len(at):
            return np.take(self._binned_rows(np.arange(self.records)), at, axis=1)
        return self._binned_rows(at)

    def _binned_rows(self, at: np.ndarray) -> np.ndarray:
        """The bins (feature x record, uint8) of the reference's records ``at`` (rows of
        its numbers): their numbers gathered and binned ``DRAW_ROWS`` records at a time,
        in their own type (the bins the reference's own values have), into one buffer
        each block reuses: what a block holds stays in cache, and no array of every
        record's numbers is made (20,000 of them: 4.6 MB, twice, each page a fault)."""
        assert self.numbers is not None, "a reference without its records' numbers"
        out = np.empty((len(self.padded), len(at)), dtype=np.uint8)
        rows = np.empty((min(DRAW_ROWS, len(at)), self.numbers.shape[1]), self.numbers.dtype)
        for start in range(0, len(at), DRAW_ROWS):
            block = at[start : start + DRAW_ROWS]
            # "clip" is never used (every row asked is below the reference's size);
            # numpy's default "raise" would copy the buffer first
            np.take(self.numbers, block, axis=0, out=rows[: len(block)], mode="clip")
            drawn = feature_major(rows[: len(block)])
            out[:, start : start + len(block)] = _binned_by(drawn, self.padded)
        return out

    def _shares(self, bins: np.ndarray, draws: int) -> torch.Tensor:
        """Each feature's bin shares of each draw (``bins``: feature x drawn record, the
        draws one after another): feature x draw x bin, each feature's bins padded to one
        width with empty ones (an empty bin adds nothing to a distance). One bincount
        over as many features' (feature, draw, bin) keys as hold :data:`SHARE_KEYS` at
        most, not one a feature (29 of them: 5 ms of 8 in a 10,000-record pool's noise
        draws, issue 90); each key its bin plus one offset per (feature, draw), added
        once. The keys are int32 and counted by torch, which counts them as they are
        (numpy's bincount copies them to int64 first: 1.0 ms of CPU for 20 draws of
        1,000 records, against 0.6)."""
        features, total = bins.shape
        width, size = self.width, total // max(1, draws)
        step = max(1, SHARE_KEYS // max(1, total))  # features a bincount
        counts = np.empty((features, draws * width), dtype=np.int64)
        for start in range(0, features, step):
            part = bins[start : start + step].reshape(-1, draws, size)
            feature = np.arange(len(part), dtype=np.int32)[:, None, None] * draws
            offsets = (feature + np.arange(draws, dtype=np.int32)[None, :, None]) * width
            keys = torch.from_numpy((part + offsets).ravel())  # a uint8 bin widened
            found = torch.bincount(keys, minlength=len(part) * draws * width)
            counts[start : start + len(part)] = found.numpy().reshape(len(part), draws * width)
        out = torch.from_numpy(counts.reshape(features, draws, width).astype(np.float64))
        return out / out.sum(-1, keepdim=True)

    def numeric_distances(self, shares: torch.Tensor) -> torch.Tensor:
        """Jensen-Shannon distance of each feature's shares (feature x draw x bin) from
        the reference's: feature x draw."""
        return _js(self.numeric[:, None], shares)

    def categorical_distance(self, name: str, counts: torch.Tensor) -> torch.Tensor:
        """L-infinity between the reference's shares and each row's of ``counts`` (draw x
        category), the categories the reference never had counted as one: per draw. In
        numpy (a dozen torch calls were 0.1 ms of CPU a feature): each share an integer
        over an integer, in float64, so the same distances bit for bit."""
        seen, p = self.seen[name].numpy(), self.counts[name].numpy()
        p = np.concatenate([p[seen], np.zeros(1)])
        rows = counts.numpy()
        rows = np.concatenate([rows[:, seen], rows[:, ~seen].sum(1, keepdims=True)], 1)
        total, p_total = rows.sum(1, keepdims=True), p.sum()
        if not p_total:
            return torch.from_numpy((total[:, 0] > 0).astype(np.float64))  # 0 where both are empty
        with np.errstate(invalid="ignore"):  # an empty row: 0 / 0, replaced by 1 below
            far = np.abs(p / p_total - rows / total).max(1)
        return torch.from_numpy(np.where(total[:, 0] > 0, far, 1.0))

    def distances(
        self, categorical: dict[str, _Categorical], cols: torch.Tensor
    ) -> dict[str, float]:
        """The distances of other records (the new ones) from the reference."""
        everyone = torch.arange(cols.shape[0])[None]
        bins = _binned_by(cols.T.double().contiguous().numpy(), self.padded)
        numeric = self.numeric_distances(self._shares(bins, 1))
        out = dict(zip(NUMERIC_FEATURES, numeric[:, 0].tolist(), strict=True))
        for name, coded in categorical.items():
            out[name] = float(self.categorical_distance(name, coded.counts(everyone))[0])
        return out

    def largest_draw_distances(self, picked: torch.Tensor) -> dict[str, float]:
        """The largest distance of a draw of its own records (``picked``: draw x record,
        rows of the reference) from the whole of it, per feature. Only the records drawn
        are gathered and binned, whatever the reference's size (:meth:`_drawn_bins`)."""
        numeric = self.numeric_distances(self._shares(self._drawn_bins(picked), len(picked)))
        out = dict(zip(NUMERIC_FEATURES, numeric.max(1).values.tolist(), strict=True))
        for name, coded in self.categorical.items():
            out[name] = float(self.categorical_distance(name, coded.counts(picked)).max())
        return out


def _noise(reference: _Reference, size: int, seed: int) -> dict[str, float]:
    """The largest distance of ``NOISE_DRAWS`` reference samples of ``size`` records,
    drawn with replacement all at once (the same draws as one ``randint`` per sample:
    the generator's stream is consumed in the same order) and binned in one pass."""
    generator = torch.Generator().manual_seed(seed)
    n = reference.records
    picked = torch.randint(n, (NOISE_DRAWS, size), generator=generator)
    return reference.largest_draw_distances(picked)


def _binned(values: np.ndarray, bounds: list[torch.Tensor]) -> np.ndarray:
    """Each value's bin (``values`` and the result: feature x record, uint8: a bin is 12
    at most): how many of its feature's ``bounds`` are below it, which is where
    ``torch.bucketize`` puts it (the bounds ascend; a NaN is refused before)."""
    return _binned_by(values, _padded(bounds))


def _binned_by(values: np.ndarray, padded: np.ndarray) -> np.ndarray:
    """:func:`_binned` by the bounds as one matrix (:func:`_padded`): one numpy comparison
    per column of bounds, a dozen at most, of every feature at once (each record against
    its feature's bound: a column), into one buffer, added as bytes; a bound of +inf is
    below no value and adds nothing. A dozen calls, not one per feature and bound (348:
    0.35 ms of CPU for 1,000 new records, most of it the calls, issue 90); 2.5 ms of CPU
    for 50,000 records where int64 sums took 10 and ``bucketize``'s binary searches
    more."""
    out = np.zeros(values.shape, dtype=np.uint8)
    above = np.empty(values.shape, dtype=np.bool_)
    for column in _at_most(padded, values.dtype).T:  # x > bound, exactly: _at_most
        np.greater(values, column[:, None], out=above)
        out += above.view(np.uint8)
    return out


def _padded(bounds: list[torch.Tensor]) -> np.ndarray:
    """Each feature's ``bounds`` (float64, ascending) as a row of one matrix (feature x
    bound), past its own +inf: a bound no value is above, and that every value is at
    most."""
    out = np.full((len(bounds), max((len(b) for b in bounds), default=0)), np.inf)
    for row, b in zip(out, bounds, strict=True):
        row[: len(b)] = b.numpy()
    return out


def _at_most(bounds: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Each of ``bounds`` (float64) as the largest value of ``dtype`` at most it, so that
    for any value ``x`` of that type, ``x > bound`` is ``x > _at_most(bound)`` (float64:
    the bounds themselves). A float32 ``x`` above a bound between two float32 values
    ``r < bound < r'`` is at least ``r'``, so above ``r``; at or below it, at most ``r``
    (numpy would round the bound to nearest, which can be ``r'``); +inf stays +inf."""
    if dtype == np.float64:
        return bounds
    with np.errstate(over="ignore"):  # past float32's range: inf, stepped down below
        near = bounds.astype(dtype)
    over = near.astype(np.float64) > bounds
    near[over] = np.nextafter(near[over], dtype.type(-np.inf))
    return near


def _edges(deciles: np.ndarray) -> list[torch.Tensor]:
    """The bins' edges of each feature (``deciles``: feature x decile, float64): its
    distinct deciles, with a bin of their own below the smallest value and above the
    largest: a feature of a few values (a flag, a small count) is compared value by
    value, and new values outside the reference's range are never hidden among its
    extremes. Sorted and made distinct for every feature at once (``torch.unique`` a
    feature cost 0.4 ms of CPU for 29): -0.0 and 0.0 are one value, as they are to
    ``unique``, and either is compared alike."""
    ordered = np.sort(deciles, axis=1)
    distinct = np.ones(ordered.shape, dtype=np.bool_)
    np.not_equal(ordered[:, 1:], ordered[:, :-1], out=distinct[:, 1:])
    below = np.nextafter(ordered[:, 0], -np.inf)
    # x <= below | (below, e0] | ... | (e_last, inf)
    return [
        torch.from_numpy(np.concatenate([below[i : i + 1], row[keep]]))
        for i, (row, keep) in enumerate(zip(ordered, distinct, strict=True))
    ]


def _sorted_shares(ordered: SortedValues, padded: np.ndarray) -> torch.Tensor:
    """Each feature's bin shares (feature x bin, one more bin than ``padded``'s bounds)
    of its values in order: bin j holds bounds[j - 1] < x <= bounds[j], where
    ``bucketize`` puts a value, so its count is how many are at most bounds[j] less how
    many are at most bounds[j - 1]: a binary search per bound, not a pass over the
    records; a padded bound (+inf) has every value at most it, and its bin none."""
    records = ordered.records
    bounds = _at_most(padded, ordered.base.dtype)  # at most a bound: at most its _at_most
    at_most = np.empty((len(bounds), bounds.shape[1] + 2), dtype=np.int64)
    at_most[:, 0], at_most[:, -1] = 0, records
    for i, row in enumerate(bounds):
        at_most[i, 1:-1] = ordered.at_most(i, row)
    out = torch.from_numpy(np.diff(at_most, axis=1).astype(np.float64))
    return out / out.sum(-1, keepdim=True)


def _js(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon distance (base 2) along the last dimension."""
    m = (p + q) / 2
    divergence = 0.5 * (_kl(p, m) + _kl(q, m))
    return divergence.clamp(min=0.0).sqrt()


def _kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL divergence (base 2) along the last dimension; an empty bin of ``p`` adds 0."""
    return torch.where(p > 0, p * (p / q).log2(), 0.0).sum(-1)


def _sample(rows: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``rows``, or ``DRIFT_SAMPLE`` of them drawn without replacement, in pool order."""
    if len(rows) <= DRIFT_SAMPLE:
        return rows
    picked = torch.randperm(len(rows), generator=generator)[:DRIFT_SAMPLE]
    # Distinct positions: one sorted order, numpy's (0.4 ms of CPU for 50,000; torch's 1.9)
    return rows[torch.from_numpy(np.sort(picked.numpy()))]


def _label_shift(columns: PoolColumns, new_rows: np.ndarray) -> tuple[float, float]:
    """New minus reference success rate over every record, and its threshold: the new
    records' successes counted, the reference's the rest of the pool's (one count of a
    boolean column: no pass that builds a tensor of the pool, 0.8 ms of CPU at 100,000
    records before). The same rates, bit for bit: each is an integer over an integer."""
    n_new = len(new_rows)
    n_ref = len(columns.success) - n_new
    s_new = int(np.count_nonzero(columns.success[new_rows]))
    p_new = s_new / n_new
    p_ref = (int(np.count_nonzero(columns.success)) - s_new) / n_ref
    pooled = (p_ref * n_ref + p_new * n_new) / (n_ref + n_new)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_ref + 1 / n_new))
    return p_new - p_ref, max(MIN_LABEL_SHIFT, 3 * se)
