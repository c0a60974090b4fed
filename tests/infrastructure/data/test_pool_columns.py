"""A read's columns give the same records a record-at-a-time read makes (issue 36)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from genesis_fp16_infrastructure.data.attempt_numbers import own_numbers, pack
from genesis_fp16_infrastructure.data.file_records import FileRecord, RecordBlock
from genesis_fp16_infrastructure.data.lineage import PoolEntry
from genesis_fp16_infrastructure.data.pool_columns import collect
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.record_key import labelled_hash, record_id_hash
from genesis_fp16_infrastructure.data.schema import AttemptInput, Example, Label
from genesis_fp16_infrastructure.data.synthetic import generate_pool


def _record(
    tid: str, parents: tuple[str, ...], label: Label | None, **fields: object
) -> FileRecord:
    attempt = AttemptInput(trajectory_id=tid, parent_ids=parents, **fields)  # type: ignore[arg-type]
    object.__setattr__(attempt, "own", pack(own_numbers(attempt)))
    key = None if label is None else labelled_hash(tid, attempt, label)
    score = None if label is None else label.score
    return FileRecord(tid, attempt, label, score, key, record_id_hash(tid))


def _files() -> list[list[FileRecord]]:
    """Two files: a duplicate id (the first wins), an unlabelled record that is still a
    parent, parents outside the pool, a record with no time, repeated agents and tools."""
    win, loss = Label(True, 0.9, "success"), Label(False, None, "failure")
    first = [
        _record("a", (), win, agent="x", tools_used=("t1", "t2"), created=1.0),
        _record("b", ("a", "ghost"), loss, agent="y", operator="revision", created=2.0),
        _record("p", ("a",), None, agent="x", tools_used=("t1", "t2"), created=3.0),
        _record("c", ("p", "b", "ghost2", "ghost"), win, agent="x", reasoning_pattern="r"),
    ]
    second = [
        _record("b", (), win, agent="z", created=9.0),  # a duplicate: the first b wins
        _record("d", ("c", "ghost2"), loss, agent="z", tools_used=("t3",), created=5.0,
                code_changes="@@ -1 +1 @@\n+a\n-b", modified_files=("x.py",)),
    ]  # fmt: skip
    return [first, second]


@pytest.mark.parametrize("keep_text", [True, False])
def test_columns_build_the_objects_a_record_at_a_time_read_made(keep_text: bool) -> None:
    files = _files()
    columns, duplicates = collect([RecordBlock.of(f, []) for f in files], keep_text)
    kept: dict[str, FileRecord] = {}
    for record in (r for f in files for r in f):
        kept.setdefault(record.trajectory_id, record)
    assert duplicates == 1 and columns.ids == list(kept)
    expected = [
        Example(r.trajectory_id, r.attempt, r.label) for r in kept.values() if r.label is not None
    ]
    examples = columns.examples()
    if keep_text:
        assert examples == expected
    else:  # the change's text and files are not kept; the rest is
        assert [e.trajectory_id for e in examples] == [e.trajectory_id for e in expected]
        assert [e.label for e in examples] == [e.label for e in expected]
        assert all(e.attempt.code_changes == "" for e in examples)
    assert [e.attempt.own for e in examples] == [e.attempt.own for e in expected]
    assert [e.key for e in examples] == [kept[e.trajectory_id].key for e in examples]
    assert [e.id_key for e in examples] == [record_id_hash(e.trajectory_id) for e in examples]
    pool = columns.pool()
    assert pool.entries == {
        r.trajectory_id: PoolEntry(
            r.score, r.attempt.parent_ids, r.attempt.operator, r.attempt.created
        )
        for r in kept.values()
    }
    assert pool.scores == {k: r.score for k, r in kept.items() if r.score is not None}
    # A parent named by a record of the pool is that record's id object (held once).
    assert pool.entries["c"].parents[0] is columns.ids[2]
    # Parents as rows: in the pool, or numbered after it in the order first named.
    assert columns.outside == ["ghost", "ghost2"]
    assert columns.parent.tolist() == [0, 5, 0, 2, 1, 6, 5, 3, 6]
    assert columns.parent_start.tolist() == [0, 0, 2, 3, 7, 9]
    np.testing.assert_array_equal(columns.labelled, [0, 1, 3, 4])


def test_a_read_keeps_its_records_as_columns_and_builds_objects_only_when_asked(
    tmp_path: Path,
) -> None:
    pool = generate_pool(200, seed=3)
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(pool))
    data = read_trajectories(path, keep_text=False)
    assert "examples" not in vars(data) and "pool" not in vars(data)
    assert data.labelled == len(data.examples) > 0
    assert len(data.pool.entries) == len(data.columns) == 200 - data.duplicates


def test_a_damaged_block_is_refused() -> None:
    block = RecordBlock.of(_files()[0], [])
    block.check()
    with pytest.raises(ValueError, match="differ in length"):
        RecordBlock(**{**_fields(block), "generation": block.generation[:-1]}).check()
    with pytest.raises(ValueError, match="name no value"):
        RecordBlock(**{**_fields(block), "agents": block.agents[:1]}).check()


def test_a_damaged_block_of_bytes_columns_is_refused() -> None:
    """A short, partial or out-of-range bytes column (numbers, flags, parent hashes)."""
    block = RecordBlock.of(_files()[0], [])
    damaged: list[dict[str, Any]] = [
        {"created": block.created[:-8]},
        {"timed": block.timed + b"\x01"},
        {"score": block.score[:-1]},  # a partial value
        {"label_scored": block.label_scored[:-1]},
        {"parent_hash": block.parent_hash[:-8]},
        {"id_key": block.id_key + b"\x00" * 8},
    ]
    for change in damaged:
        with pytest.raises(ValueError, match="differ in length"):
            RecordBlock(**{**_fields(block), **change}).check()
    success = np.frombuffer(block.success, np.int8).copy()
    outcome = np.frombuffer(block.outcome, np.int8).copy()
    wrong: list[dict[str, Any]] = [
        {"success": _with(success, 0, 2)},
        {"outcome": _with(outcome, 0, 100)},
        {"success": _with(success, 0, -1)},  # no label, but an outcome
        {"scored": b"\x02" + block.scored[1:]},
    ]
    for change in wrong:
        with pytest.raises(ValueError, match="name no value"):
            RecordBlock(**{**_fields(block), **change}).check()


def _with(codes: np.ndarray, at: int, value: int) -> bytes:
    changed = codes.copy()
    changed[at] = value
    return changed.tobytes()


def _fields(block: RecordBlock) -> dict[str, object]:
    return {name: getattr(block, name) for name in block.__struct_fields__}
