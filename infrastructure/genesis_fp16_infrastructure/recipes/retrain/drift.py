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
(a binary search per bin bound); each categorical feature's code x category table is
built once for both sides, in C. The new records are binned, and the draws together:
the records drawn (or, when the draws hold more records than the reference, every
reference record once), so that what is binned is what is new, times ``NOISE_DRAWS``, at
most; every draw's shares are one bincount of its records' bins per feature, all draws
at once, with no Python pass per draw or per record. The pool itself is only
counted (which records are new, the success rates), in numpy. The same draws,
distances and flags, bit for bit, as one pass per draw
(``tests/infrastructure/recipes/retrain/test_drift_pinned.py`` and
``test_drift_cost_of_new.py``). A NaN among the numbers is refused (a ValueError naming
the feature).

In a resident run process (``keep_in_memory_bytes``: :mod:`~genesis_fp16_infrastructure.
kept_in_memory`) the reference's numeric side (its values, sorted once: deciles, bin
bounds and shares) is kept from one run to the next, keyed by the served model's record
hashes and checked against what it was made of: the reference sample's numbers, value
for value. The next run over the same served model, with records only added, finds them
equal and sorts nothing; a relabel, edit or removal (which moves a record out of the
reference or changes a record's lineage numbers), another served model (a promotion, a
rollback) or another sample is a mismatch: the reference is measured again, counted
(:data:`KEPT`) and logged. Taken or measured, the report is the same, bit for bit: it is
the same values' sort.

The label shift is flagged past max(0.05, 3 standard errors of the difference of two
rates). Vertex AI and Evidently use fixed thresholds (0.1 by default); a fixed one flags
small batches for their noise alone.

>>> report = drift_report(data.columns, served_fingerprint)  # doctest: +SKIP
>>> report.flagged, report.label_shift  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import Counter
from itertools import chain
from typing import NamedTuple

import numpy as np
import torch

from genesis_fp16_infrastructure.contract.reports import DriftReport
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns, column_tensor
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.kept_in_memory import estimate_bytes, process_memory
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
KIND = "drift reference"  # the store's key: (KIND, a digest of the served model's records)
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
    key = (KIND, hashlib.blake2b(served.labelled.numpy().tobytes(), digest_size=16).hexdigest())
    labelled = _sorted_labelled(served, key, keep_in_memory_bytes)
    is_new = _new_records(columns, labelled, keep_in_memory_bytes)
    new_rows, ref_rows = is_new.nonzero().flatten(), (~is_new).nonzero().flatten()
    if len(new_rows) < MIN_NEW or len(ref_rows) < MIN_NEW:
        return None
    shift, shift_threshold = _label_shift(columns, is_new)
    generator = torch.Generator().manual_seed(seed)
    new_rows, ref_rows = _sample(new_rows, generator), _sample(ref_rows, generator)
    tables = _tables(columns)  # built once, for both sides
    measured = _measured(columns, numeric, ref_rows, key, keep_in_memory_bytes)
    reference = _Reference(_categorical(tables, columns, ref_rows), measured)
    new_cols = _numbers(columns, numeric, new_rows)
    distances = reference.distances(_categorical(tables, columns, new_rows), new_cols)
    noise = _noise(reference, len(new_rows), seed)
    thresholds = {k: max(MIN_DISTANCE, 2 * noise[k]) for k in distances}
    flagged = sorted(k for k, d in distances.items() if d > thresholds[k])
    return DriftReport(
        new_records=int(is_new.sum()),
        reference_records=len(is_new) - int(is_new.sum()),
        sampled={"new": len(new_rows), "reference": len(ref_rows)},
        features={k: round(v, 4) for k, v in distances.items()},
        thresholds={k: round(v, 4) for k, v in thresholds.items()},
        flagged=tuple(flagged),
        label_shift=round(shift, 4),
        label_shift_threshold=round(shift_threshold, 4),
        label_shift_flagged=abs(shift) > shift_threshold,
    )


def _new_records(columns: PoolColumns, labelled: np.ndarray, budget: int | None) -> torch.Tensor:
    """Which records the served model never trained on as they are now: whose record
    hash (the reader's, ``PoolColumns.key``) is not among its ``labelled`` (sorted:
    :func:`_sorted_labelled`). The record hashes in the order the last run kept, grown
    by the new ones (``stores.ranked``: no sort of the pool's)."""
    order = stores.ranked("record hashes", columns.key, budget)
    return torch.from_numpy(~stores.known(columns.key, labelled, order))


def _sorted_labelled(
    served: DataFingerprint, key: tuple[str, str], budget: int | None
) -> np.ndarray:
    """The served model's record hashes (held in id order), sorted for the lookup: sorted
    once a served model in a resident process (``budget``), kept under ``key`` beside its
    drift reference (a 100,000-record pool's: 5 ms a run)."""
    memory = process_memory(budget or 0)
    sorted_key = ("sorted " + key[0], key[1])
    kept = None if memory is None else memory.get(sorted_key, key, given=False)
    if isinstance(kept, np.ndarray):
        return kept
    labelled = np.sort(served.labelled.numpy())
    labelled.flags.writeable = False  # kept: looked up in, never changed
    if memory is not None:
        memory.put(sorted_key, key, labelled, labelled.nbytes, "sorted record hashes")
    return labelled


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
    return numeric[rows]


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
    """The reference's numeric side: its values (feature x record, float64), each
    feature's bin bounds, the bins' padded width and the reference's shares (feature x
    bin). What a resident process keeps from run to run (:func:`_measured`)."""

    values: torch.Tensor
    bounds: list[torch.Tensor]
    width: int
    shares: torch.Tensor

    @classmethod
    def of(cls, values: torch.Tensor) -> _Measured:
        """Measured from ``values`` (feature x record): one numpy sort of each row."""
        ordered = torch.from_numpy(np.sort(values.numpy(), axis=1))
        bounds = [_bounds(row) for row in ordered]
        width = max(len(b) for b in bounds) + 1 if bounds else 1
        return cls(values, bounds, width, _sorted_shares(ordered, bounds, width))


def _measured(
    columns: PoolColumns,
    numeric: torch.Tensor | None,
    rows: torch.Tensor,
    key: tuple[str, str],
    budget: int | None,
) -> _Measured:
    """The reference records ``rows``' numeric side: the one kept for this served model
    when it was made of these very values (no sort, no NaN check: they passed both),
    else measured now (a NaN refused) and kept for the next run."""
    values = _rows(columns, numeric, rows).T.double().contiguous()
    memory = process_memory(budget or 0)
    kept = None if memory is None else memory.get(key, key, given=False)
    if isinstance(kept, _Measured) and torch.equal(kept.values, values):
        KEPT["taken"] += 1
        memory.note_given(f"drift reference of {values.shape[1]:,} records")  # type: ignore[union-attr]
        return kept
    if isinstance(kept, _Measured):  # these records' numbers moved: an edit, a removal
        KEPT["stale"] += 1
        logger.info(
            "drift: the kept reference of %s records is not these %s records' numbers "
            "(records changed or left the reference): measured again",
            f"{kept.values.shape[1]:,}",
            f"{values.shape[1]:,}",
        )
    else:
        KEPT["measured"] += 1
    _refuse_nan(values.T)
    measured = _Measured.of(values)
    if memory is not None:
        what = f"drift reference of {values.shape[1]:,} records"
        memory.put(key, key, measured, estimate_bytes(measured.values) * 2, what)
    return measured


class _Categorical(NamedTuple):
    """One categorical feature of some labelled records: each record's code (``codes``,
    of ``width`` codes) and each code's count of every category (``table``, code x
    category: a record's tool list counts each of its tools; None where each code is a
    category of its own), so that a set of records' counts is the bincount of their
    codes, times the table: exact, in float64 integers."""

    codes: torch.Tensor  # int64 per record
    width: int
    table: torch.Tensor | None  # float64, code x category; None: the identity

    def counts(self, picked: torch.Tensor) -> torch.Tensor:
        """The category counts of each row of ``picked`` (draw x record: rows into
        ``codes``): draw x category."""
        draws, width = picked.shape[0], self.width
        offsets = torch.arange(draws)[:, None] * width
        per_code = torch.bincount((self.codes[picked] + offsets).flatten(), minlength=draws * width)
        per_code = per_code.view(draws, width).double()
        return per_code if self.table is None else per_code @ self.table


def _tables(columns: PoolColumns) -> dict[str, _Categorical]:
    """Each categorical feature of the pool, in the report's order, its codes the pool's
    rows' (taken at the records measured by :func:`_categorical`), its table built once
    for both sides. A column's values are distinct (``Coded``), so the agent, operator
    and pattern codes are their own categories; the tool lists' table is one bincount of
    (list, tool) pairs, the lists flattened in C (``chain``, ``map``): work per distinct
    list, none per record, and no Python loop."""
    out = {
        name: _Categorical(column_tensor(coded.codes), len(coded.values), None)
        for name, coded in (
            ("agent", columns.agent),
            ("operator", columns.operator),
            ("reasoning_pattern", columns.pattern),
        )
    }
    lists = columns.tools.values
    flat = list(chain.from_iterable(lists))
    vocab = {v: i for i, v in enumerate(dict.fromkeys(flat))}
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    code = np.repeat(np.arange(len(lists), dtype=np.int64), lengths)
    tool = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
    pairs = np.bincount(code * len(vocab) + tool, minlength=len(lists) * len(vocab))
    table = torch.from_numpy(pairs.reshape(len(lists), len(vocab)).astype(np.float64))
    out["tool"] = _Categorical(column_tensor(columns.tools.codes), len(lists), table)
    return out


def _categorical(
    tables: dict[str, _Categorical], columns: PoolColumns, picked: torch.Tensor
) -> dict[str, _Categorical]:
    """Each categorical feature of the labelled records ``picked`` (their indices)."""
    rows = torch.from_numpy(columns.labelled[picked.numpy()])
    return {name: t._replace(codes=t.codes[rows]) for name, t in tables.items()}


class _Reference:
    """The served model's records, measured once: each numeric feature's values sorted
    in one numpy sort (its deciles, its bin bounds, and its bins' shares, counted by a
    binary search of each bound); each categorical feature's codes and counts. Every
    distance is taken against it, of one set of records or of a batch of draws of its
    own records (:meth:`draw_distances`: one pass over the draws, not one each, binning
    the fewer of the records drawn and the records held)."""

    def __init__(self, categorical: dict[str, _Categorical], measured: _Measured) -> None:
        self.values = measured.values  # feature x record: a feature's in a row
        self.bounds = measured.bounds
        self.width = measured.width
        self.numeric = measured.shares  # feature x bin
        self.categorical = categorical
        everyone = torch.arange(self.values.shape[1])[None]
        self.counts = {k: c.counts(everyone)[0] for k, c in categorical.items()}
        self.seen = {k: c > 0 for k, c in self.counts.items()}  # the reference's categories

    def _bin(self, values: torch.Tensor) -> torch.Tensor:
        """Each record's bin of each feature (``values`` and the result: feature x
        record): how many of the feature's bounds are below its value, which is where
        ``torch.bucketize`` puts it (the bounds ascend; a NaN is refused before). One
        numpy comparison per bound, a dozen at most: 5 ms of CPU for 20,000 drawn
        records where ``bucketize``'s binary searches took 16 (issue 90)."""
        given = values.numpy()
        out = np.zeros(given.shape, dtype=np.int64)
        for row, column, bounds in zip(out, given, self.bounds, strict=True):
            for bound in bounds.tolist():  # Python floats: the bounds' doubles, exactly
                row += column > bound
        return torch.from_numpy(out)

    def _shares(self, bins: torch.Tensor, picked: torch.Tensor) -> torch.Tensor:
        """Each feature's bin shares of each draw (``picked``: draw x record, columns of
        ``bins``, feature x record): feature x draw x bin, each feature's bins padded to
        one width with empty ones (an empty bin adds nothing to a distance). One numpy
        bincount over as many features' (feature, draw, bin) keys as hold
        :data:`SHARE_KEYS` at most, not one torch bincount a feature (29 of them: 5 ms
        of 8 in a 10,000-record pool's noise draws, issue 90); the same counts."""
        features, draws, width = bins.shape[0], picked.shape[0], self.width
        given, at = bins.numpy(), picked.numpy()
        offsets = np.arange(draws, dtype=np.int64)[:, None] * width  # draw x 1
        step = max(1, SHARE_KEYS // max(1, at.size))  # features a bincount
        counts = np.empty((features, draws * width), dtype=np.int64)
        for start in range(0, features, step):
            part = given[start : start + step][:, at] + offsets  # feature x draw x record
            part += np.arange(len(part), dtype=np.int64)[:, None, None] * (draws * width)
            found = np.bincount(part.ravel(), minlength=len(part) * draws * width)
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
        bins = self._bin(cols.T.double().contiguous())
        numeric = self.numeric_distances(self._shares(bins, everyone))
        out = {name: float(numeric[i, 0]) for i, name in enumerate(NUMERIC_FEATURES)}
        for name, coded in categorical.items():
            out[name] = float(self.categorical_distance(name, coded.counts(everyone))[0])
        return out

    def draw_distances(self, picked: torch.Tensor) -> dict[str, torch.Tensor]:
        """The distance of each draw of its own records (``picked``: draw x record, rows
        of the reference) from the whole of it, per feature: one tensor of draws each."""
        if picked.numel() < self.values.shape[1]:  # fewer drawn than held: bin the drawn
            drawn = torch.arange(picked.numel()).view(picked.shape)
            bins, at = self._bin(self.values.index_select(1, picked.flatten())), drawn
        else:  # bin every reference record once, the draws' bins gathered from theirs
            bins, at = self._bin(self.values), picked
        numeric = self.numeric_distances(self._shares(bins, at))
        out = {name: numeric[i] for i, name in enumerate(NUMERIC_FEATURES)}
        for name, coded in self.categorical.items():
            out[name] = self.categorical_distance(name, coded.counts(picked))
        return out


def _noise(reference: _Reference, size: int, seed: int) -> dict[str, float]:
    """The largest distance of ``NOISE_DRAWS`` reference samples of ``size`` records,
    drawn with replacement all at once (the same draws as one ``randint`` per sample:
    the generator's stream is consumed in the same order) and binned in one pass."""
    generator = torch.Generator().manual_seed(seed)
    n = reference.values.shape[1]
    picked = torch.randint(n, (NOISE_DRAWS, size), generator=generator)
    return {k: float(d.max()) for k, d in reference.draw_distances(picked).items()}


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
    return ordered[below].lerp(ordered[ranks.ceil().long()], ranks - below)


def _sorted_shares(ordered: torch.Tensor, bounds: list[torch.Tensor], width: int) -> torch.Tensor:
    """Each feature's bin shares (feature x bin, padded to ``width``) of its sorted values
    (feature x record): bin j holds bounds[j - 1] < x <= bounds[j], where ``bucketize``
    puts a value, so its count is how many are <= bounds[j] less how many are <=
    bounds[j - 1]: a binary search per bound, not a pass over the records."""
    records = ordered.shape[1]
    out = torch.zeros((len(bounds), width), dtype=torch.float64)
    for i, b in enumerate(bounds):
        at_most = torch.searchsorted(ordered[i], b, right=True)
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


def _label_shift(columns: PoolColumns, is_new: torch.Tensor) -> tuple[float, float]:
    """New minus reference success rate over every record, and its threshold."""
    success = column_tensor(columns.success).double()
    n_new = int(is_new.sum())
    n_ref = len(is_new) - n_new
    p_new = float(success[is_new].sum()) / n_new
    p_ref = float(success[~is_new].sum()) / n_ref
    pooled = (p_ref * n_ref + p_new * n_new) / (n_ref + n_new)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_ref + 1 / n_new))
    return p_new - p_ref, max(MIN_LABEL_SHIFT, 3 * se)
