"""A read's columns give the same records a record-at-a-time read makes (issue 36)."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from genesis_fp16_infrastructure.data import file_blocks, pool_columns, pool_join
from genesis_fp16_infrastructure.data.file_records import (
    BlockWriter,
    FileRecord,
    RecordBlock,
    own_numbers,
    pack,
)
from genesis_fp16_infrastructure.data.lineage import PoolEntry
from genesis_fp16_infrastructure.data.pool_join import collect
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import (
    AttemptInput,
    Example,
    Label,
    labelled_hash,
    record_id_hash,
)
from genesis_fp16_infrastructure.data.synthetic import generate_pool


def _record(
    tid: str, parents: tuple[str, ...], label: Label | None, **fields: object
) -> FileRecord:
    attempt = AttemptInput(trajectory_id=tid, parent_ids=parents, **fields)  # type: ignore[arg-type]
    object.__setattr__(attempt, "own", pack(own_numbers(attempt)))
    score = None if label is None else label.score
    return FileRecord(tid, attempt, label, score)


def _block(records: list[FileRecord]) -> RecordBlock:
    """The block a read writes of ``records`` (with their text)."""
    writer = BlockWriter(keep_text=True)
    for record in records:
        writer.add(record)
    return writer.block([])


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
    columns, duplicates = collect([_block(f) for f in files], keep_text)
    kept: dict[str, FileRecord] = {}
    for record in (r for f in files for r in f):
        kept.setdefault(record.trajectory_id, record)
    assert duplicates == 1 and columns.ids == tuple(kept)
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
    kept_labelled = [kept[e.trajectory_id] for e in examples]
    assert columns.key.tolist() == [
        labelled_hash(r.trajectory_id, r.attempt, r.label) for r in kept_labelled if r.label
    ]
    ids = columns.id_hash[columns.labelled].tolist()
    assert ids == [record_id_hash(e.trajectory_id) for e in examples]
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
    block = _block(_files()[0])
    block.check()
    with pytest.raises(ValueError, match="differ in length"):
        RecordBlock(**{**_fields(block), "generation": block.generation[:-1]}).check()
    with pytest.raises(ValueError, match="name no value"):
        RecordBlock(**{**_fields(block), "agents": block.agents[:1]}).check()


def test_a_damaged_block_of_bytes_columns_is_refused() -> None:
    """A short, partial or out-of-range bytes column (numbers, flags, parent hashes)."""
    block = _block(_files()[0])
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


def test_joined_blocks_are_the_block_of_both_files_records() -> None:
    """An appended file's head and new lines join into the block a whole read makes."""
    first, second = _files()
    joined = RecordBlock.concat([_block(first), _block(second)])
    joined.check()
    assert _fields(joined) == _fields(_block(first + second))


@pytest.mark.parametrize("keep_text", [True, False])
def test_a_file_parsed_a_chunk_at_a_time_reads_as_one_parsed_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_text: bool
) -> None:
    """A large file's records become a block every BLOCK_RECORDS (BATCH_RECORDS on the
    fast path): the read's columns, its quarantine and its counts are those of a read
    that parsed the file in one block."""
    lines = [json.dumps(r) for r in generate_pool(40, seed=5)["trajectories"].values()]
    lines.insert(17, '{"trajectory_id": "broken", "status": ')  # quarantined, mid-chunk
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join(lines) + "\n")

    def read(block_records: int) -> tuple[Any, list[str]]:
        monkeypatch.setattr(file_blocks, "BLOCK_RECORDS", block_records)
        monkeypatch.setattr(file_blocks, "BATCH_RECORDS", block_records)  # the fast path's
        quarantine = tmp_path / f"quarantine-{block_records}.jsonl"
        data = read_trajectories(path, quarantine=quarantine, keep_text=keep_text)
        return data, quarantine.read_text().splitlines()

    (whole, whole_bad), (chunked, chunked_bad) = read(10_000), read(3)
    assert chunked_bad == whole_bad and len(whole_bad) == 1
    assert (chunked.quarantined, chunked.duplicates, chunked.labelled) == (
        whole.quarantined, whole.duplicates, whole.labelled,
    )  # fmt: skip
    assert chunked.columns.ids == whole.columns.ids
    assert chunked.examples == whole.examples and chunked.pool.entries == whole.pool.entries


def _with(codes: np.ndarray, at: int, value: int) -> bytes:
    changed = codes.copy()
    changed[at] = value
    return changed.tobytes()


def test_ids_are_matched_by_hash_when_no_two_ids_share_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a shared hash collect never builds the dict of every id."""

    def refused(*args: object) -> object:
        raise AssertionError("matched by string without a shared hash")

    monkeypatch.setattr(pool_join, "_by_string", refused)
    columns, duplicates = collect([_block(f) for f in _files()], True)
    assert duplicates == 1 and columns.outside == ["ghost", "ghost2"]


@pytest.mark.parametrize(
    ("tid", "like"),
    [("d", "a"), ("b", "c"), ("a", "a2")],  # as an earlier id, a later one, an unlabelled one
)
def test_two_ids_with_one_hash_are_matched_by_string(tid: str, like: str) -> None:
    """Records of different ids whose hashes are forged equal: the same pool."""
    files = _files()
    files[1].append(_record("a2", ("a",), None, agent="z"))
    blocks = [_forged(b, "id_key", b.trajectory_id, {tid: like}) for b in _blocks(files)]
    _assert_record_at_a_time(files, blocks, forged={tid: like})


@pytest.mark.parametrize("parent", ["ghost", "p"])
def test_a_parent_with_another_records_hash_is_matched_by_string(parent: str) -> None:
    """A parent whose forged hash is another record's ("ghost" as "a", "p" as "d"):
    still the record it names, or outside the pool."""
    files = _files()
    like = {"ghost": "a", "p": "d"}[parent]
    blocks = [_forged(b, "parent_hash", b.parent_ids, {parent: like}) for b in _blocks(files)]
    columns = _assert_record_at_a_time(files, blocks, forged={})
    assert columns.outside == ["ghost", "ghost2"]
    assert columns.parent.tolist() == [0, 5, 0, 2, 1, 6, 5, 3, 6]


def test_matching_by_hash_and_by_string_give_the_same_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many files of repeated ids and outside parents: every column the same."""
    rng = random.Random(7)
    ids = [f"t{i}" for i in range(60)]
    files = [
        [
            _record(rng.choice(ids), tuple(rng.sample([*ids, "x", "y"], rng.randrange(4))),
                    rng.choice([None, Label(True, 0.5, "success"), Label(False, None, "failure")]),
                    agent=rng.choice("uvw"), created=rng.choice([None, 1.5]),
                    generation=rng.randrange(5))
            for _ in range(rng.randrange(1, 40))
        ]
        for _ in range(6)
    ]  # fmt: skip
    blocks = _blocks(files)
    _assert_record_at_a_time(files, blocks, forged={})  # duplicates' parents left out
    by_hash, duplicates = collect(blocks, True)
    monkeypatch.setattr(pool_join, "_by_hash", lambda *args: None)
    by_string, again = collect(blocks, True)
    assert duplicates == again > 0 and by_hash.outside and by_hash.ids == by_string.ids
    for name in vars(by_hash):
        mine, theirs = getattr(by_hash, name), getattr(by_string, name)
        if isinstance(mine, np.ndarray):
            assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, name
            np.testing.assert_array_equal(mine, theirs, err_msg=name)
        elif isinstance(mine, pool_columns.Coded):
            assert mine.values == theirs.values, name
            np.testing.assert_array_equal(mine.codes, theirs.codes, err_msg=name)
        else:
            assert mine == theirs, name


def _blocks(files: list[list[FileRecord]]) -> list[RecordBlock]:
    return [_block(f) for f in files]


def _forged(block: RecordBlock, column: str, names: list[str], like: dict[str, str]) -> RecordBlock:
    """``block`` with the hash of each name in ``like`` replaced by another id's."""
    hashes = np.frombuffer(getattr(block, column), "<i8").copy()
    for i, name in enumerate(names):
        if name in like:
            hashes[i] = record_id_hash(like[name])
    return msgspec.structs.replace(block, **{column: hashes.tobytes()})


def _assert_record_at_a_time(
    files: list[list[FileRecord]], blocks: list[RecordBlock], forged: dict[str, str]
) -> Any:
    """The columns of ``blocks`` build the objects a record-at-a-time read makes."""
    columns, duplicates = collect(blocks, True)
    kept: dict[str, FileRecord] = {}
    for record in (r for f in files for r in f):
        kept.setdefault(record.trajectory_id, record)
    assert columns.ids == tuple(kept) and duplicates == sum(map(len, files)) - len(kept)
    examples = columns.examples()
    assert examples == [
        Example(r.trajectory_id, r.attempt, r.label) for r in kept.values() if r.label is not None
    ]
    ids = {e.trajectory_id: forged.get(e.trajectory_id, e.trajectory_id) for e in examples}
    hashes = columns.id_hash[columns.labelled].tolist()
    assert hashes == [record_id_hash(ids[e.trajectory_id]) for e in examples]
    assert columns.pool().entries == {
        r.trajectory_id: PoolEntry(
            r.score, r.attempt.parent_ids, r.attempt.operator, r.attempt.created
        )
        for r in kept.values()
    }
    return columns


def _fields(block: RecordBlock) -> dict[str, object]:
    return {name: getattr(block, name) for name in block.__struct_fields__}


def test_a_coded_column_converted_by_its_values_is_each_row_converted() -> None:
    """``Coded.take_as`` says what converting each row's value says (a tuple value stays
    one value, None converted too), each distinct value converted once."""
    coded = pool_columns.Coded.of([("a", "b"), None, ("a", "b"), (), None, "x"])
    calls: list[object] = []

    def said(value: object) -> str:
        calls.append(value)
        return "-" if value is None else repr(value)

    rows = np.array([5, 0, 1, 2, 2, 3, 4])
    assert coded.take_as(rows, said) == [said(v) for v in coded.take(rows)]
    assert len(calls) == len(coded.values) + len(rows)
    assert coded.take_as(np.array([], np.int64), said) == []


def test_appended_writes_after_the_last_growth_and_never_into_an_older_pool() -> None:
    """``appended`` is ``np.concatenate``, read-only; a column grown again writes its
    new rows into the room its buffer kept (no copy of the old rows), and a growth of an
    older column of that buffer (no longer its filled rows) copies instead, leaving the
    later column's rows as they were."""
    own = np.arange(40, dtype=np.float64).reshape(20, 2)
    grown = pool_columns.appended(own, np.full((3, 2), -1.0))
    assert np.array_equal(grown, np.concatenate([own, np.full((3, 2), -1.0)]))
    assert not grown.flags.writeable and not np.shares_memory(grown, own)
    with pytest.raises(ValueError, match="read-only"):
        grown[0, 0] = 5.0
    again = pool_columns.appended(grown, np.full((1, 2), -2.0))
    assert np.shares_memory(again, grown)  # the new row written after the old ones
    assert len(again) == 24 and again[-1].tolist() == [-2.0, -2.0]
    other = pool_columns.appended(grown, np.full((1, 2), -3.0))  # grown is not the tip now
    assert not np.shares_memory(other, again)
    assert again[-1].tolist() == [-2.0, -2.0] and other[-1].tolist() == [-3.0, -3.0]
    assert np.array_equal(other[:23], grown) and np.array_equal(again[:23], grown)
    # A dtype the old buffer cannot hold: a new buffer of the joined dtype.
    ints = pool_columns.appended(np.arange(3), np.arange(2))
    mixed = pool_columns.appended(ints, np.array([0.5]))
    assert mixed.dtype == np.float64 and mixed.tolist() == [0, 1, 2, 0, 1, 0.5]


def test_the_room_a_grown_column_keeps_is_counted() -> None:
    """``held_bytes`` says the bytes of a grown pool's buffers beyond its arrays': what
    the memory store's estimate of the arrays alone would leave out."""
    columns, _ = collect([_block(f) for f in _files()] * 4, keep_text=False)
    assert pool_columns.held_bytes(columns) == 0
    grown = pool_columns.appended(columns.score, np.zeros(20))
    total = len(columns) + 20
    room = (total // pool_columns.HEADROOM) * 8
    assert room > 0
    assert grown.base is not None and grown.base.nbytes - grown.nbytes == room
    assert pool_columns.held_bytes(dataclasses.replace(columns, score=grown)) == room


def test_a_read_only_column_becomes_a_tensor_over_its_memory_with_no_warning() -> None:
    """``column_tensor``: a frozen pool column read as a tensor, no copy and no torch
    warning (a new process: torch warns of a read-only array once a process, so a
    daemon's log would carry it)."""
    code = (
        "import numpy as np\n"
        "from genesis_fp16_infrastructure.data.pool_columns import column_tensor\n"
        "a = np.arange(6)\n"
        "a.flags.writeable = False\n"
        "t = column_tensor(a)\n"
        "assert t.data_ptr() == a.__array_interface__['data'][0] and t.tolist() == list(range(6))\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", code], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
