"""The judged run's gate (any API-3 plugin): per-segment questions, Holm over them, and
an inconclusive verdict apart from a rejection (issue 62)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np

from genesis_fp16_infrastructure.contract.record_losses import RecordLosses
from genesis_fp16_infrastructure.judging.gate import (
    Paired,
    compare,
    compare_segments,
    decide,
    paired_losses,
)


def _margin(served_mean: float) -> float:
    return 0.01


def _losses(values: np.ndarray, segments: list[str]) -> RecordLosses:
    return RecordLosses.of([str(i) for i in range(len(values))], values.tolist(), segments)


def test_a_loss_on_a_known_segment_is_rejected_though_a_new_one_gains() -> None:
    """The candidate gains 0.3 on a segment only it knew and loses 0.05 on one the
    served model knew: the pooled known records (the "old" segment's alone) show it worse,
    the verdict is rejected and names the segment; judged on the whole set alone, where
    the new segment's gain excuses the loss, it would have been promoted."""
    rng = np.random.default_rng(0)
    segments = ["old"] * 300 + ["new"] * 300
    served = rng.uniform(0.2, 0.6, 600)
    served[300:] += 0.3  # it never saw "new"
    candidate = served + rng.normal(0.0, 0.05, 600)
    candidate[:300] += 0.05
    candidate[300:] -= 0.3
    ours, theirs = _losses(candidate, segments), _losses(served, segments)
    found = compare_segments("current", ours, theirs, 2.0, _margin, known={"old"})
    assert [c.segment for c in found] == [None, "old"]  # "new": the candidate's alone
    outcome, reason, settled = decide(found)
    assert outcome == "rejected" and "current (segment old)" in reason
    assert settled[0].finding == "worse" and settled[1].finding == "worse"
    assert settled[0].records == 300 and not settled[1].required  # pooled known; a veto
    assert decide([compare("current", ours, theirs, 2.0, _margin)])[0] == "promoted"


def test_too_few_records_are_inconclusive_not_worse() -> None:
    """Sixty records a little worse by the point estimate: neither shown no worse nor
    worse beyond the margin; inconclusive, with the records it would need."""
    rng = np.random.default_rng(1)
    served = rng.uniform(0.2, 0.6, 60)
    candidate = np.maximum(served + rng.normal(0.006, 0.1, 60), 0.0)  # losses are >= 0
    paired = compare("current", _losses(candidate, ["a"] * 60), _losses(served, ["a"] * 60),
                     2.0, _margin)  # fmt: skip
    outcome, reason, settled = decide([paired])
    assert outcome == "inconclusive" and "inconclusive" in reason, reason
    assert settled[0].passed is None
    needed = settled[0].comparison().records_needed
    assert needed is not None and needed > 60


def test_a_veto_only_comparison_rejects_when_worse_and_holds_nothing_back_otherwise() -> None:
    """Issue 68's ``known`` set under 100 records is a veto: shown worse (0.2 on 60
    records) it rejects the candidate though the whole set passes; not shown either way
    it leaves the whole set's promotion standing; required, the same one holds it back."""
    rng = np.random.default_rng(1)
    whole = compare(
        "held_out",
        _losses(rng.uniform(0.2, 0.4, 600), ["x"] * 600),
        _losses(rng.uniform(0.2, 0.4, 600) + 0.1, ["x"] * 600),
        1.0,
        _margin,
    )
    served = _losses(rng.uniform(0.2, 0.4, 60), ["x"] * 60)
    worse = compare(
        "known", _losses(np.array(served.column()) + 0.2, ["x"] * 60), served, 1.0, _margin
    )
    unsure = compare(
        "known",
        _losses(np.array(served.column()) + rng.normal(0, 0.1, 60), ["x"] * 60),
        served,
        1.0,
        _margin,
    )
    assert whole.finding == "no_worse" and unsure.finding == "inconclusive"
    outcome, reason, _ = decide([whole, replace(worse, required=False)])
    assert outcome == "rejected" and reason.startswith("worse than the served model: known")
    assert decide([whole, replace(unsure, required=False)])[0] == "promoted"
    assert decide([whole, unsure])[0] == "inconclusive"


def _segments(
    effects: list[float], per: int, seed: int, sd: float = 0.05
) -> tuple[RecordLosses, RecordLosses]:
    """A served model and a candidate on ``per`` records of each segment ``s0``, ``s1``
    ...; the candidate's loss differs by that segment's effect, plus noise (``sd``)."""
    rng = np.random.default_rng(seed)
    served = rng.uniform(0.2, 0.6, per * len(effects))
    shift = np.repeat(effects, per) + rng.normal(0.0, sd, per * len(effects))
    segments = [f"s{i}" for i in range(len(effects)) for _ in range(per)]
    return _losses(np.maximum(served + shift, 0.0), segments), _losses(served, segments)


def test_clean_growth_is_promoted_on_the_pooled_known_segments() -> None:
    """Issue 68's gate with power: four known segments of 150 records, the candidate a
    little better on each (-0.005, noise sd 0.15). No segment alone is shown no worse,
    which held the candidate back under issue 62's rule (every segment required); pooled,
    the 600 records show it, and the segments are vetoes that find nothing worse."""
    ours, theirs = _segments([-0.005] * 4, 150, 3, sd=0.15)
    found = compare_segments("held_out", ours, theirs, 1.0, _margin, known={"s0", "s1", "s2", "s3"})
    assert [c.segment for c in found] == [None, "s0", "s1", "s2", "s3"]
    outcome, reason, settled = decide(found)
    assert outcome == "promoted", reason
    assert settled[0].finding == "no_worse" and settled[0].records == 600
    assert any(c.finding == "inconclusive" for c in settled[1:])
    required = [replace(c, required=True) for c in found]  # issue 62's rule
    assert decide(required)[0] == "inconclusive"


def test_poison_confined_to_one_known_segment_is_rejected_though_the_pool_passes() -> None:
    """Three clean known segments and one whose loss is 0.1 worse, 400 records each: the
    pooled mean is worse by only 0.025 on 1,600 records, and the poisoned segment's veto
    rejects the candidate, naming it."""
    ours, theirs = _segments([-0.03, -0.03, -0.03, 0.1], 400, 4)
    found = compare_segments("held_out", ours, theirs, 1.0, lambda m: 0.02, known=None)
    outcome, reason, settled = decide(found)
    assert settled[0].finding != "worse", settled[0].reason()
    assert outcome == "rejected" and "held_out (segment s3)" in reason, reason


def _columns(columns: dict[str, np.ndarray]) -> RecordLosses:
    ids = [str(i) for i in range(len(next(iter(columns.values()))))]
    return RecordLosses.of(ids, {name: values.tolist() for name, values in columns.items()})


def test_every_loss_column_is_judged_and_one_shown_worse_rejects() -> None:
    """Two columns: the candidate equal on the primary (log_loss) and worse by 0.05 on
    brier over 400 records is rejected, and the reason names the column; each
    comparison says which column it is of, the primary first."""
    rng = np.random.default_rng(3)
    served = {"log_loss": rng.uniform(0.2, 0.6, 400), "brier": rng.uniform(0.05, 0.2, 400)}
    candidate = {"log_loss": served["log_loss"].copy(), "brier": served["brier"] + 0.05}
    ours, theirs = _columns(candidate), _columns(served)
    found = [compare("held_out", ours, theirs, 2.0, _margin, metric) for metric in ours.metrics()]
    outcome, reason, settled = decide(found)
    assert outcome == "rejected" and "held_out: brier " in reason, reason
    assert [c.metric for c in settled] == ["log_loss", "brier"]
    assert [c.comparison().metric for c in settled] == ["log_loss", "brier"]
    assert settled[0].finding == "no_worse" and settled[1].finding == "worse"
    assert decide(found[:1])[0] == "promoted"


def test_holm_counts_every_column() -> None:
    """A column whose own test says worse (p about 0.036, under 5%) is not called worse
    beside a second column shown no worse: Holm's first step over the two questions
    asks p under 2.5%. The verdict is inconclusive, not rejected."""
    d = 0.028 + 0.2 * np.tile([-1.0, 1.0], 200)  # mean 1.8 s.e. past the margin 0.01
    served = np.full(400, 0.5)
    ours = _columns({"a": served.copy(), "b": served + d})
    theirs = _columns({"a": served, "b": served})
    alone = compare("held_out", ours, theirs, 2.0, _margin, "b")
    assert decide([alone])[0] == "rejected"
    both = [compare("held_out", ours, theirs, 2.0, _margin, m) for m in ("a", "b")]
    outcome, _, settled = decide(both)
    assert outcome == "inconclusive" and settled[1].finding == "inconclusive"


def test_losses_are_paired_by_record_whatever_the_order_and_overlap() -> None:
    """Two models' losses pair record by record: the first's order, only the records both
    scored, each with the other model's loss of the same id, clipped to the span."""
    first = RecordLosses.of(["a", "b", "c", "d"], [0.1, 0.2, 0.3, 9.0])
    second = RecordLosses.of(["d", "x", "b", "a"], [4.0, 0.5, 0.6, 0.7])
    ours, theirs = paired_losses(first, second, span=5.0)
    assert ours.tolist() == [0.1, 0.2, 5.0] and theirs.tolist() == [0.7, 0.6, 4.0]
    none = paired_losses(first, RecordLosses.of(["y"], [1.0]), span=5.0)
    assert [len(side) for side in none] == [0, 0]


def test_a_comparison_too_small_to_decide_writes_valid_json() -> None:
    """A comparison on one shared record (its bounds NaN) is written for the verdict's
    ``judged`` list under the file's keys, rounded, NaN as null (valid JSON, as every other
    record writes it), ``required`` kept out; its reader (Paired.from_json) takes it back."""
    one = compare("current", RecordLosses.of(["a"], [0.1234567]), RecordLosses.of(["a"], [0.5]),
                  2.0, _margin)  # fmt: skip
    written = one.to_json()
    assert json.loads(json.dumps(written, allow_nan=False)) == written
    assert written == {
        "set": "current", "records": 1, "candidate_loss": 0.123457, "served_loss": 0.5,
        "difference": -0.376543, "upper": None, "lower": None, "margin": None,
        "passed": None, "segment": None, "finding": None, "metric": "loss",
    }  # fmt: skip
    assert Paired.from_json(written).records == 1
