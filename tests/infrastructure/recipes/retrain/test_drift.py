"""The drift report: quiet on a random half of one pool, loud on each injected shift."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16_infrastructure.contract.reports import DriftReport
from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import record_id_hash
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain.drift import _Measured, _Reference, drift_report
from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES


def numeric_distance(reference: torch.Tensor, new: torch.Tensor) -> float:
    """The drift report's distance of ``new`` from ``reference`` on its first feature."""
    width = len(NUMERIC_FEATURES)
    values = reference[:, None].expand(-1, width).T.double().contiguous()
    ref = _Reference({}, _Measured.of(values))
    return ref.distances({}, new[:, None].expand(-1, width))[NUMERIC_FEATURES[0]]


def test_the_numeric_distance_sees_flags_and_values_outside_the_reference() -> None:
    """A 0/1 feature that flips, and values past the reference's largest, are far; the
    same sample is at 0."""
    flags = torch.tensor([0.0, 0.0, 0.0, 1.0] * 50)
    assert numeric_distance(flags, flags) == 0.0
    assert numeric_distance(flags, torch.ones(50)) > 0.5
    spread = torch.arange(200, dtype=torch.float64)
    assert numeric_distance(spread, spread[-20:] * 10) > 0.9  # all above the reference's max
    assert numeric_distance(spread, spread[::4]) < 0.1


def _report(edit: Any, seed: int = 0, records: int = 600) -> DriftReport:
    pool = generate_pool(records, seed=seed)
    ids = sorted(pool["trajectories"], key=lambda k: record_id_hash(f"{seed}:{k}"))
    new = ids[records // 2 :]
    served = {**pool, "trajectories": {k: pool["trajectories"][k] for k in ids[: records // 2]}}
    for key in new:
        edit(pool["trajectories"][key])
    return _drift(served, pool, seed)


def _drift(served_pool: dict[str, Any], grown_pool: dict[str, Any], seed: int) -> DriftReport:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "served.json", Path(tmp) / "grown.json"
        a.write_text(json.dumps(served_pool))
        b.write_text(json.dumps(grown_pool))
        served, grown = read_trajectories(a), read_trajectories(b)
    report = drift_report(grown.columns, fingerprint_of(served.columns), seed)
    assert report is not None
    return report


@pytest.mark.parametrize("seed", [0, 1])
def test_a_random_half_of_one_pool_flags_nothing(seed: int) -> None:
    """No shift: no feature and no label shift flagged (the thresholds are the noise's)."""
    report = _report(lambda record: None, seed)
    assert report.flagged == () and not report.label_shift_flagged, report


def test_each_injected_shift_is_flagged_on_its_own_feature() -> None:
    """A new agent, a renamed tool and generation x10 flag their feature; a success rate
    raised to 0.6 flags the label shift."""
    assert "agent" in _report(lambda r: r.update(agent_name="qa")).flagged
    renamed = _report(
        lambda r: r.update(tools_used=["ripgrep" if t == "grep" else t for t in r["tools_used"]])
    )
    assert "tool" in renamed.flagged
    assert "log_generation" in _report(lambda r: r.update(generation=10 * r["generation"])).flagged
    counter = iter(range(10**6))
    shifted = _report(lambda r: r.update(success_score=0.9 if next(counter) % 5 < 3 else 0.1))
    assert shifted.label_shift_flagged and shifted.label_shift > 0.3, shifted


def test_past_the_sample_size_the_distances_are_measured_on_a_sample(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With DRIFT_SAMPLE at 150 on 600 records: both sides sampled, the counts still the
    whole pool's, a renamed tool still flagged, a random half still quiet."""
    import genesis_fp16_infrastructure.recipes.retrain.drift as drift

    monkeypatch.setattr(drift, "DRIFT_SAMPLE", 150)
    renamed = _report(
        lambda r: r.update(tools_used=["ripgrep" if t == "grep" else t for t in r["tools_used"]])
    )
    # the new records a random 150; the reference those of its records whose hash is in
    # the sample's level (drift_reference): about 150, at most twice as few
    assert renamed.sampled["new"] == 150 and 60 < renamed.sampled["reference"] <= 200
    assert renamed.sampled["reference"] < renamed.reference_records
    assert renamed.new_records + renamed.reference_records > 500
    assert "tool" in renamed.flagged
    quiet = _report(lambda record: None, 1)
    assert quiet.flagged == () and not quiet.label_shift_flagged, quiet
