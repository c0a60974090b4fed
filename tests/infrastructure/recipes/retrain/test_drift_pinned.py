"""The batched drift report is the per-draw one: the same flags, distances and thresholds
as the loop of one histogram pass per noise draw wrote, on generated pools.

The pinned reports (``drift_reports_before_batching.json``) were written by drift.py as
it was before its noise draws were batched (2c6d7b6d), with
``python tests/infrastructure/recipes/retrain/test_drift_pinned.py``: a pool of 2,000
records (a size whose pools the sample generator never changed), a share of it new,
the new records edited as the case says. The one case whose reference is sampled (its
DRIFT_SAMPLE 400) was pinned again at drift35, when the reference's sample came to be
drawn by record hash so that a kept one grows (``drift_reference``): its flags the same."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from drift_edits import edit_record

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import record_id_hash
from genesis_fp16_infrastructure.data.synthetic import generate_pool

PINNED = Path(__file__).with_name("drift_reports_before_batching.json")
RECORDS = 2000

# (seed, share of the pool new, edit of each new record, DRIFT_SAMPLE)
CASES: list[tuple[int, float, str, int]] = [
    (3, 0.5, "none", 50_000),
    (4, 0.1, "none", 50_000),
    (5, 0.9, "none", 50_000),
    (6, 0.3, "generation_x10", 50_000),
    (7, 0.5, "agent_qa", 50_000),
    (8, 0.2, "rename_grep", 50_000),
    (9, 0.5, "success_up", 50_000),
    (10, 0.6, "rename_grep", 400),
]


def _report(seed: int, share: float, edit: str, sample: int) -> dict[str, Any] | None:
    """The drift report of a pool whose first ``1 - share`` (in a seeded order) the
    served model read, the rest new and edited."""
    pool = generate_pool(RECORDS, seed=seed)
    ids = sorted(pool["trajectories"], key=lambda k: record_id_hash(f"{seed}:{k}"))
    cut = int(RECORDS * (1 - share))
    served = {**pool, "trajectories": {k: pool["trajectories"][k] for k in ids[:cut]}}
    served = json.loads(json.dumps(served))  # a copy: the edits are the grown pool's alone
    for n, key in enumerate(ids[cut:]):
        edit_record(edit, pool["trajectories"][key], n)
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "served.json", Path(tmp) / "grown.json"
        a.write_text(json.dumps(served))
        b.write_text(json.dumps(pool))
        seen, grown = read_trajectories(a), read_trajectories(b)
    before, drift.DRIFT_SAMPLE = drift.DRIFT_SAMPLE, sample
    try:
        report = drift.drift_report(grown.columns, fingerprint_of(seen.columns), seed)
    finally:
        drift.DRIFT_SAMPLE = before
    return None if report is None else report.to_json()


@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda i: f"{CASES[i][2]}-{CASES[i][1]}")
def test_the_report_is_the_one_the_per_draw_loop_wrote(case: int) -> None:
    """Each pinned case gives the report the old per-draw loop gave, field for field."""
    pinned = json.loads(PINNED.read_text())[case]
    assert pinned["case"] == list(CASES[case])
    assert _report(*CASES[case]) == pinned["report"]


def test_the_pinned_cases_flag_what_they_inject() -> None:
    """The pins are not all quiet: the injected shifts are flagged, the plain halves not."""
    flagged = {tuple(c["case"]): c["report"]["flagged"] for c in json.loads(PINNED.read_text())}
    assert flagged[(3, 0.5, "none", 50_000)] == []
    assert "log_generation" in flagged[(6, 0.3, "generation_x10", 50_000)]
    assert "agent" in flagged[(7, 0.5, "agent_qa", 50_000)]
    assert "tool" in flagged[(10, 0.6, "rename_grep", 400)]


if __name__ == "__main__":  # write the pins (with the drift.py they are to pin)
    pins = [{"case": list(c), "report": _report(*c)} for c in CASES]
    PINNED.write_text(json.dumps(pins, indent=1) + "\n")
    sys.stdout.write(f"wrote {len(pins)} reports to {PINNED}\n")
