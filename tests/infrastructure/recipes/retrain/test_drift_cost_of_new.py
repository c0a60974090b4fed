"""The drift report costs what is new (issue 90 item 3): the same reports as the code at
f277212d wrote, no Python work that grows with the pool, and bad input said plainly.

The pinned reports (``drift_reports_f277212d.json``) were written by drift.py as it was
at f277212d, before the reference's tables were built once in numpy, with
``python tests/infrastructure/recipes/retrain/test_drift_cost_of_new.py``: generated
pools where few records are new against many (the run's usual case), quiet and
drifting, the reference sampled and not, each with the numbers built by the report and
handed to it (as the run's task hands them). The two cases whose reference is sampled
(DRIFT_SAMPLE 1,000) were pinned again at drift35, when the reference's sample came to
be drawn by record hash so that a kept one grows (``drift_reference``): their flags the
same."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest
import torch
from drift_edits import edit_record

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import record_id_hash
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES, numeric_rows

PINNED = Path(__file__).with_name("drift_reports_f277212d.json")

# (seed, records, new records, edit of each new record, DRIFT_SAMPLE)
CASES: list[tuple[int, int, int, str, int]] = [
    (11, 5000, 250, "none", 50_000),
    (12, 5000, 250, "generation_x10", 50_000),
    (13, 5000, 250, "rename_grep", 1_000),
    (14, 3000, 1500, "agent_qa", 1_000),
    (15, 4000, 100, "success_up", 50_000),
]


def _pool(seed: int, records: int, new: int, edit: str) -> tuple[PoolColumns, DataFingerprint]:
    """A generated pool read as a run reads it, its last ``new`` records (in a seeded
    order) edited, and the fingerprint of a served model trained on the rest."""
    pool = generate_pool(records, seed=seed)
    ids = sorted(pool["trajectories"], key=lambda k: record_id_hash(f"{seed}:{k}"))
    for n, key in enumerate(ids[records - new :]):
        edit_record(edit, pool["trajectories"][key], n)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "grown.json"
        path.write_text(json.dumps(pool))
        columns = read_trajectories(path, keep_text=False).columns
    served = set(ids[: records - new])
    held = np.array([columns.ids[r] in served for r in columns.labelled.tolist()], dtype=bool)
    hashes = torch.from_numpy(columns.id_hash[columns.labelled[held]])
    order = torch.argsort(hashes, stable=True)
    keys = torch.from_numpy(columns.key[held])
    return columns, DataFingerprint(int(held.sum()), "", hashes[order], keys[order])


def _reports(seed: int, records: int, new: int, edit: str, sample: int) -> list[Any]:
    """The case's report with the numbers built by the report, then handed to it."""
    columns, served = _pool(seed, records, new, edit)
    before, drift.DRIFT_SAMPLE = drift.DRIFT_SAMPLE, sample
    try:
        built = drift.drift_report(columns, served, seed)
        given = drift.drift_report(columns, served, seed, numeric_rows(columns, columns.labelled))
    finally:
        drift.DRIFT_SAMPLE = before
    return [None if r is None else r.to_json() for r in (built, given)]


@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda i: f"{CASES[i][3]}-{CASES[i][2]}")
def test_the_report_is_the_one_f277212d_wrote(case: int) -> None:
    """Each pinned case gives f277212d's report, field for field (its figures rounded to
    4 places as the report rounds them), with the numbers built or handed in."""
    pinned = json.loads(PINNED.read_text())[case]
    assert pinned["case"] == list(CASES[case])
    built, given = _reports(*CASES[case])
    assert built == given == pinned["report"]


def test_the_pinned_cases_flag_what_they_inject() -> None:
    """The pins are not all quiet: each injected shift is flagged, the plain case not."""
    reports = {c["case"][3]: c["report"] for c in json.loads(PINNED.read_text())}
    assert reports["none"]["flagged"] == [] and not reports["none"]["label_shift_flagged"]
    assert "log_generation" in reports["generation_x10"]["flagged"]
    assert "tool" in reports["rename_grep"]["flagged"]
    assert "agent" in reports["agent_qa"]["flagged"]
    assert reports["success_up"]["label_shift_flagged"]


@contextmanager
def _python_events() -> Iterator[list[int]]:
    """Counts every Python call and line run inside (``sys.settrace``): a loop in Python
    counts each pass, work done inside numpy or torch counts nothing."""
    count = [0]

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        count[0] += 1
        return trace

    sys.settrace(trace)
    try:
        yield count
    finally:
        sys.settrace(None)


def test_the_python_work_does_not_grow_with_the_pool() -> None:
    """The same 200 new records against a 1,800- and a 7,800-record reference, with the
    numbers handed in and built: the report runs the same Python calls and lines, to
    within 1% (3,096 and 3,097 when written; at f277212d 34,695 and 70,175: the tool
    table was filled one Python assignment per tool of each distinct tool list, twice)."""
    counts: dict[str, list[int]] = {"given": [], "built": []}
    for records in (2000, 8000):
        columns, served = _pool(21, records, 200, "none")
        numeric = numeric_rows(columns, columns.labelled)
        drift.drift_report(columns, served, 0, numeric)  # torch's first-call set-up aside
        for mode, handed in (("given", numeric), ("built", None)):
            with _python_events() as count:
                report = drift.drift_report(columns, served, 0, handed)
            assert report is not None and 190 <= report.new_records <= 200
            counts[mode].append(count[0])
    for small, large in counts.values():
        assert large <= small * 1.01, counts


def _small_pool() -> tuple[PoolColumns, DataFingerprint, torch.Tensor]:
    columns, served = _pool(22, 1000, 300, "none")
    return columns, served, numeric_rows(columns, columns.labelled)


def test_too_few_new_records_is_no_report() -> None:
    """No new record (the served model read them all) or fewer than MIN_NEW: None, the
    run's report says no drift was measured."""
    columns, served = _pool(23, 600, drift.MIN_NEW - 1, "none")
    assert drift.drift_report(columns, served, 0) is None
    columns, _ = _pool(23, 600, 0, "none")
    keys = torch.from_numpy(np.sort(columns.key))
    everything = DataFingerprint(len(keys), "", torch.zeros(len(keys), dtype=torch.long), keys)
    assert drift.drift_report(columns, everything, 0) is None


def test_a_constant_feature_is_far_only_when_the_new_records_move_off_it() -> None:
    """A feature constant on both sides is at 0 and not flagged; constant on the
    reference and another value on the new records, it is at 1 and flagged."""
    columns, served, numeric = _small_pool()
    name = NUMERIC_FEATURES[0]
    same = numeric.clone()
    same[:, 0] = 3.0
    report = drift.drift_report(columns, served, 0, same)
    assert report is not None and report.features[name] == 0.0 and name not in report.flagged
    moved = same.clone()
    is_new = torch.from_numpy(~np.isin(columns.key, served.labelled.numpy()))
    moved[is_new, 0] = 4.0
    report = drift.drift_report(columns, served, 0, moved)
    assert report is not None and report.features[name] == 1.0 and name in report.flagged


def test_a_nan_number_is_a_clear_error() -> None:
    """A NaN among the numbers is refused with the feature named (at f277212d it made
    that feature's deciles NaN and its distance a silent 0)."""
    columns, served, numeric = _small_pool()
    numeric[5, 1] = float("nan")
    with pytest.raises(ValueError, match=f"{NUMERIC_FEATURES[1]!r}.*1 NaN"):
        drift.drift_report(columns, served, 0, numeric)


if __name__ == "__main__":  # write the pins (with the drift.py they are to pin)
    pins = []
    for c in CASES:
        built, given = _reports(*c)
        assert built == given, c
        pins.append({"case": list(c), "report": built})
    PINNED.write_text(json.dumps(pins, indent=1) + "\n")
    sys.stdout.write(f"wrote {len(pins)} reports to {PINNED}\n")
