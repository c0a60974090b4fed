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

>>> report = drift_report(data.examples, data.pool, served_fingerprint)  # doctest: +SKIP
>>> report["flagged"], report["label_shift"]  # doctest: +SKIP
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch

from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint, record_hash
from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.schema import AttemptInput, Example
from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES, numeric_columns

NOISE_DRAWS = 20
MIN_DISTANCE = 0.1  # Evidently's default: below it, no batch size flags a feature
MIN_LABEL_SHIFT = 0.05
MIN_NEW = 20  # fewer new records: no report (every distance would be noise)
_CATEGORICAL: dict[str, Callable[[AttemptInput], Sequence[str]]] = {
    "agent": lambda a: (a.agent,),
    "operator": lambda a: (a.operator,),
    "reasoning_pattern": lambda a: (a.reasoning_pattern,),
    "tool": lambda a: a.tools_used,
}


def drift_report(
    examples: Sequence[Example], pool: Pool, served: DataFingerprint | None, seed: int = 0
) -> dict[str, Any] | None:
    """The report for ``train --json`` (``extra.drift``), or None without a served model's
    fingerprint or with under ``MIN_NEW`` new records."""
    if served is None:
        return None
    seen = set(served.labelled.tolist())
    new = [e for e in examples if record_hash(e) not in seen]
    reference = [e for e in examples if record_hash(e) in seen]
    if len(new) < MIN_NEW or len(reference) < MIN_NEW:
        return None
    ref_cols = numeric_columns([e.attempt for e in reference], pool)
    new_cols = numeric_columns([e.attempt for e in new], pool)
    distances = _distances(reference, ref_cols, new, new_cols)
    noise = _noise(reference, ref_cols, len(new), seed)
    thresholds = {k: max(MIN_DISTANCE, 2 * noise.get(k, 0.0)) for k in distances}
    flagged = sorted(k for k, d in distances.items() if d > thresholds[k])
    shift, shift_threshold = _label_shift(reference, new)
    return {
        "new_records": len(new),
        "reference_records": len(reference),
        "features": {k: round(v, 4) for k, v in distances.items()},
        "thresholds": {k: round(v, 4) for k, v in thresholds.items()},
        "flagged": flagged,
        "label_shift": round(shift, 4),
        "label_shift_threshold": round(shift_threshold, 4),
        "label_shift_flagged": abs(shift) > shift_threshold,
    }


def _distances(
    reference: Sequence[Example],
    ref_cols: torch.Tensor,
    new: Sequence[Example],
    new_cols: torch.Tensor,
) -> dict[str, float]:
    out: dict[str, float] = {}
    for i, name in enumerate(NUMERIC_FEATURES):
        out[name] = js_distance(ref_cols[:, i], new_cols[:, i])
    for name, values in _CATEGORICAL.items():
        out[name] = linf_distance(
            [v for e in reference for v in values(e.attempt)],
            [v for e in new for v in values(e.attempt)],
        )
    return out


def _noise(
    reference: Sequence[Example], ref_cols: torch.Tensor, size: int, seed: int
) -> dict[str, float]:
    """The largest distance of ``NOISE_DRAWS`` reference samples of ``size`` records."""
    rng = random.Random(seed)
    worst: dict[str, float] = {}
    n = len(reference)
    for _ in range(NOISE_DRAWS):
        picked = [rng.randrange(n) for _ in range(size)]
        sample = [reference[i] for i in picked]
        for name, value in _distances(reference, ref_cols, sample, ref_cols[picked]).items():
            worst[name] = max(worst.get(name, 0.0), value)
    return worst


def js_distance(reference: torch.Tensor, new: torch.Tensor, bins: int = 10) -> float:
    """Jensen-Shannon distance (base 2) of two samples, binned on the reference's quantiles."""
    ref = reference.double().contiguous()
    edges = torch.unique(torch.quantile(ref, torch.linspace(0, 1, bins + 1, dtype=torch.float64)))
    if edges.numel() < 2:  # a constant reference: its one value against the rest
        p = torch.tensor([1.0, 0.0], dtype=torch.float64)
        same = float((new.double() == ref[0]).double().mean())
        q = torch.tensor([same, 1 - same], dtype=torch.float64)
    else:
        inner = edges[1:-1]
        p = torch.bincount(torch.bucketize(ref, inner), minlength=inner.numel() + 1).double()
        fresh = torch.bucketize(new.double().contiguous(), inner)
        q = torch.bincount(fresh, minlength=inner.numel() + 1)
        p, q = p / p.sum(), q.double() / q.sum()
    m = (p + q) / 2
    divergence = 0.5 * (_kl(p, m) + _kl(q, m))
    return math.sqrt(max(divergence, 0.0))


def linf_distance(reference: Sequence[str], new: Sequence[str]) -> float:
    """The largest difference of one category's share between two samples."""
    if not reference or not new:
        return 0.0 if not reference and not new else 1.0
    p, q = Counter(reference), Counter(new)
    return max(abs(p[k] / len(reference) - q[k] / len(new)) for k in p.keys() | q.keys())


def _label_shift(reference: Sequence[Example], new: Sequence[Example]) -> tuple[float, float]:
    p_ref = sum(e.label.success for e in reference) / len(reference)
    p_new = sum(e.label.success for e in new) / len(new)
    pooled = (p_ref * len(reference) + p_new * len(new)) / (len(reference) + len(new))
    se = math.sqrt(pooled * (1 - pooled) * (1 / len(reference) + 1 / len(new)))
    return p_new - p_ref, max(MIN_LABEL_SHIFT, 3 * se)


def _kl(p: torch.Tensor, q: torch.Tensor) -> float:
    mask = p > 0
    return float((p[mask] * (p[mask] / q[mask]).log2()).sum())
