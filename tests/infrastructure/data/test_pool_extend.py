"""A later read in a resident process grows the kept pool by new files' records alone
(data.pool_extend, issue 90), and what it makes is a fresh read's, array for array."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from genesis_fp16_infrastructure.data import fingerprint, pool_columns, pool_join
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint, fingerprint_of
from genesis_fp16_infrastructure.data.manifest import Manifest, scan_files
from genesis_fp16_infrastructure.data.pool_columns import (
    GROWN_FROM,
    IdRank,
    PoolColumns,
    set_derived,
)
from genesis_fp16_infrastructure.data.pool_extend import extended
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink
from genesis_fp16_infrastructure.data.readers import ReadResult, _file_records, read_trajectories
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.synthetic import generate_replay_records
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory

_TEMPLATES = generate_replay_records(6, seed=3, agent="qa")

# One record: (id number, parents' numbers, agent, template), or None: a line that is not
# JSON (quarantined). Ids t0-t11 as records, t0-t15 as parents: duplicates across files,
# parents outside the pool, and ids outside one pool that a later file holds.
_RECORD = st.one_of(
    st.tuples(
        st.integers(0, 11),
        st.lists(st.integers(0, 15), max_size=3),
        st.sampled_from(["qa", "se_darwin", "other"]),
        st.integers(0, len(_TEMPLATES) - 1),
    ),
    st.none(),
)
_LINES = st.lists(_RECORD, max_size=6)
_STEP = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(["a", "m", "z"]), _LINES),  # before, between, after
    st.tuples(st.just("append"), st.integers(0, 9), _LINES),
    st.tuples(st.just("edit"), st.integers(0, 9), _LINES),
    st.tuples(st.just("touch"), st.integers(0, 9), st.just([])),  # the same bytes, a new ctime
    st.tuples(st.just("delete"), st.integers(0, 9), st.just([])),
    st.tuples(st.just("rename"), st.integers(0, 9), st.sampled_from(["a", "z"])),
)


def _line(record: tuple[int, list[int], str, int] | None) -> str:
    if record is None:
        return "{not json"
    number, parents, agent, template = record
    made: dict[str, Any] = copy.deepcopy(_TEMPLATES[template])
    made["trajectory_id"], made["agent_id"] = f"t{number}", agent
    made["metadata"]["parent_trajectories"] = [f"t{p}" for p in parents]
    return json.dumps(made)


def _write(file: Path, lines: list[Any], mode: str = "w") -> None:
    with file.open(mode) as handle:
        handle.write("".join(_line(r) + "\n" for r in lines))
    _aged(file)


def _aged(file: Path) -> None:
    """Written a minute ago: older than RACY_NS, so the cache keeps it."""
    past = file.stat().st_mtime_ns - 60 * 10**9
    os.utime(file, ns=(past, past))


class _Reads:
    """A pool folder read again and again by one resident process, each read checked
    against a fresh one (no cache, no memory)."""

    def __init__(self, root: Path) -> None:
        self.folder = root / "pool"
        self.folder.mkdir()
        self.cache = root / "cache"
        self.memory = KeptInMemory(64 * 2**20)
        self.manifest: Manifest | None = None
        self.made = 0  # files made: each new one's name sorts by its number
        self.grown = 0  # reads that grew the kept pool
        self.spliced = 0  # reads that laid new files' records among the kept pool's
        self.earlier: list[tuple[ReadResult, tuple[object, ...]]] = []  # reads, as they were

    def files(self) -> list[Path]:
        return sorted(self.folder.iterdir())

    def add(self, prefix: str, lines: list[Any]) -> None:
        self.made += 1
        _write(self.folder / f"{prefix}{self.made:03d}.jsonl", lines)

    def step(self, what: str, which: int, arg: Any) -> None:
        files = self.files()
        if what == "add" or not files:
            self.add(arg if what in ("add", "rename") else "z", arg if what == "add" else [])
            return
        file = files[which % len(files)]
        if what in ("append", "edit"):
            _write(file, arg, "a" if what == "append" else "w")
        elif what == "touch":
            os.utime(file, ns=(file.stat().st_atime_ns, file.stat().st_mtime_ns))
        elif what == "delete":
            file.unlink()
        else:
            self.made += 1
            file.rename(self.folder / f"{arg}{self.made:03d}.jsonl")

    def read(self) -> tuple[ReadResult, RecordCache]:
        self.manifest, _ = scan_files(self.folder, self.manifest)
        cache = RecordCache(self.cache, self.manifest, self.memory)
        data = read_trajectories(self.folder, cache=cache, keep_text=False)
        self.grown += int(cache.pool_grown)
        self.spliced += int(cache.pool_spliced)
        return data, cache

    def check(self) -> ReadResult | None:
        """A read, checked against a fresh one; None when the pool has no labelled record."""
        try:
            fresh = read_trajectories(self.folder, keep_text=False)
        except Exception as exc:  # no labelled record: the read in the process says so too
            with pytest.raises(type(exc)):
                self.read()
            return None
        data, _ = self.read()
        assert _pool_of(data) == _pool_of(fresh)
        _same_fingerprint(data.fingerprint, fingerprint_of(fresh.columns))
        _same_derived(data.columns, fresh.columns)
        # Read-only, and no later read (a growth writing into its buffers' room) changed
        # what an earlier one handed out.
        assert not any(a.flags.writeable for a in _arrays(data.columns))
        for earlier, was in self.earlier:
            assert _pool_of(earlier) == was
        self.earlier.append((data, _pool_of(data)))
        return data


def _arrays(c: PoolColumns) -> tuple[np.ndarray, ...]:
    """Every array of a pool, the coded columns' codes too."""
    return (
        c.id_hash, c.score, c.scored, c.created, c.timed, c.generation, c.parent_start,
        c.parent, c.own, c.labelled, c.success, c.label_score, c.label_scored, c.outcome,
        c.key, c.judged, c.agent.codes, c.operator.codes, c.tools.codes, c.pattern.codes,
    )  # fmt: skip


def _pool_of(data: ReadResult) -> tuple[object, ...]:
    """Every column of a read's pool, its duplicates and quarantined count, comparable."""
    c = data.columns
    coded = [(x.codes.tolist(), list(x.values)) for x in (c.agent, c.operator, c.tools, c.pattern)]
    return (
        list(c.ids),
        [(a.dtype.str, a.shape, a.tobytes()) for a in _arrays(c)],
        coded,
        list(c.outside),
        c.text,
        data.duplicates,
        data.quarantined,
        data.files,
    )


def _same_derived(got: PoolColumns, fresh: PoolColumns) -> None:
    """What a read took along of what its pool worked out (a grown pool's, or a kept
    copy's) is what a fresh read works out: the labelled ids and the id ranking."""
    assert got.example_ids == fresh.example_ids
    rank, fresh_rank = got.id_rank, fresh.id_rank
    assert (rank is None) == (fresh_rank is None)
    if rank is not None and fresh_rank is not None:
        assert np.array_equal(rank.order, fresh_rank.order)
        assert np.array_equal(rank.hashes, fresh_rank.hashes)


def _same_fingerprint(got: DataFingerprint, fresh: DataFingerprint) -> None:
    assert (got.records, got.digest) == (fresh.records, fresh.digest)
    assert torch.equal(got.ids, fresh.ids) and torch.equal(got.labelled, fresh.labelled)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_LINES, min_size=1, max_size=3), st.lists(_STEP, max_size=6))
def test_every_later_read_equals_a_fresh_one_whatever_changed(
    first: list[list[Any]], steps: list[tuple[str, Any, Any]]
) -> None:
    """Files added before, between and after the others, appended to, edited, touched,
    deleted and renamed between reads in one process: each read's pool (order, columns,
    coded values, parents, outside ids, duplicates, quarantine) and fingerprint are a
    fresh read's. A growth that skipped the check of an old file would serve its old
    records here; one that numbered parents or outside ids its own way would differ."""
    with tempfile.TemporaryDirectory() as root:
        reads = _Reads(Path(root))
        for lines in first:
            reads.add("m", lines)
        reads.check()
        for what, which, arg in steps:
            reads.step(what, which, arg)
            reads.check()


def _fixed(reads: _Reads) -> None:
    """A pool whose later file repeats ids, names parents of every kind and holds ids
    the earlier files named as parents outside their pool."""
    reads.add("m", [(0, [9, 14], "qa", 0), (1, [0], "se_darwin", 1), (2, [13, 9], "qa", 2)])
    reads.add("m", [(3, [1, 12], "qa", 3), (1, [], "other", 4), None, (4, [2], "qa", 5)])


@pytest.mark.parametrize(
    "new",
    [
        [(5, [0, 9], "qa", 1), (9, [12, 15], "other", 2)],  # t9 was outside; t15 new outside
        [(1, [3], "qa", 0), (1, [], "qa", 1), (6, [1, 6], "se_darwin", 3)],  # only duplicates
        [(13, [14, 15, 5], "qa", 4), (14, [], "qa", 5), (5, [13], "other", 0), None],
        # t15 first named by a left-out duplicate, then after t11 by a kept record
        [(1, [15], "qa", 0), (6, [11], "qa", 1), (7, [15, 11], "qa", 2)],
        [],  # a file of no record
    ],
)
def test_a_new_file_after_the_others_grows_the_kept_pool(new: list[Any]) -> None:
    """A new file sorting after the kept pool's: the read grows the kept pool (no other
    file read) and the pool and fingerprint are a fresh read's."""
    with tempfile.TemporaryDirectory() as root:
        reads = _Reads(Path(root))
        _fixed(reads)
        reads.check()
        reads.add("z", new)
        reads.check()
        assert reads.grown == 1
        reads.add("z", [(10, [11, 0], "qa", 2)])  # grown again, from the grown pool
        reads.check()
        assert reads.grown == 2


def test_a_growth_writes_its_new_rows_after_the_last_ones_copying_no_column() -> None:
    """A pool grown twice: the second growth writes the new records' rows into the room
    the first one's columns kept (every column shares the grown pool's memory: not one
    copied whole), and both reads stay a fresh read's. Before, each growth concatenated
    every column of the pool and the store copied it again to keep it."""
    with tempfile.TemporaryDirectory() as root:
        reads = _Reads(Path(root))
        reads.add("m", [(k, [max(k - 1, 0)], "qa", k % 6) for k in range(12)])  # none outside
        reads.check()
        reads.add("z", [(12, [3], "qa", 1), (13, [12], "other", 2)])
        once = reads.check()
        reads.add("z", [(14, [13], "se_darwin", 3)])
        twice = reads.check()
        assert reads.grown == 2 and once is not None and twice is not None
        for was, now in zip(_arrays(once.columns), _arrays(twice.columns), strict=True):
            assert np.shares_memory(was, now)


def test_the_first_growth_of_a_pool_joined_whole_copies_no_column() -> None:
    """A pool joined whole (every file parsed) is kept with room after its rows
    (``pool_columns.roomy``): the first growth writes the new records' rows there, every
    column sharing the joined pool's memory, and both reads are a fresh read's. Before,
    the joined columns were sized to their rows and the first growth copied each whole
    (at 100,000 records, most of a later read's growth)."""
    with tempfile.TemporaryDirectory() as root:
        reads = _Reads(Path(root))
        reads.add("m", [(k, [max(k - 1, 0)], "qa", k % 6) for k in range(12)])  # none outside
        joined = reads.check()
        reads.add("z", [(12, [3], "qa", 1)])  # within the room: 1/HEADROOM of 12 rows
        grown = reads.check()
        assert reads.grown == 1 and joined is not None and grown is not None
        for was, now in zip(_arrays(joined.columns), _arrays(grown.columns), strict=True):
            assert np.shares_memory(was, now)


def _under_old_stat(file: Path, data: bytes) -> None:
    """``file``'s bytes made ``data`` with its old mtime (a new inode: replaced by rename)."""
    before = file.stat()
    spare = file.with_suffix(".tmp")
    spare.write_bytes(data)
    os.utime(spare, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(spare, file)


@pytest.mark.parametrize(
    "change", ["append", "edit", "touch", "delete", "before", "truncate", "replace"]
)
def test_any_change_to_an_old_file_joins_the_whole_pool(change: str) -> None:
    """An old file appended to, edited, touched (its ctime), deleted, truncated under its
    old mtime, replaced by a file of as many bytes and the same mtime (its lines in
    another order), or a new file that sorts before it: no growth; the pool is joined
    whole, and is a fresh read's."""
    with tempfile.TemporaryDirectory() as root:
        reads = _Reads(Path(root))
        _fixed(reads)
        reads.check()
        reads.add("z", [(7, [0], "qa", 0)])
        old = reads.files()[0]
        if change == "before":
            reads.add("a", [(8, [], "qa", 1)])
        elif change == "truncate":
            _under_old_stat(old, old.read_bytes()[: old.stat().st_size // 2])
        elif change == "replace":
            lines = old.read_bytes().splitlines(keepends=True)
            _under_old_stat(old, b"".join(reversed(lines)))
        else:
            reads.step(change, 0, [(8, [], "qa", 1)])
        reads.check()
        assert reads.grown == 0


def test_a_later_read_joins_and_fingerprints_only_the_new_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per-record work, counted: a later read with one new file joins (decodes the coded
    columns of) and sorts for the fingerprint its records alone, not the pool's. Before
    the growth, the join took every file's records again and the fingerprint sorted
    every labelled record."""
    joined: list[int] = []
    sorted_: list[int] = []
    codes_of = pool_join.joined_codes

    def counted_codes(parts: Any) -> Any:  # once a coded column, in collect
        parts = list(parts)
        joined.append(sum(len(codes) for codes, _ in parts))
        return codes_of(parts)

    class CountingTorch:
        def __getattr__(self, name: str) -> Any:
            return getattr(torch, name)

        @staticmethod
        def sort(values: torch.Tensor, **kwargs: Any) -> Any:
            sorted_.append(len(values))
            return torch.sort(values, **kwargs)

    monkeypatch.setattr(pool_join, "joined_codes", counted_codes)
    monkeypatch.setattr(fingerprint, "torch", CountingTorch())
    with tempfile.TemporaryDirectory() as root:
        reads = _Reads(Path(root))
        reads.add("m", [(k % 12, [], "qa", k % 6) for k in range(12)])
        reads.add("m", [(k % 12, [k % 16], "qa", k % 6) for k in range(12)])
        first, _ = reads.read()
        first.fingerprint  # noqa: B018 (what a run asks of its read)
        assert sum(joined) == 4 * 24 and sum(sorted_) == 2 * len(first.columns.labelled)
        joined.clear()
        sorted_.clear()
        reads.add("z", [(12 + k % 4, [k], "qa", k % 6) for k in range(3)])
        data, _ = reads.read()
        seen = data.fingerprint
        assert sum(joined) == 4 * 3  # the new file's records alone, each coded column
        assert sum(sorted_) == 2 * 3  # its labelled ones alone (each template is labelled)
        assert len(data.columns) == len(first.columns) + 3
    monkeypatch.undo()
    assert seen.digest == fingerprint_of(data.columns).digest
    assert np.array_equal(seen.ids.numpy(), fingerprint_of(data.columns).ids.numpy())


def test_a_later_read_sorts_and_names_only_the_new_records_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per-record work, counted: a later read in the process ranks the ids of its new
    records alone (the kept pool's ranking, grown), and lists none of its labelled ids
    (it notes the pool it grew from: what is kept of that pool grows by the new rows).
    Before, each growth sorted every id hash of the old pool again (100,000: 26 ms of a
    0.2 s read) and the judged ids listed every labelled row's id again."""
    ranked: list[int] = []
    rank_of = IdRank.of.__func__  # type: ignore[attr-defined]

    def counted(cls: type[IdRank], id_hash: np.ndarray) -> IdRank | None:
        ranked.append(len(id_hash))
        return rank_of(cls, id_hash)

    monkeypatch.setattr(IdRank, "of", classmethod(counted))
    with tempfile.TemporaryDirectory() as root:
        reads = _Reads(Path(root))
        reads.add("m", [(k % 12, [k % 16], "qa", k % 6) for k in range(12)])
        first, _ = reads.read()
        old = len(first.columns)
        ranked.clear()
        reads.add("z", [(12 + k % 4, [k], "qa", k % 6) for k in range(3)])
        data, cache = reads.read()
        assert cache.pool_grown
        assert ranked and max(ranked) == 3  # the new records' ids alone, never the old pool's
        # No labelled id listed over every row: the pool it grew from noted instead
        assert "example_ids" not in vars(data.columns)
        assert vars(data.columns)[GROWN_FROM] is first.columns.token
        ranked.clear()
        reads.add("z", [(16, [0], "qa", 1)])  # grown again, from the grown pool
        again, cache = reads.read()
        assert cache.pool_grown and max(ranked) == 1
        assert len(again.columns) == old + 4


def test_a_kept_ranking_of_other_ids_is_not_believed(tmp_path: Path) -> None:
    """A pool that carries an id ranking that is not its own (another pool's, as long)
    is ranked again before its growth is joined: a new record repeating an old id is
    still the duplicate it is. Believed, the old id would not be found and the record
    would be kept twice."""
    first, later = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write(first, [(k, [], "qa", k % 6) for k in range(6)])
    _write(later, [(3, [], "qa", 1), (7, [], "qa", 2)])  # t3 again, and a new t7
    old = read_trajectories(first, keep_text=False).columns
    other = read_trajectories(first, keep_text=False).columns
    wrong = IdRank.of(other.id_hash[::-1].copy() + 1)  # as long, other hashes
    assert wrong is not None
    set_derived(old, {"id_rank": wrong})
    block = _file_records(later, _NoSink(), None, keep_text=False)
    grown = extended(old, [block])
    assert grown is not None
    columns, left_out = grown
    assert left_out == 1 and columns.ids == (*[f"t{k}" for k in range(6)], "t7")
    fresh = read_trajectories(tmp_path, keep_text=False).columns
    _same_derived(columns, fresh)


def test_a_grown_pool_notes_the_pool_it_grew_from(tmp_path: Path) -> None:
    """A grown pool has a token of its own and notes its old pool's (GROWN_FROM), whose
    rows are its first; a copy of a pool (kept, handed out) carries the pool's token;
    a pool joined whole notes none."""
    first, later = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write(first, [(k, [], "qa", k % 6) for k in range(6)])
    _write(later, [(7, [], "qa", 2)])
    old = pool_columns.frozen(read_trajectories(first, keep_text=False).columns)
    copy = pool_columns.frozen(old)
    assert copy.token is old.token and GROWN_FROM not in vars(old)
    grown = extended(copy, [_file_records(later, _NoSink(), None, keep_text=False)])
    assert grown is not None
    columns = grown[0]
    assert vars(columns)[GROWN_FROM] is old.token and columns.token is not old.token
    assert columns.ids[: len(old)] == old.ids


@pytest.mark.parametrize(
    "new",
    [
        [(5, [0, 9], "qa", 1), (9, [12, 15], "other", 2)],  # t9 was outside; t15 new outside
        [(13, [14, 15, 5], "qa", 4), (14, [], "qa", 5), (5, [13], "other", 0), None],
        [(6, [11, 3], "se_darwin", 1), (7, [15, 11], "qa", 2), (8, [6], "new-agent", 0)],
        [],  # a file of no record
    ],
)
@pytest.mark.parametrize("prefix", ["a", "m001x"])  # before every old file, or between
def test_a_new_file_among_the_others_is_laid_among_the_kept_pools_rows(
    new: list[Any], prefix: str
) -> None:
    """A new file sorting before or between the kept pool's files, repeating no id: the
    read lays its records among the kept pool's rows (no old file read again, no join of
    every file), and the pool (row order, parents, outside ids numbered as first named,
    coded values in first-seen order) and fingerprint are a fresh read's; again from the
    spliced pool, and then a growth at the end of it."""
    with tempfile.TemporaryDirectory() as root:
        reads = _Reads(Path(root))
        reads.add("m", [(0, [9, 14], "qa", 0), (1, [0], "se_darwin", 1), (2, [13, 9], "qa", 2)])
        reads.add("m", [(3, [1, 12], "qa", 3), None, (4, [2], "qa", 5)])
        reads.check()
        reads.add(prefix, new)
        reads.check()
        assert (reads.spliced, reads.grown) == (1, 0)
        reads.add("a", [(10, [11, 0], "other", 2), (11, [10], "qa", 4)])  # spliced again
        reads.check()
        assert (reads.spliced, reads.grown) == (2, 0)
        reads.add("z", [(12, [4], "qa", 1)])  # grown at its end
        reads.check()
        assert (reads.spliced, reads.grown) == (2, 1)


_UNIQUE_FILE = st.tuples(
    st.sampled_from(["a", "m001x", "z"]),  # before, between, after the first files
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 40), max_size=3),  # parents: records, earlier or later, or none
            st.sampled_from(["qa", "se_darwin", "other", "new"]),
            st.integers(0, len(_TEMPLATES) - 1),
        ),
        max_size=5,
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_UNIQUE_FILE, min_size=1, max_size=4))
def test_new_files_anywhere_repeating_no_id_are_laid_out_as_a_fresh_read(
    added: list[tuple[str, list[tuple[list[int], str, int]]]],
) -> None:
    """Files of ids never read before, added before, between or after the others one read
    at a time: every read (spliced, grown or joined) is a fresh read's, array for array."""
    with tempfile.TemporaryDirectory() as root:
        reads = _Reads(Path(root))
        reads.add("m", [(0, [1, 30], "qa", 0), (1, [], "qa", 1)])
        reads.add("m", [(2, [0, 31], "se_darwin", 2)])
        reads.check()
        number = 3
        for prefix, records in added:
            lines = []
            for parents, agent, template in records:
                lines.append((number, parents, agent, template))
                number += 1
            reads.add(prefix, lines)
            reads.check()


def test_a_new_file_among_the_others_repeating_an_id_joins_every_file() -> None:
    """A new file sorting among the kept pool's that holds an id of it: its record wins
    over the old file's, which only a join of every file decides: the read joins them
    (neither spliced nor grown), and is a fresh read's."""
    with tempfile.TemporaryDirectory() as root:
        reads = _Reads(Path(root))
        reads.add("m", [(0, [], "qa", 0), (1, [0], "qa", 1)])
        reads.add("m", [(2, [1], "qa", 2)])
        reads.check()
        reads.add("a", [(5, [], "qa", 3), (2, [0], "other", 4)])
        reads.check()
        assert (reads.spliced, reads.grown) == (0, 0)


class _NoSink(QuarantineSink):
    def __init__(self) -> None:
        super().__init__(None)
