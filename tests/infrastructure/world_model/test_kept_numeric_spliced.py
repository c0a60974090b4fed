"""Kept numeric rows after a new data file sorting among the old ones
(world_model.kept_numeric's splice): the read lays the new records among the kept pool's
(data.pool_splice), and the kept rows follow them: only the new records and those beside
them worked out, a splice frame appended, and every read of the file, cold or in memory,
the bits of working every record out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pool_files import ResidentReads
from test_kept_numeric import BASE, RECORDS, _bits, _ids, _worked_out

from genesis_fp16_infrastructure.data.pool_columns import SPLICED_FROM, PoolColumns, set_derived
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.world_model import features, kept_numeric, kept_numeric_file
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric
from genesis_fp16_infrastructure.world_model.kept_numeric_columns import SPLICE, WIDTH


class _Pool:
    """A data folder read as a resident run process reads it (``ResidentReads``), and the
    kept rows worked from it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folder = root / "data"
        self.memory = KeptInMemory(256 * 2**20)
        self.reads = ResidentReads(self.folder, root / "cache", self.memory)

    def write(self, name: str, records: list[dict[str, Any]]) -> None:
        self.reads.write(name, {**BASE, "trajectories": {r["trajectory_id"]: r for r in records}})

    def read(self) -> PoolColumns:
        return self.reads.read().columns

    def kept(self, memory: bool = True) -> KeptNumeric:
        return KeptNumeric(self.root / "kept", "data", self.memory if memory else None)


def _want(columns: PoolColumns) -> np.ndarray:
    """Every labelled record worked out, from a fresh read's index."""
    return _bits(features.numeric_rows(columns, columns.labelled))


def _split(held: set[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return (
        [r for i, r in enumerate(RECORDS) if i not in held],
        [RECORDS[i] for i in sorted(held)],
    )


# Records 100-104 are parents of kept records: a kept record names a new one (its depth
# moves), and the last 10 leaves and a few from the middle are new siblings.
HELD = {*range(100, 105), 31, 77, 150, 222, 290, 295, 299}


@pytest.mark.parametrize("name", ["a.json", "m.json"])
def test_a_new_file_sorting_among_the_old_is_laid_among_the_kept_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A new file sorting first (``a``) or between the old two (``m``): the kept rows are
    moved to their places, only the new records and those beside them are worked out,
    the file keeps its inode and grows by a splice frame, and a cold read of it gives the
    same bits."""
    old, new = _split(HELD)
    pool = _Pool(tmp_path)
    pool.write("b.json", old[:150])
    pool.write("n.json", old[150:])
    first = pool.read()
    pool.kept().rows(first)
    before = pool.kept().path.stat()
    pool.write(name, new)
    columns = pool.read()
    assert vars(columns).get(SPLICED_FROM) is not None, "the read did not splice"
    calls = _worked_out(monkeypatch)
    kept = pool.kept()
    got = kept.rows(columns)
    want = _want(columns)
    assert np.array_equal(_bits(got), want)
    assert kept.spliced == 1 and kept.from_memory == 1
    assert 0 < kept.computed < len(columns.labelled) // 4
    new_ids = {r["trajectory_id"] for r in new}
    assert new_ids & _ids(columns, columns.labelled) <= _ids(columns, np.concatenate(calls))
    after = kept.path.stat()
    assert after.st_ino == before.st_ino, "the file was written whole again"
    assert 0 < after.st_size - before.st_size < before.st_size // 4
    calls.clear()
    cold = pool.kept(memory=False)
    assert np.array_equal(_bits(cold.rows(columns)), want)
    assert calls == [] and cold.computed == 0 and cold.unreadable == 0


def test_rows_that_hold_keep_their_stamps_at_their_new_places(tmp_path: Path) -> None:
    """A kept row not worked out again keeps its stamp wherever it now lies (what a
    reader derived from it is taken by stamp: kept_outputs); a row worked out gets a
    new one."""
    old, new = _split(HELD)
    pool = _Pool(tmp_path)
    pool.write("b.json", old)
    first = pool.read()
    then = pool.kept().view(first)
    by_id = dict(zip(_ids_in_order(first), then.stamp.tolist(), strict=True))
    pool.write("a.json", new)
    columns = pool.read()
    kept = pool.kept()
    now = kept.view(columns)
    assert kept.spliced == 1
    held = [
        by_id.get(i) == s for i, s in zip(_ids_in_order(columns), now.stamp.tolist(), strict=True)
    ]
    assert len(columns.labelled) - kept.computed == sum(held) > len(by_id) // 2
    assert len(set(now.stamp.tolist())) == len(now.stamp)
    assert np.array_equal(now.numeric.view(np.int64), _want(columns))


def _ids_in_order(columns: PoolColumns) -> list[str]:
    """The labelled records' ids, in the pool's order."""
    return [columns.ids[r] for r in columns.labelled.tolist()]


def test_a_lent_view_is_left_as_it_was(tmp_path: Path) -> None:
    """A view of the kept rows still lent when the splice comes: the rows are laid in a
    store of their own, and the view keeps the bits it was lent with."""
    old, new = _split(HELD)
    pool = _Pool(tmp_path)
    pool.write("b.json", old)
    first = pool.read()
    pool.kept().rows(first)  # worked out: the caller's own rows, the kept ones a copy
    lent = pool.kept().view(first)  # the kept rows themselves
    assert not lent.numeric.flags.owndata
    bits = lent.numeric.copy()
    pool.write("a.json", new)
    columns = pool.read()
    kept = pool.kept()
    assert np.array_equal(_bits(kept.rows(columns)), _want(columns))
    assert kept.spliced == 1
    assert np.array_equal(lent.numeric, bits)


def test_splices_and_appends_read_back_frame_after_frame(tmp_path: Path) -> None:
    """Files added first, last and between, one at a time: each run's rows are the
    worked-out bits, in memory and from a cold read of every frame."""
    pool = _Pool(tmp_path)
    pool.write("m.json", RECORDS[:120])
    pool.kept().rows(pool.read())
    spliced = 0
    for name, part in [("c.json", RECORDS[120:160]), ("x.json", RECORDS[160:200]),
                       ("a.json", RECORDS[200:240]), ("n.json", RECORDS[240:300])]:  # fmt: skip
        pool.write(name, part)
        columns = pool.read()
        kept = pool.kept()
        assert np.array_equal(_bits(kept.rows(columns)), _want(columns))
        assert kept.appended == 1 and kept.unreadable == 0
        spliced += kept.spliced
        cold = pool.kept(memory=False)
        assert np.array_equal(_bits(cold.rows(columns)), _want(columns))
        assert cold.computed == 0 and cold.unreadable == 0
    assert spliced == 3  # c and a sorting first, n between m and x; x appended at the end


def test_a_note_that_does_not_hold_is_not_trusted(tmp_path: Path) -> None:
    """A pool whose splice note names the kept pool but places its records wrongly: the
    kept records' keys do not match at those places, so nothing is laid by the note; the
    rows are worked out as for any other change."""
    old, new = _split(HELD)
    pool = _Pool(tmp_path)
    pool.write("b.json", old)
    first = pool.read()
    pool.kept().rows(first)
    pool.write("a.json", new)
    columns = read_trajectories(pool.folder, keep_text=False).columns  # no splice of its own
    set_derived(columns, {SPLICED_FROM: (first.token, np.arange(len(first)))})
    kept = pool.kept()
    assert np.array_equal(_bits(kept.rows(columns)), _want(columns))
    assert kept.spliced == 0 and kept.appended == 0


def test_a_splice_frame_out_of_range_is_refused(tmp_path: Path) -> None:
    """A splice frame whose places fall outside the pool it makes is refused whole
    (counted), never applied: the rows are worked out and the file written again."""
    old, _ = _split(HELD)
    pool = _Pool(tmp_path)
    pool.write("b.json", old)
    first = pool.read()
    kept = pool.kept(memory=False)
    kept.rows(first)
    size = kept.path.stat().st_size
    n, k = len(first), len(first.labelled)
    empty = {name: np.zeros(0, dtype) for name, dtype in SPLICE.items()}
    bogus = {**empty, "numeric": np.zeros((0, WIDTH)), "parent_start": np.zeros(2, "<i8"),
             "key": np.zeros(1, "<u8"), "id_hash": np.zeros(1, "<i8"), "depth": np.zeros(1, "<i8"),
             "at": np.array([n + 5], "<i8")}  # fmt: skip
    kept_numeric_file.append_frame(
        kept.path, kept_numeric.NUMERIC_VERSION, bogus, size, n, k, "splice"
    )
    again = pool.kept(memory=False)
    assert np.array_equal(_bits(again.rows(first)), _want(first))
    assert again.unreadable == 1
