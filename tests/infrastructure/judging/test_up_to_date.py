"""An up-to-date judged run's data report: from the records it scored and the ids the
served model knew."""

from __future__ import annotations

import numpy as np

from genesis_fp16_infrastructure.contract import split
from genesis_fp16_infrastructure.contract.record_losses import RecordLosses
from genesis_fp16_infrastructure.judging.up_to_date import data_unchanged


def test_a_shrunk_pool_reports_the_known_records_it_no_longer_holds() -> None:
    """300 current records, all known among the served model's 600: none new, 300
    removed, the previous count the known ones; the same records give the same
    fingerprint, whatever their order."""
    current = [f"r{i}" for i in range(300)]
    known = np.sort(split.id_hashes(current + [f"gone{i}" for i in range(300)]))
    report = data_unchanged(RecordLosses.of(current, [0.1] * 300), known)
    assert (report.records, report.previous_records, report.new, report.removed) == (
        300,
        600,
        0,
        300,
    )
    assert report.change == "unchanged" and report.checked_by == "records"
    again = data_unchanged(RecordLosses.of(current[::-1], [0.1] * 300), known)
    assert again.fingerprint == report.fingerprint
    assert data_unchanged(RecordLosses.of(current, [0.1] * 300), None).removed is None


def test_removed_counts_the_records_the_model_trained_on_when_it_names_them() -> None:
    """A model that names what it trained on: removed is those of them gone (0 when it
    trained on current records alone, whatever else it knew); naming none: the known."""
    current = [f"r{i}" for i in range(300)]
    known = np.sort(split.id_hashes(current + [f"gone{i}" for i in range(300)]))
    losses = RecordLosses.of(current, [0.1] * 300)
    assert data_unchanged(losses, known, np.sort(split.id_hashes(current[:250]))).removed == 0
    named = np.sort(split.id_hashes([*current[:250], "gone1", "gone2"]))
    assert data_unchanged(losses, known, named).removed == 2
    assert data_unchanged(losses, known, None).removed == 300
