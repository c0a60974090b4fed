"""A candidate cut short is continued by a run that asks the same, or closed with why."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from genesis_fp16_infrastructure.agent_folder.candidates import (
    list_candidates,
    new_candidate,
    read_candidates,
    read_verdict,
    write_verdict,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import CandidateMeta
from genesis_fp16_infrastructure.agent_folder.pointer import pointer_lock
from genesis_fp16_infrastructure.agent_folder.transaction import recording, transaction
from genesis_fp16_infrastructure.judging.unfinished import (
    decide_unfinished,
    settle_unfinished,
    take_unfinished,
)

META: dict[str, Any] = {
    "fingerprint": "abc123",
    "records": 10,
    "continues": "served-1",
    "data_path": "/data",
    "seed": 0,
    "options": {},
}


def _take(folder: Path, meta: dict[str, Any]) -> tuple[Path | None, dict[str, str]]:
    """The candidate taken, and the reason of each one this call closed (undecided)."""
    before = {c.name for c in list_candidates(folder) if read_verdict(c).outcome is not None}
    taken = take_unfinished(folder, meta)
    closed = {}
    for candidate in list_candidates(folder):
        verdict = read_verdict(candidate)
        if candidate.name not in before and verdict.outcome is not None:
            assert verdict.outcome == "undecided"
            closed[candidate.name] = str(verdict.reason)
    return taken, closed


def test_the_newest_unfinished_candidate_of_the_same_request_is_continued(tmp_path: Path) -> None:
    """Of two candidates cut short on the same request, the newer is continued and the
    older closed, naming the one continued; a judged candidate is left alone."""
    judged = new_candidate(tmp_path, META)
    write_verdict(judged, {"outcome": "rejected", "reason": "worse"})
    older = new_candidate(tmp_path, META)
    time.sleep(0.01)
    newer = new_candidate(tmp_path, META)
    taken, closed = _take(tmp_path, META)
    assert taken == newer
    assert list(closed) == [older.name] and newer.name in closed[older.name]
    assert closed[older.name].startswith("not continued: ")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"fingerprint": "other"}, "data files changed or are gone"),
        ({"continues": "served-2"}, "it continued model served-1; this run continues served-2"),
        ({"seed": 1}, "another seed"),
        ({"options": {"lr": "0.1"}}, "another options"),
        ({"data_path": "/elsewhere"}, "another data path"),
    ],
)
def test_a_candidate_asked_otherwise_is_closed_with_its_reason(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    """Other data, another served model, seed, options or data path: not continued; the
    run trains a new candidate and the old one is closed with the reason."""
    cut = new_candidate(tmp_path, META)
    taken, closed = _take(tmp_path, {**META, **change})
    assert taken is None
    assert said in closed[cut.name]


def test_nothing_unfinished_takes_nothing(tmp_path: Path) -> None:
    """No candidates folder, or only judged ones: a new candidate, nothing closed."""
    assert _take(tmp_path, META) == (None, {})
    write_verdict(new_candidate(tmp_path, META), {"outcome": "promoted", "reason": "first"})
    assert _take(tmp_path, META) == (None, {})


def test_the_closes_are_one_transaction_under_the_pointers_lock(tmp_path: Path) -> None:
    """Every candidate closed by one call is staged in one transaction: one commit that
    wrote their verdicts, and none written while another writer holds the pointer's lock
    (a rollback or a prune in another thread), all once it is released."""
    first, second = new_candidate(tmp_path, META), new_candidate(tmp_path, META)
    asked = {**META, "seed": 1}
    done: list[Any] = []
    with recording() as committed, pointer_lock(tmp_path):
        closing = threading.Thread(target=lambda: done.append(take_unfinished(tmp_path, asked)))
        closing.start()
        closing.join(timeout=1.0)
        assert closing.is_alive()  # waits for the lock
        assert [read_verdict(c).outcome for c in (first, second)] == [None, None]
    closing.join(timeout=60)
    assert done == [None]
    assert [read_verdict(c).outcome for c in (first, second)] == ["undecided", "undecided"]
    with recording() as committed:
        third, fourth = new_candidate(tmp_path, META), new_candidate(tmp_path, META)
        assert take_unfinished(tmp_path, asked) is None
    assert len(committed) == 1 and set(committed[0].verdicts) == {third.name, fourth.name}


def test_the_candidates_after_settling_are_those_the_folder_holds(tmp_path: Path) -> None:
    """What the run asks next is asked of the candidates as the settle left them: each it
    closed carries the verdict its transaction wrote (outcome and reason, as read back);
    the one it continues and every judged one are as they were read."""
    judged = new_candidate(tmp_path, META)
    write_verdict(judged, {"outcome": "rejected", "reason": "worse"})
    closed, continued = new_candidate(tmp_path, {**META, "seed": 1}), new_candidate(tmp_path, META)
    taken = settle_unfinished(tmp_path, CandidateMeta.from_json(META), read_candidates(tmp_path))
    assert taken.candidate == continued
    assert [c.path for c in taken.candidates] == [judged, closed, continued]
    for kept, read in zip(taken.candidates, read_candidates(tmp_path), strict=True):
        assert (kept.verdict.outcome, kept.verdict.reason) == (
            read.verdict.outcome,
            read.verdict.reason,
        )
        assert kept.meta == read.meta
    assert taken.candidates[1].verdict.outcome == "undecided"


def test_deciding_writes_nothing_and_staging_writes_the_closes_in_one_commit(
    tmp_path: Path,
) -> None:
    """``decide_unfinished`` only decides: no verdict file is written until its closes
    are staged in a transaction, whose one commit writes them all, newest first, as
    ``settle_unfinished`` does; the candidates it returns already carry those verdicts."""
    older, newer = new_candidate(tmp_path, META), new_candidate(tmp_path, META)
    asked = CandidateMeta.from_json({**META, "seed": 1})
    taken = decide_unfinished(asked, read_candidates(tmp_path))
    assert taken.candidate is None and [p for p, _ in taken.closing] == [newer, older]
    assert [read_verdict(c).outcome for c in (older, newer)] == [None, None]
    assert [c.verdict.outcome for c in taken.candidates] == ["undecided", "undecided"]
    with recording() as committed, transaction(tmp_path) as tx:
        taken.stage(tx)
    assert [done.verdicts for done in committed] == [(newer.name, older.name)]
    assert [read_verdict(c).outcome for c in (older, newer)] == ["undecided", "undecided"]
