"""Kept numeric rows cost what is new (issue 90): the kept records' content keys are not
hashed again, a changed record's are, and the rows a scoring reads are lent read-only,
never written in place while lent."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from test_kept_numeric import RECORDS, _columns, _relabel
from test_kept_numeric_grown import _grown_pools, _want

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.world_model import content_keys, kept_numeric
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric


def _keyed(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray | None]:
    """The rows each call of content_keys hashed (None: the whole pool)."""
    calls: list[np.ndarray | None] = []
    real = content_keys.content_keys

    def counted(
        columns: PoolColumns, slots: np.ndarray, rows: np.ndarray | None = None
    ) -> np.ndarray:
        calls.append(None if rows is None else np.array(rows))
        return real(columns, slots, rows)

    monkeypatch.setattr(content_keys, "content_keys", counted)
    return calls


def _whole_keys(columns: PoolColumns) -> np.ndarray:
    return content_keys.content_keys(columns, content_keys.parent_hashes(columns))


def test_a_grown_pool_hashes_its_new_records_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept pool in memory, then records added at its end: content_keys hashes the
    new records alone (the kept ones' keys are the kept pool's), and the keys, the kept
    file and the rows are what hashing every record gives."""
    memory = KeptInMemory(64 * 2**20)
    first, grown, _ = _grown_pools(tmp_path)
    KeptNumeric(tmp_path / "cache", "data", memory).rows(first)
    calls = _keyed(monkeypatch)
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    rows = kept.view(grown).numeric
    assert len(calls) == 1 and calls[0] is not None
    assert np.array_equal(calls[0], np.arange(len(first), len(grown)))
    assert np.array_equal(rows.view(np.int64), _want(grown))
    calls.clear()
    again = KeptNumeric(tmp_path / "cache", "data", memory)
    assert np.array_equal(again.rows(grown).numpy().view(np.int64), _want(grown))
    assert again.computed == 0 and calls == []  # the same pool: nothing hashed
    assert np.array_equal(_kept_keys(memory, kept), _whole_keys(grown))


def _kept_keys(memory: KeptInMemory, kept: KeptNumeric) -> np.ndarray:
    """The content keys of the pool ``kept`` keeps in ``memory``."""
    state = memory.get(("kept_numeric", str(kept.path)), kept_numeric.identity_of(kept.path))
    return np.asarray(state.kept.key)


@pytest.mark.parametrize("change", ["relabelled", "edited"])
def test_a_changed_record_is_keyed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """The kept pool in memory, then one record relabelled or edited in place: that
    record alone is hashed again (its kept key is not believed), its key is the one
    hashing it gives, and the rows are the worked-out bits."""
    memory = KeptInMemory(64 * 2**20)
    columns = _columns(tmp_path / "data", {"a.json": RECORDS})
    KeptNumeric(tmp_path / "cache", "data", memory).rows(columns)
    records = copy.deepcopy(RECORDS)
    name = columns.ids[columns.labelled[len(columns.labelled) // 2]]
    target = next(i for i, r in enumerate(records) if r["trajectory_id"] == name)
    if change == "relabelled":
        _relabel(records[target])
    else:
        records[target]["code_changes"] += "\n+one more line"
    changed = _columns(tmp_path / "data", {"a.json": records})
    row = changed.ids.index(records[target]["trajectory_id"])
    calls = _keyed(monkeypatch)
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    got = kept.rows(changed)
    assert kept.from_memory == 1 and kept.computed >= 1
    assert calls[0] is not None and calls[0].tolist() == [row]
    assert np.array_equal(got.numpy().view(np.int64), _want(changed))
    keys = _kept_keys(memory, kept)
    assert np.array_equal(keys, _whole_keys(changed))
    assert keys[row] != _whole_keys(columns)[row]


def test_a_lent_view_cannot_be_written(tmp_path: Path) -> None:
    """The rows view lends (the kept rows themselves, no copy) and their stamps refuse a
    write; a write into the rows rows() hands out is found and never reaches a view: the
    kept pool is refused and read again."""
    memory = KeptInMemory(64 * 2**20)
    columns = _columns(tmp_path / "data", {"a.json": RECORDS})
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    kept.rows(columns)
    lent = kept.view(columns)
    with pytest.raises(ValueError, match="read-only"):
        lent.numeric[0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        lent.stamp[0] = 1
    own = kept.rows(columns)
    own[0, 0] = -1.0  # found before the next use: what is read then is the file's
    assert np.array_equal(kept.view(columns).numeric.view(np.int64), _want(columns))
    assert kept.written == 1


def test_kept_rows_lent_out_are_not_rewritten_in_place(tmp_path: Path) -> None:
    """A view lent, then a grown pool whose new records work kept rows out again (their
    siblings, their parents' depths): the lent view keeps its bits (the grown rows go to a
    store of their own); a row whose stamp stayed has the bits it had, and every row
    whose bits moved has a new stamp."""
    memory = KeptInMemory(64 * 2**20)
    first, grown, _ = _grown_pools(tmp_path)
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    kept.rows(first)
    lent = kept.view(first)
    before = lent.numeric.copy()
    after = KeptNumeric(tmp_path / "cache", "data", memory).view(grown)
    assert np.array_equal(lent.numeric, before)
    assert np.array_equal(after.numeric.view(np.int64), _want(grown))
    n = len(first.labelled)
    moved = ~np.all(after.numeric[:n].view(np.int64) == before.view(np.int64), axis=1)
    assert moved.any(), "no kept row was worked out again: the test proves nothing"
    same = after.stamp[:n] == lent.stamp
    assert same.any() and not (same & moved).any()


def test_an_unlabelled_record_retimed_is_keyed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record with no label (no labelled hash to change) given another time: it alone
    is hashed again, found by its own column, and its key is what hashing it gives."""
    memory = KeptInMemory(64 * 2**20)
    columns = _columns(tmp_path / "data", {"a.json": RECORDS})
    KeptNumeric(tmp_path / "cache", "data", memory).rows(columns)
    unlabelled = np.setdiff1d(np.arange(len(columns)), columns.labelled)
    assert len(unlabelled), "every record labelled: the test proves nothing"
    name = columns.ids[unlabelled[0]]
    records = copy.deepcopy(RECORDS)
    record = next(r for r in records if r["trajectory_id"] == name)
    record["created_at"] = "2031-01-01T00:00:00+00:00"
    changed = _columns(tmp_path / "data", {"a.json": records})
    row = changed.ids.index(name)
    calls = _keyed(monkeypatch)
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    got = kept.rows(changed)
    assert calls[0] is not None and calls[0].tolist() == [row]
    assert np.array_equal(got.numpy().view(np.int64), _want(changed))
    keys = _kept_keys(memory, kept)
    assert np.array_equal(keys, _whole_keys(changed)) and keys[row] != _whole_keys(columns)[row]


def test_rows_in_memory_are_the_kept_rows_not_a_copy(tmp_path: Path) -> None:
    """In a resident run process, rows() of the kept pool hands out the kept rows
    themselves (one store, no copy), the worked-out rows bit for bit, nothing refused."""
    memory = KeptInMemory(64 * 2**20)
    columns = _columns(tmp_path / "data", {"a.json": RECORDS})
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    kept.rows(columns)  # worked out: the caller's own, what is kept a copy of them
    first = kept.rows(columns)
    again = kept.rows(columns)
    assert again.data_ptr() == first.data_ptr(), "rows() copied the kept rows"
    assert np.array_equal(again.numpy().view(np.int64), _want(columns))
    assert kept.written == 0 and kept.from_memory == 2


_WRITES = {
    "add_": lambda t: t[2].add_(1.0),
    "setitem": lambda t: t.__setitem__((3, 0), -7.0),
    "index_put": lambda t: t.index_put_(
        (torch.tensor([1]),), torch.zeros(t.shape[1], dtype=t.dtype)
    ),
    "out=": lambda t: torch.mul(t[:4], 2.0, out=t[:4]),
    "a view's view": lambda t: t.view(-1)[5:9].zero_(),
}


@pytest.mark.parametrize("how", sorted(_WRITES))
def test_a_write_into_rows_handed_out_is_refused(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A caller writing into the rows rows() handed out (in place, through a view, by
    ``out=``): the next use finds it, refuses the kept pool (counted, logged) and gives
    the worked-out rows, read again from the file, not the written ones."""
    memory = KeptInMemory(64 * 2**20)
    columns = _columns(tmp_path / "data", {"a.json": RECORDS})
    want = _want(columns)
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    kept.rows(columns)
    handed = kept.rows(columns)
    _WRITES[how](handed)
    assert not np.array_equal(handed.numpy().view(np.int64), want), "the write wrote nothing"
    again = KeptNumeric(tmp_path / "cache", "data", memory)
    got = again.rows(columns)
    assert again.written == 1 and again.from_memory == 0
    assert np.array_equal(got.numpy().view(np.int64), want)
    assert "written into by a caller" in caplog.text
    assert np.array_equal(again.view(columns).numeric.view(np.int64), want)


def test_rows_handed_out_are_not_rewritten_in_place(tmp_path: Path) -> None:
    """rows() handed out, then a grown pool whose new records work kept rows out again:
    the rows handed out keep their bits (the grown rows go to a store of their own)."""
    memory = KeptInMemory(64 * 2**20)
    first, grown, _ = _grown_pools(tmp_path)
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    kept.rows(first)
    handed = kept.rows(first)
    before = handed.clone()
    after = KeptNumeric(tmp_path / "cache", "data", memory).rows(grown)
    assert torch.equal(handed, before)
    assert np.array_equal(after.numpy().view(np.int64), _want(grown))
    n = len(first.labelled)
    assert not torch.equal(after[:n], before), "no kept row was worked out again"


def test_the_pool_the_rows_were_made_for_is_not_keyed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scorings' view grows the kept pool; the run's encode then asks for the same
    pool (its columns' token): the kept rows, no key worked out or compared. The same
    records in columns of another token are keyed and compared (and found unchanged),
    and a file changed behind memory is read, not the rows made for the pool."""
    memory = KeptInMemory(64 * 2**20)
    first, grown, _ = _grown_pools(tmp_path)
    KeptNumeric(tmp_path / "cache", "data", memory).rows(first)
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    lent = kept.view(grown).numeric
    asked: list[int] = []
    real = kept_numeric.keyed

    def counted(columns: PoolColumns, slots: np.ndarray, known: object) -> np.ndarray:
        asked.append(len(columns))
        return real(columns, slots, known)  # type: ignore[arg-type]

    monkeypatch.setattr(kept_numeric, "keyed", counted)
    again = KeptNumeric(tmp_path / "cache", "data", memory)
    rows = again.rows(grown)
    assert asked == [] and again.reused == len(grown.labelled) and again.computed == 0
    assert rows.numpy().ctypes.data == lent.ctypes.data  # the kept rows themselves
    same = dataclasses.replace(grown)  # the same arrays, another pool object and token
    assert same.token is not grown.token
    other = KeptNumeric(tmp_path / "cache", "data", memory)
    assert np.array_equal(other.rows(same).numpy().view(np.int64), _want(grown))
    assert asked == [len(grown)] and other.computed == 0
    asked.clear()
    assert np.array_equal(other.rows(same).numpy().view(np.int64), _want(grown))
    assert asked == []  # found unchanged for ``same``: made for it now
    path = other.path
    path.write_bytes(path.read_bytes())  # another identity: memory is not believed
    reread = KeptNumeric(tmp_path / "cache", "data", memory)
    assert np.array_equal(reread.rows(grown).numpy().view(np.int64), _want(grown))
    assert reread.from_memory == 0 and asked == [len(grown)]
