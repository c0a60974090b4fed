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

What it costs grows with the new records, not with the pool. The reference (sampled past
``DRIFT_SAMPLE``) is measured once: each numeric feature's values sorted in one numpy
sort, which gives its deciles (``torch.quantile``'s, bit for bit) and its bins' shares
(a binary search per bin bound), and each of its records binned once (comparisons, as
bytes); each categorical feature's code x category table is built once for both sides,
in C. The new records are binned; the draws' bins are gathered from the reference's, so
that what the draws count is what is new, times ``NOISE_DRAWS``, whatever the
reference's size; every draw's shares are one bincount of its records' bins per
feature, all draws at once, with no Python pass per draw or per record. The pool itself
is only counted (the success rates) and looked up in (which records are new:
:mod:`.new_records`; none of it when the pool grew at its end, checked by two sums), in
numpy. The same draws, distances and flags, bit for bit, as one
pass per draw (``tests/infrastructure/recipes/retrain/test_drift_pinned.py`` and
``test_drift_cost_of_new.py``). A NaN among the numbers is refused (a ValueError naming
the feature).

In a resident run process (``keep_in_memory_bytes``: :mod:`~genesis_fp16_infrastructure.
kept_in_memory`) the reference's numeric side (deciles, bin bounds, shares and each
record's bins) is kept from one run to the next, keyed by the served model (its digest
and sizes: a name, never believed) and checked against what it was made of: the
reference sample's numbers as the run gave them, value for value (numpy's comparison
of the gathered rows: about 2 ms of CPU at 50,000 records). The next run over the same
served model, with records only added, finds them equal and sorts and bins nothing; a
relabel, edit or removal (which moves a record out of the reference or changes a
record's lineage numbers), another served model (a promotion, a rollback) or another
sample is a mismatch: the reference is measured again, counted (:data:`KEPT`) and
logged. Taken or measured, the report is the same, bit for bit: it is the same values'
sort and bins. Which records are new is kept beside it, checked record by record
(:mod:`.new_records`), and so is the tool lists' table, used when this pool's distinct
lists begin with those it was made of (each compared), grown by the lists past them
(:mod:`.drift_categories`).

The label shift is flagged past max(0.05, 3 standard errors of the difference of two
rates). Vertex AI and Evidently use fixed thresholds (0.1 by default); a fixed one flags
small batches for their noise alone.

>>> report = drift_report(data.columns, served_fingerprint)  # doctest: +SKIP
>>> report.flagged, report.label_shift  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import NamedTuple

import numpy as np
import torch

from genesis_fp16_infrastructure.contract.reports import DriftReport
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.kept_in_memory import process_memory
from genesis_fp16_infrastructure.recipes.retrain.drift_categories import Categorical as _Categorical
from genesis_fp16_infrastructure.recipes.retrain.drift_categories import categorical, tables
from genesis_fp16_infrastructure.recipes.retrain.new_records import (
    new_at_end,
    new_records,
    sorted_labelled,
)
from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES, numeric_rows

NOISE_DRAWS = 20
MIN_DISTANCE = 0.1  # Evidently's default: below it, no batch size flags a feature
MIN_LABEL_SHIFT = 0.05
MIN_NEW = 20  # fewer new records: no report (every distance would be noise)
# The most records of either side the distances are measured on, a random sample past it
# (the label shift counts them all). Binning a 990,000-record reference took 26 s of a
# 1,000,000-record run; 50,000 records put a decile's share within about 0.003.
DRIFT_SAMPLE = 50_000
# The most (feature, draw, bin) keys one bincount of the draws' shares counts: 16 MiB
# of int64 keys, whatever the draws' size.
SHARE_KEYS = 2**21
TRANSPOSE_ROWS = 1024  # the records a block of the reference's transposed copy holds
KIND = "drift reference"  # the store's key: (KIND, the served model's digest and sizes)
# What became of each run's reference (this process's): "measured" (nothing kept, or a
# budget of 0), "taken" (kept and equal), "stale" (kept of other values: measured again).
KEPT: Counter[str] = Counter()
logger = logging.getLogger(__name__)


def drift_report(
    columns: PoolColumns,
    served: DataFingerprint | None,
    seed: int = 0,
    numeric: torch.Tensor | None = None,
    keep_in_memory_bytes: int | None = None,
) -> DriftReport | None:
    """The run's ``drift`` report on a read's records
    (``ReadResult.columns``; its examples are never built), or None without a served
    model's fingerprint or with under ``MIN_NEW`` new records. ``numeric``:
    ``numeric_columns`` of the read's examples, when the caller has them (else they
    are built for the records measured alone). A NaN among them is a ValueError that
    names the feature. ``keep_in_memory_bytes``: the request's; past 0 the reference's
    numeric side is kept for the next run (module docstring)."""
    if served is None:
        return None
    # What is kept under this key is checked before it is used: the key only names it
    key = (KIND, served.digest, served.records, len(served.labelled))
    is_new = new_at_end(columns, served)  # the pool grew at its end: no search
    if is_new is None:
        ordered = sorted_labelled(served, key, keep_in_memory_bytes)
        is_new = new_records(columns, ordered, key, keep_in_memory_bytes)
    new_rows = torch.from_numpy(np.flatnonzero(is_new))
    ref_rows = torch.from_numpy(np.flatnonzero(~is_new))
    n_new, n_ref = len(new_rows), len(ref_rows)
    if n_new < MIN_NEW or n_ref < MIN_NEW:
        return None
    shift, shift_threshold = _label_shift(columns, new_rows.numpy())
    generator = torch.Generator().manual_seed(seed)
    new_rows, ref_rows = _sample(new_rows, generator), _sample(ref_rows, generator)
    features = tables(columns, keep_in_memory_bytes)  # built once, for both sides
    measured = _measured(columns, numeric, ref_rows, key, keep_in_memory_bytes)
    reference = _Reference(categorical(features, columns, ref_rows), measured)
    new_cols = _numbers(columns, numeric, new_rows)
    distances = reference.distances(categorical(features, columns, new_rows), new_cols)
    noise = _noise(reference, len(new_rows), seed)
    thresholds = {k: max(MIN_DISTANCE, 2 * noise[k]) for k in distances}
    flagged = sorted(k for k, d in distances.items() if d > thresholds[k])
    return DriftReport(
        new_records=n_new,
        reference_records=n_ref,
        sampled={"new": len(new_rows), "reference": len(ref_rows)},
        features={k: round(v, 4) for k, v in distances.items()},
        thresholds={k: round(v, 4) for k, v in thresholds.items()},
        flagged=tuple(flagged),
        label_shift=round(shift, 4),
        label_shift_threshold=round(shift_threshold, 4),
        label_shift_flagged=abs(shift) > shift_threshold,
    )


def _numbers(
    columns: PoolColumns, numeric: torch.Tensor | None, rows: torch.Tensor
) -> torch.Tensor:
    """The unscaled numeric features of the labelled records ``rows``: of ``numeric``
    when the caller has them, else built for these rows alone (each record's numbers
    are its own). A NaN is refused: the features never hold one, and it would make its
    feature's deciles NaN and its distance a silent 0."""
    cols = _rows(columns, numeric, rows)
    _refuse_nan(cols)
    return cols


def _rows(columns: PoolColumns, numeric: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor:
    """The unscaled numeric features of the labelled records ``rows``, unchecked."""
    if numeric is None:
        return numeric_rows(columns, columns.labelled[rows.numpy()])
    return numeric.index_select(0, rows)  # numeric[rows]'s, in a third of its time


def _refuse_nan(cols: torch.Tensor) -> None:
    """A ValueError naming the first feature of ``cols`` (record x feature, or its
    transpose's view) with a NaN. Looked for first by numpy in memory order: torch's
    per-feature count over the reference's transposed view took 7 ms of CPU on 50,000
    records, numpy's look 0.8 ms."""
    if not np.isnan(cols.numpy()).any():
        return
    nans = cols.isnan().sum(0)
    if bool(nans.any()):
        name, count = next((n, int(k)) for n, k in zip(NUMERIC_FEATURES, nans, strict=True) if k)
        raise ValueError(
            f"drift: numeric feature {name!r} has {count} NaN value(s) among "
            f"{cols.shape[0]} records (the features are never NaN: the numbers are wrong)"
        )


class _Measured(NamedTuple):
    """The reference's numeric side: each feature's bin bounds, the bins' padded width,
    the reference's shares (feature x bin) and each of its records' bin (feature x
    record, uint8: the noise draws' bins are gathered from them, never binned again)."""

    bounds: list[torch.Tensor]
    width: int
    shares: torch.Tensor
    bins: np.ndarray

    @classmethod
    def of(cls, values: torch.Tensor) -> _Measured:
        """Measured from ``values`` (feature x record, float32 as the features are, or
        float64): one numpy sort of each row, and each value's bin counted by
        comparisons (:func:`_binned`). A NaN is refused (numpy sorts it last: one look at
        each row's last value). float32 values are sorted and compared as they are (half
        the bytes of float64: 50,000 records' sort took ~8 ms of CPU in float64), the
        deciles taken in float64 and each comparison exact (:func:`_at_most`): the same
        bounds, bins and shares, bit for bit, as of their float64 copy."""
        ordered = torch.from_numpy(np.sort(values.numpy(), axis=1))
        if ordered.shape[1] and bool(ordered[:, -1].isnan().any()):
            _refuse_nan(values.T)
        bounds = [_bounds(row) for row in ordered]
        width = max(len(b) for b in bounds) + 1 if bounds else 1
        bins = _binned(values.numpy(), bounds)
        bins.flags.writeable = False  # kept: read, never changed
        return cls(bounds, width, _sorted_shares(ordered, bounds, width), bins)


class _Kept(NamedTuple):
    """The reference as a resident process keeps it: ``measured``, and the reference
    records' numbers it was measured from (record x feature, as the run gave them), to
    which the next run's are compared, every value, before ``measured`` is taken."""

    numbers: torch.Tensor
    measured: _Measured


def _measured(
    columns: PoolColumns,
    numeric: torch.Tensor | None,
    rows: torch.Tensor,
    key: tuple[object, ...],
    budget: int | None,
) -> _Measured:
    """The reference records ``rows``' numeric side: the one kept for this served model
    when it was made of these very numbers (no sort, no NaN check: they passed both),
    else measured now (a NaN refused) and kept for the next run."""
    numbers = _rows(columns, numeric, rows)
    memory = process_memory(budget or 0)
    kept = None if memory is None else memory.get(key, key, given=False)
    if isinstance(kept, _Kept) and _same(kept.numbers, numbers):
        KEPT["taken"] += 1
        memory.note_given(f"drift reference of {len(numbers):,} records")  # type: ignore[union-attr]
        return kept.measured
    if isinstance(kept, _Kept):  # these records' numbers moved: an edit, a removal
        KEPT["stale"] += 1
        logger.info(
            "drift: the kept reference of %s records is not these %s records' numbers "
            "(records changed or left the reference): measured again",
            f"{len(kept.numbers):,}",
            f"{len(numbers):,}",
        )
    else:
        KEPT["measured"] += 1
    measured = _Measured.of(_feature_major(numbers))  # a NaN refused
    if memory is not None:
        what = f"drift reference of {len(numbers):,} records"
        size = numbers.nbytes + measured.bins.nbytes + measured.shares.nbytes
        memory.put(key, key, _Kept(numbers, measured), size, what)
    return measured


def _feature_major(numbers: torch.Tensor) -> torch.Tensor:
    """``numbers`` (record x feature) as float32 (float64 when given so), feature x
    record, contiguous: copied a block of ``TRANSPOSE_ROWS`` records at a time, each
    block's rows and columns in cache (50,000 records' 29 numbers: about 1 ms of CPU,
    torch's ``.T.contiguous()`` 2 and numpy's whole transposed copy 5). Not widened to
    float64: :meth:`_Measured.of` measures float32 exactly, and half the bytes are half
    the fresh pages to fault in (4 ms of 11.6 MB at 50,000 records, issue 90)."""
    given = numbers.numpy()
    wide = given.dtype == np.float64 or given.dtype.kind != "f"
    out = np.empty(given.shape[::-1], dtype=np.float64 if wide else np.float32)
    for start in range(0, len(given), TRANSPOSE_ROWS):
        out[:, start : start + TRANSPOSE_ROWS] = given[start : start + TRANSPOSE_ROWS].T
    return torch.from_numpy(out)


def _same(kept: torch.Tensor, numbers: torch.Tensor) -> bool:
    """Whether ``kept`` holds ``numbers``, value for value (float32 to float64 is exact
    and one to one: comparing the numbers as given is comparing the values measured; a
    NaN equals nothing). numpy's comparison: 0.5 ms of CPU for 50,000 records' numbers,
    ``torch.equal`` 0.9."""
    return kept.dtype == numbers.dtype and np.array_equal(kept.numpy(), numbers.numpy())


class _Reference:
    """The served model's records, measured once: each numeric feature's values sorted
    in one numpy sort (its deciles, its bin bounds, and its bins' shares, counted by a
    binary search of each bound); each categorical feature's codes and counts. Every
    distance is taken against it, of one set of records or of a batch of draws of its
    own records (:meth:`draw_distances`: one pass over the draws, not one each, binning
    the fewer of the records drawn and the records held)."""

    def __init__(self, categorical: dict[str, _Categorical], measured: _Measured) -> None:
        self.bins = measured.bins  # feature x record: a feature's in a row
        self.records = measured.bins.shape[1]
        self.bounds = measured.bounds
        self.width = measured.width
        self.numeric = measured.shares  # feature x bin
        self.categorical = categorical
        everyone = torch.arange(self.records)[None]
        self.counts = {k: c.counts(everyone)[0] for k, c in categorical.items()}
        self.seen = {k: c > 0 for k, c in self.counts.items()}  # the reference's categories

    def _bin(self, values: torch.Tensor) -> torch.Tensor:
        """Each record's bin of each feature (``values`` and the result: feature x
        record): :func:`_binned`, as a tensor."""
        return torch.from_numpy(_binned(values.numpy(), self.bounds).astype(np.int64))

    def _shares(self, bins: np.ndarray, picked: torch.Tensor) -> torch.Tensor:
        """Each feature's bin shares of each draw (``picked``: draw x record, columns of
        ``bins``, feature x record): feature x draw x bin, each feature's bins padded to
        one width with empty ones (an empty bin adds nothing to a distance). One numpy
        bincount over as many features' (feature, draw, bin) keys as hold
        :data:`SHARE_KEYS` at most, not one torch bincount a feature (29 of them: 5 ms
        of 8 in a 10,000-record pool's noise draws, issue 90); the same counts. The
        draws' bins are one ``take`` of their columns, each key its bin plus one offset
        per (feature, draw), added once: 1.3 ms of CPU for 20 draws of 1,000 records
        where a fancy index and two additions took 2.8 to 3.7."""
        features, (draws, size) = bins.shape[0], picked.shape
        width, at = self.width, picked.numpy().ravel()
        step = max(1, SHARE_KEYS // max(1, at.size))  # features a bincount
        counts = np.empty((features, draws * width), dtype=np.int64)
        for start in range(0, features, step):
            part = np.take(bins[start : start + step], at, axis=1).reshape(-1, draws, size)
            feature = np.arange(len(part), dtype=np.int64)[:, None, None] * draws
            offsets = (feature + np.arange(draws, dtype=np.int64)[None, :, None]) * width
            # feature x draw x record, int64 (the offsets' type: a uint8 bin is widened)
            found = np.bincount((part + offsets).ravel(), minlength=len(part) * draws * width)
            counts[start : start + len(part)] = found.reshape(len(part), draws * width)
        out = torch.from_numpy(counts.reshape(features, draws, width).astype(np.float64))
        return out / out.sum(-1, keepdim=True)

    def numeric_distances(self, shares: torch.Tensor) -> torch.Tensor:
        """Jensen-Shannon distance of each feature's shares (feature x draw x bin) from
        the reference's: feature x draw."""
        return _js(self.numeric[:, None], shares)

    def categorical_distance(self, name: str, counts: torch.Tensor) -> torch.Tensor:
        """L-infinity between the reference's shares and each row's of ``counts`` (draw x
        category), the categories the reference never had counted as one: per draw."""
        seen = self.seen[name]
        p = torch.cat([self.counts[name][seen], torch.zeros(1, dtype=torch.float64)])
        counts = torch.cat([counts[:, seen], counts[:, ~seen].sum(1, keepdim=True)], 1)
        total, p_total = counts.sum(1, keepdim=True), p.sum()
        if not p_total:
            return (total[:, 0] > 0).double()  # 0 where both are empty, else 1
        far = (p / p_total - counts / total).abs().max(1).values
        return torch.where(total[:, 0] > 0, far, torch.ones_like(far))

    def distances(
        self, categorical: dict[str, _Categorical], cols: torch.Tensor
    ) -> dict[str, float]:
        """The distances of other records (the new ones) from the reference."""
        everyone = torch.arange(cols.shape[0])[None]
        bins = _binned(cols.T.double().contiguous().numpy(), self.bounds)
        numeric = self.numeric_distances(self._shares(bins, everyone))
        out = {name: float(numeric[i, 0]) for i, name in enumerate(NUMERIC_FEATURES)}
        for name, coded in categorical.items():
            out[name] = float(self.categorical_distance(name, coded.counts(everyone))[0])
        return out

    def draw_distances(self, picked: torch.Tensor) -> dict[str, torch.Tensor]:
        """The distance of each draw of its own records (``picked``: draw x record, rows
        of the reference) from the whole of it, per feature: one tensor of draws each.
        The draws' bins are gathered from the reference's (binned once, when measured):
        what is counted is the records drawn, whatever the reference's size."""
        numeric = self.numeric_distances(self._shares(self.bins, picked))
        out = {name: numeric[i] for i, name in enumerate(NUMERIC_FEATURES)}
        for name, coded in self.categorical.items():
            out[name] = self.categorical_distance(name, coded.counts(picked))
        return out


def _noise(reference: _Reference, size: int, seed: int) -> dict[str, float]:
    """The largest distance of ``NOISE_DRAWS`` reference samples of ``size`` records,
    drawn with replacement all at once (the same draws as one ``randint`` per sample:
    the generator's stream is consumed in the same order) and binned in one pass."""
    generator = torch.Generator().manual_seed(seed)
    n = reference.records
    picked = torch.randint(n, (NOISE_DRAWS, size), generator=generator)
    return {k: float(d.max()) for k, d in reference.draw_distances(picked).items()}


def _binned(values: np.ndarray, bounds: list[torch.Tensor]) -> np.ndarray:
    """Each value's bin (``values`` and the result: feature x record, uint8: a bin is 12
    at most): how many of its feature's ``bounds`` are below it, which is where
    ``torch.bucketize`` puts it (the bounds ascend; a NaN is refused before). One numpy
    comparison per bound, a dozen at most, into one buffer, added as bytes: 2.5 ms of
    CPU for 50,000 records where int64 sums took 10 and ``bucketize``'s binary searches
    more (issue 90)."""
    out = np.zeros(values.shape, dtype=np.uint8)
    above = np.empty(values.shape[1:], dtype=np.bool_)
    for row, column, edges in zip(out, values, bounds, strict=True):
        for bound in _at_most(edges, values.dtype):  # x > bound, exactly: _at_most
            np.greater(column, bound, out=above)
            row += above.view(np.uint8)
    return out


def _at_most(bounds: torch.Tensor, dtype: np.dtype) -> np.ndarray:
    """Each of ``bounds`` (float64) as the largest value of ``dtype`` at most it, so that
    for any value ``x`` of that type, ``x > bound`` is ``x > _at_most(bound)`` (float64:
    the bounds themselves). A float32 ``x`` above a bound between two float32 values
    ``r < bound < r'`` is at least ``r'``, so above ``r``; at or below it, at most ``r``
    (numpy would round the bound to nearest, which can be ``r'``)."""
    wide = bounds.numpy()
    if dtype == np.float64:
        return wide
    with np.errstate(over="ignore"):  # past float32's range: inf, stepped down below
        near = wide.astype(dtype)
    over = near.astype(np.float64) > wide
    near[over] = np.nextafter(near[over], dtype.type(-np.inf))
    return near


def _bounds(ordered: torch.Tensor, bins: int = 10) -> torch.Tensor:
    """The bins' edges, of a feature's reference values sorted: their distinct deciles,
    with a bin of their own below the smallest value and above the largest: a feature of
    a few values (a flag, a small count) is compared value by value, and new values
    outside the reference's range are never hidden among its extremes."""
    quantiles = torch.linspace(0, 1, bins + 1, dtype=torch.float64)
    edges = torch.unique(_quantiles(ordered, quantiles))
    below = torch.nextafter(edges[:1], torch.tensor([-math.inf], dtype=torch.float64))
    return torch.cat([below, edges])  # x <= below | (below, e0] | ... | (e_last, inf)


def _quantiles(ordered: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``torch.quantile(values, q)`` (linear), bit for bit, of ``values`` already sorted:
    its ranks, the values at their floor and ceiling, and its ``lerp`` between them."""
    ranks = q * (len(ordered) - 1)
    below = ranks.long()
    # float32 values taken as float64 (exact) before the lerp, as of their float64 copy
    low, high = ordered[below].double(), ordered[ranks.ceil().long()].double()
    return low.lerp(high, ranks - below)


def _sorted_shares(ordered: torch.Tensor, bounds: list[torch.Tensor], width: int) -> torch.Tensor:
    """Each feature's bin shares (feature x bin, padded to ``width``) of its sorted values
    (feature x record): bin j holds bounds[j - 1] < x <= bounds[j], where ``bucketize``
    puts a value, so its count is how many are <= bounds[j] less how many are <=
    bounds[j - 1]: a binary search per bound, not a pass over the records."""
    records = ordered.shape[1]
    out = torch.zeros((len(bounds), width), dtype=torch.float64)
    rows = ordered.numpy()
    for i, b in enumerate(bounds):
        # how many are at most each bound: at most its _at_most in their own type
        at_most = torch.from_numpy(np.searchsorted(rows[i], _at_most(b, rows.dtype), "right"))
        edges = torch.cat([torch.zeros(1, dtype=torch.long), at_most, torch.tensor([records])])
        out[i, : len(b) + 1] = edges.diff().double()
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
