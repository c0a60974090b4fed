"""Per-segment judging (issue 62): a gain on a segment only the candidate knows cannot
excuse a loss on one the served model knew, and the verdict names that segment."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from genesis_fp16_infrastructure.recipes.retrain import gate

PER_SEGMENT = 400


@dataclass
class _Fixed:
    """A stand-in for a ScoredModel: fixed probabilities per record."""

    p: torch.Tensor

    def success_probability(self, records: gate.Records, out_of_fold: bool) -> torch.Tensor:
        return self.p[torch.as_tensor([int(i) for i in records.ids])]


def _world() -> tuple[gate.Records, torch.Tensor, torch.Tensor]:
    """Three segments of 400 records: ``old`` and ``kept`` the served model knew, ``new``
    it did not (it predicts ``new`` backwards). The candidate learned ``new``, keeps
    ``kept`` as it was, and is worse on ``old`` (its logits blurred by noise)."""
    generator = torch.Generator().manual_seed(11)
    n = 3 * PER_SEGMENT
    signal = torch.randn(n, generator=generator)
    labels = (torch.rand(n, generator=generator) < torch.sigmoid(1.6 * signal)).float()
    segments = ["old"] * PER_SEGMENT + ["kept"] * PER_SEGMENT + ["new"] * PER_SEGMENT
    new = slice(2 * PER_SEGMENT, n)
    served_logit = 1.6 * signal
    served_logit[new] = -1.6 * signal[new]  # never saw it: wrong there
    cand_logit = 1.6 * signal
    old = slice(0, PER_SEGMENT)
    cand_logit[old] += 1.2 * torch.randn(PER_SEGMENT, generator=generator)
    records = gate.Records(
        [str(i) for i in range(n)],
        labels,
        None,  # type: ignore[arg-type]  # the stand-ins never encode
        torch.zeros(n, 1),
        np.arange(n, dtype=np.int64),
        segments,
    )
    return records, torch.sigmoid(cand_logit), torch.sigmoid(served_logit)


def test_a_loss_on_a_known_segment_is_rejected_while_a_new_one_gains() -> None:
    """Over all records the candidate is far better (it learned the new segment), yet
    it is rejected: on ``old``, which the served model knew, it is shown worse; the
    verdict names that segment, and ``kept`` passes on its own."""
    records, cand_p, served_p = _world()
    candidate, served = _Fixed(cand_p), _Fixed(served_p)
    found = gate.compare_segments("held_out", records, candidate, served, True, {"old", "kept"})  # type: ignore[arg-type]
    whole, *segments = found
    assert whole.segment is None and whole.finding == "no_worse", whole.reason
    by_segment = {c.segment: c for c in segments}
    assert set(by_segment) == {"old", "kept"}  # "new": only the candidate knew it
    assert by_segment["old"].finding == "worse"
    assert by_segment["kept"].finding == "no_worse"
    verdict = gate.decide(found)
    assert verdict.outcome == "rejected"
    assert "held_out (segment old)" in verdict.reason and "kept" not in verdict.reason
    # Without segments the same candidate was promoted: the gain excused the loss.
    assert gate.decide([whole]).outcome == "promoted"


def test_a_segment_with_too_few_records_is_judged_within_the_whole_set_only() -> None:
    """A known segment with under SEGMENT_MIN_RECORDS records in the set asks no question
    of its own."""
    records, cand_p, served_p = _world()
    keep = np.r_[0 : gate.SEGMENT_MIN_RECORDS - 1, PER_SEGMENT : 3 * PER_SEGMENT]
    few = gate.Records(
        [records.ids[i] for i in keep],
        records.labels[keep],
        None,  # type: ignore[arg-type]
        records.numeric[keep],
        records.id_hashes[keep],
        [records.segments[i] for i in keep],
    )
    found = gate.compare_segments(
        "held_out", few, _Fixed(cand_p), _Fixed(served_p), True, {"old", "kept"}
    )  # type: ignore[arg-type]
    assert [c.segment for c in found] == [None, "kept"]


def test_holm_over_segments_leaves_a_marginal_loss_inconclusive() -> None:
    """A segment shown worse at its own 5% but not once Holm counts every question of
    the verdict is inconclusive, not rejected: never reported as worse by luck."""
    ll = gate.GateScores(0.8, 0.01, 0.5, 200)
    z = gate.Z_ONE_SIDED

    def comparison(segment: str | None, mean: float, se: float) -> gate.GateComparison:
        base = gate.GateComparison("held_out", ll, ll, segment=segment, reason="figures; x")
        return dataclasses.replace(
            base,
            delta_log_loss=gate.MARGIN_LOG_LOSS,
            log_loss_worse_upper=mean + z * se,
            log_loss_worse_lower=mean - z * se,
            passed=None,
        )

    marginal = comparison("a", gate.MARGIN_LOG_LOSS + 1.9 * 0.01, 0.01)  # p about 0.029
    assert gate.decide([marginal]).outcome == "rejected"  # alone: 0.029 <= 0.05
    calm = [comparison(s, -0.02, 0.005) for s in "bcd"]
    among = gate.decide([comparison(None, -0.02, 0.005), marginal, *calm])
    assert among.outcome == "inconclusive", among.reason
    assert all(c.finding != "worse" for c in among.comparisons)
