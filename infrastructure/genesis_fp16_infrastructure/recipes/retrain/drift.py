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
the largest draw). The label shift is flagged past max(0.05, 3 standard errors of the
difference of two rates). Vertex AI and Evidently use fixed thresholds (0.1 by default);
a fixed one flags small batches for their noise alone.

>>> report = drift_report(data.columns, served_fingerprint)  # doctest: +SKIP
>>> report.flagged, report.label_shift  # doctest: +SKIP
"""

from __future__ import annotations

import math

import numpy as np
import torch

from genesis_fp16_infrastructure.contract.reports import DriftReport
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES, numeric_rows

NOISE_DRAWS = 20
MIN_DISTANCE = 0.1  # Evidently's default: below it, no batch size flags a feature
MIN_LABEL_SHIFT = 0.05
MIN_NEW = 20  # fewer new records: no report (every distance would be noise)
# The most records of either side the distances are measured on, a random sample past it
# (the label shift counts them all). Binning a 990,000-record reference took 26 s of a
# 1,000,000-record run; 50,000 records put a decile's share within about 0.003.
DRIFT_SAMPLE = 50_000


def drift_report(
    columns: PoolColumns,
    served: DataFingerprint | None,
    seed: int = 0,
    numeric: torch.Tensor | None = None,
) -> DriftReport | None:
    """The run's ``drift`` report on a read's records
    (``ReadResult.columns``; its examples are never built), or None without a served
    model's fingerprint or with under ``MIN_NEW`` new records. ``numeric``:
    ``numeric_columns`` of the read's examples, when the caller has them."""
    if served is None:
        return None
    is_new = _new_records(columns, served)
    new_rows, ref_rows = is_new.nonzero().flatten(), (~is_new).nonzero().flatten()
    if len(new_rows) < MIN_NEW or len(ref_rows) < MIN_NEW:
        return None
    shift, shift_threshold = _label_shift(columns, is_new)
    generator = torch.Generator().manual_seed(seed)
    new_rows, ref_rows = _sample(new_rows, generator), _sample(ref_rows, generator)
    new, reference = _categorical(columns, new_rows), _categorical(columns, ref_rows)
    if numeric is None:
        numeric = numeric_rows(columns, columns.labelled)
    ref_cols, new_cols = numeric[ref_rows], numeric[new_rows]
    binned = _Reference(reference, ref_cols)
    distances = binned.distances(new, new_cols)
    noise = _noise(binned, ref_cols, len(new_rows), seed)
    thresholds = {k: max(MIN_DISTANCE, 2 * noise.get(k, 0.0)) for k in distances}
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


def _new_records(columns: PoolColumns, served: DataFingerprint) -> torch.Tensor:
    """Which records the served model never trained on as they are now: whose record
    hash (the reader's, ``PoolColumns.key``) it does not hold (held in id order: sorted
    for the lookup)."""
    return torch.from_numpy(~stores.known(columns.key, np.sort(served.labelled.numpy())))


def _categorical(columns: PoolColumns, picked: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each categorical feature's counts of the examples ``picked`` (their indices), in
    the report's order: a matrix (example x category, the pool's categories), from the
    columns' codes (a record's tool list counts each of its tools)."""
    rows = columns.labelled[picked.numpy()]
    one = (("agent", columns.agent), ("operator", columns.operator))
    out = {}
    for name, coded in (*one, ("reasoning_pattern", columns.pattern), ("tool", columns.tools)):
        lists = coded.values if name == "tool" else [(v,) for v in coded.values]
        vocab = {v: i for i, v in enumerate(dict.fromkeys(v for vs in lists for v in vs))}
        table = torch.zeros((len(lists), len(vocab)), dtype=torch.float64)
        for code, values in enumerate(lists):
            for v in values:
                table[code, vocab[v]] += 1
        out[name] = table[torch.from_numpy(coded.codes[rows])]
    return out


class _Reference:
    """The served model's records, binned once: each numeric feature's bin bounds and
    shares; each categorical feature's count matrix (record x category), so that a
    sample's shares are a sum of rows. Every distance is taken against it."""

    def __init__(self, counts: dict[str, torch.Tensor], cols: torch.Tensor) -> None:
        self.bounds = [_bounds(cols[:, i]) for i in range(cols.shape[1])]
        self.numeric = [_shares(cols[:, i], b) for i, b in enumerate(self.bounds)]
        self.counts = counts  # (records, categories)
        self.seen = {name: c.sum(0) > 0 for name, c in counts.items()}  # the reference's

    def numeric_distances(self, cols: torch.Tensor) -> dict[str, float]:
        return {
            name: _js(self.numeric[i], _shares(cols[:, i], self.bounds[i]))
            for i, name in enumerate(NUMERIC_FEATURES)
        }

    def categorical_distance(self, name: str, counts: torch.Tensor) -> float:
        """L-infinity between the reference's shares and ``counts``'s, the categories the
        reference never had counted as one."""
        seen = self.seen[name]
        p = torch.cat([self.counts[name].sum(0)[seen], torch.zeros(1, dtype=torch.float64)])
        counts = torch.cat([counts[seen], counts[~seen].sum(0, keepdim=True)])
        total = counts.sum()
        if not p.sum() or not total:
            return 0.0 if not p.sum() and not total else 1.0
        return float((p / p.sum() - counts / total).abs().max())

    def distances(self, counts: dict[str, torch.Tensor], cols: torch.Tensor) -> dict[str, float]:
        """The distances of other records (the new ones) from the reference."""
        out = self.numeric_distances(cols)
        for name, of_new in counts.items():
            out[name] = self.categorical_distance(name, of_new.sum(0))
        return out


def _noise(reference: _Reference, ref_cols: torch.Tensor, size: int, seed: int) -> dict[str, float]:
    """The largest distance of ``NOISE_DRAWS`` reference samples of ``size`` records."""
    generator = torch.Generator().manual_seed(seed)
    worst: dict[str, float] = {}
    n = ref_cols.shape[0]
    for _ in range(NOISE_DRAWS):
        picked = torch.randint(n, (size,), generator=generator)
        draw = reference.numeric_distances(ref_cols[picked])
        for name, counts in reference.counts.items():
            draw[name] = reference.categorical_distance(name, counts[picked].sum(0))
        for name, value in draw.items():
            worst[name] = max(worst.get(name, 0.0), value)
    return worst


def _bounds(reference: torch.Tensor, bins: int = 10) -> torch.Tensor:
    """The bins' edges: the reference's distinct deciles, with a bin of their own below
    its smallest value and above its largest: a feature of a few values (a flag, a small
    count) is compared value by value, and new values outside the reference's range are
    never hidden among its extremes."""
    ref = reference.double().contiguous()
    quantiles = torch.linspace(0, 1, bins + 1, dtype=torch.float64)
    edges = torch.unique(torch.quantile(ref, quantiles))
    below = torch.nextafter(edges[:1], torch.tensor([-math.inf], dtype=torch.float64))
    return torch.cat([below, edges])  # x <= below | (below, e0] | ... | (e_last, inf)


def _shares(values: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
    bins = torch.bucketize(values.double().contiguous(), bounds)
    counts = torch.bincount(bins, minlength=bounds.numel() + 1).double()
    return counts / counts.sum()


def _js(p: torch.Tensor, q: torch.Tensor) -> float:
    m = (p + q) / 2
    divergence = 0.5 * (_kl(p, m) + _kl(q, m))
    return math.sqrt(max(divergence, 0.0))


def _sample(rows: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``rows``, or ``DRIFT_SAMPLE`` of them drawn without replacement, in pool order."""
    if len(rows) <= DRIFT_SAMPLE:
        return rows
    picked = torch.randperm(len(rows), generator=generator)[:DRIFT_SAMPLE]
    return rows[picked.sort().values]


def _label_shift(columns: PoolColumns, is_new: torch.Tensor) -> tuple[float, float]:
    """New minus reference success rate over every record, and its threshold."""
    success = torch.from_numpy(columns.success).double()
    n_new = int(is_new.sum())
    n_ref = len(is_new) - n_new
    p_new = float(success[is_new].sum()) / n_new
    p_ref = float(success[~is_new].sum()) / n_ref
    pooled = (p_ref * n_ref + p_new * n_new) / (n_ref + n_new)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_ref + 1 / n_new))
    return p_new - p_ref, max(MIN_LABEL_SHIFT, 3 * se)


def _kl(p: torch.Tensor, q: torch.Tensor) -> float:
    mask = p > 0
    return float((p[mask] * (p[mask] / q[mask]).log2()).sum())
