"""The judged stores' files (judging/stores.py): a torn or damaged file is set aside,
never raised; the watch store is bounded on write as on read."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import JUDGED_IDS
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.judging import stores


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9])
def test_a_torn_npz_is_set_aside_and_reported_not_raised(tmp_path: Path, keep: float) -> None:
    """A judged-ids file cut short after its zip header (a torn write, a full disk) reads as
    no file: it is set aside as unusable and reported once, and the run goes on."""
    stores.write_known_ids(tmp_path, np.arange(500, dtype=np.uint64))
    path = JUDGED_IDS.at(tmp_path)
    raw = path.read_bytes()
    assert raw[:2] == b"PK"  # a zip, as np.savez writes
    path.write_bytes(raw[: int(len(raw) * keep)])
    reported: list[files.SetAside] = []
    forget = files.on_set_aside(reported.append)
    try:
        assert stores.read_known_ids(tmp_path) is None
    finally:
        forget()
    assert not path.exists()
    assert len(reported) == 1
    assert list(tmp_path.glob(f"{path.name}.unusable-*"))


def test_known_is_isin_of_any_ids_in_a_sorted_pool() -> None:
    """schema.known answers as np.isin does (the judged run's lookups, and the retrain
    recipe's new records for drift), of int64 hashes too, for an empty or one-id pool."""
    rng = np.random.default_rng(3)
    held = rng.integers(-(2**63), 2**63 - 1, size=5000, dtype=np.int64)
    values = np.concatenate([held[::7], rng.integers(-(2**63), 2**63 - 1, 3000, np.int64)])
    for pool in (held, held[:0], held[:1]):
        assert np.array_equal(schema.known(values, np.sort(pool)), np.isin(values, pool))


def _header_only(path: Path, name: str, descr: str, shape: tuple[int, ...]) -> None:
    """A store whose one member's .npy header declares ``shape`` of ``descr``, its data a
    few bytes: deflated, the file is small whatever the header claims."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{name}.npy", header.getvalue() + bytes(64))


def _npy_in_place(path: Path) -> None:
    with path.open("wb") as handle:  # np.save to a handle keeps the store's name
        np.save(handle, np.arange(10, dtype=np.uint64))


def _save(path: Path, **arrays: Any) -> None:
    np.savez(path, **arrays)


WATCH = {
    "ids": np.arange(4, dtype=np.uint64),
    "served/loss": np.ones(4),
    "previous/loss": np.ones(4),
}
DAMAGES: dict[str, Callable[[Path], None]] = {
    "npy_in_place": _npy_in_place,
    "zero_d": lambda p: _save(p, ids=np.uint64(3), **{"served/loss": np.float64(1.0)}),
    "string_ids": lambda p: _save(p, **{**WATCH, "ids": np.array(["a", "b", "c", "d"])}),
    "object_column": lambda p: _save(
        p, **{**WATCH, "served/loss": np.array([1, None, "x", 2.0], dtype=object)}
    ),
    "string_column": lambda p: _save(p, **{**WATCH, "previous/loss": np.array(["1"] * 4)}),
    "huge_header": lambda p: _header_only(p, "ids", "<u8", (10**12,)),
    "unequal": lambda p: _save(p, **{**WATCH, "served/loss": np.ones(7)}),
    "two_d": lambda p: _save(p, **{**WATCH, "served/loss": np.ones((4, 1))}),
    "long_segments": lambda p: _save(p, **WATCH, segments=np.array(["x" * 65] * 4)),
    "unknown_member": lambda p: _save(p, **WATCH, extra=np.ones(4)),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_watch_store_unlike_the_writers_is_set_aside_before_any_array_is_read(
    tmp_path: Path, damage: str
) -> None:
    """Issue 92: a .npy file in the store's place, 0-d, string or object arrays, a header
    claiming 10^12 records, arrays of unequal length or shape, segments longer than the
    writer's or a member it never writes: read as no store (the watch starts again), set
    aside and reported once under ``judged_watch``, nothing raised, nothing allocated."""
    path = tmp_path / "judged-live-x.npz"
    DAMAGES[damage](path)
    reported: list[files.SetAside] = []
    forget = files.on_set_aside(reported.append)
    try:
        kept = stores.read_watch(path, "loss")
    finally:
        forget()
    assert len(kept["ids"]) == 0
    assert [e.label for e in reported] == ["judged_watch"], reported
    assert not path.exists() and files.newest_aside(path) is not None


def test_a_judged_ids_file_of_strings_or_0_d_is_set_aside(tmp_path: Path) -> None:
    """The same reader holds ``judged_ids.npz`` to its writer's layout: ids of text, or a
    0-d array, read as no file, set aside."""
    path = JUDGED_IDS.at(tmp_path)
    for ids in (np.array(["a", "b"]), np.uint64(4)):
        np.savez(path, ids=ids)
        assert stores.read_known_ids(tmp_path) is None and not path.exists()


def test_the_writer_and_reader_hold_one_bound_and_room_says_what_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory bounded on write as on read: ``room`` takes the new records that keep the
    whole store within the reader's decoded bound (each record: its id, its segment at
    the widest one's width, each column as float64), the writer refuses more, and a
    store the writer wrote at the bound reads back whole."""
    monkeypatch.setattr(stores, "decoded_bound", lambda file: 100 * (8 + 4 * 5 + 16))
    kept = {"ids": np.arange(60, dtype=np.uint64), "segments": np.array(["a"] * 60)}
    kept |= {"served/loss": np.ones(60), "previous/loss": np.ones(60)}
    columns = ["served/loss", "previous/loss"]
    assert stores.room(kept, columns, 5, 70) == 40  # 100 records of 44 bytes fit
    assert stores.room(kept, columns, 1, 70) == 70  # 28 bytes a record: 157 fit
    assert stores.room(kept, [*columns, "served/brier", "previous/brier"], 5, 70) == 13  # 60 B: 73
    full = stores.extend_watch(kept, {k: v[:40] for k, v in kept.items()})
    full["segments"] = np.array(["abcde"] * 100)
    path = tmp_path / "judged-live-x.npz"
    stores.write_watch(path, full)
    assert len(stores.read_watch(path, "loss")["ids"]) == 100
    more = stores.extend_watch(full, {k: v[:1] for k, v in full.items()})
    with pytest.raises(ValueError, match="over the store's bound"):
        stores.write_watch(path, more)
    assert len(stores.read_watch(path, "loss")["ids"]) == 100  # the file as it was


def test_a_candidates_known_ids_sort_only_the_records_new_to_the_served_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ids a candidate knew (``run._known_after``: the served model's and the run's
    records) are the served model's sorted ids with the new ones merged in: written as
    the whole set, sorted and distinct, with no more ids sorted than are new (issue 90:
    it sorted both, twice a pool's ids, every run)."""
    from types import SimpleNamespace

    from genesis_fp16_infrastructure.judging.run import _known_after

    rng = np.random.default_rng(5)
    records = rng.permutation(np.unique(rng.integers(0, 2**63, 5000, dtype=np.uint64)))
    known = np.sort(records[:4800])  # 200 new records
    knew = schema.known(records, known)
    served = SimpleNamespace(
        losses=object(), known=known, knew=knew, records=SimpleNamespace(id_hashes=records)
    )
    sorted_ids: list[int] = []
    real = stores.sorted_unique

    def counted(ids: np.ndarray) -> np.ndarray:
        sorted_ids.append(len(ids))
        return real(ids)

    monkeypatch.setattr(stores, "sorted_unique", counted)
    stores.write_known_ids(tmp_path, _known_after(served, None))  # type: ignore[arg-type]
    assert sum(sorted_ids) <= 200, sorted_ids
    monkeypatch.undo()
    written = stores.read_known_ids(tmp_path)
    assert written is not None
    assert np.array_equal(written, stores.sorted_unique(np.concatenate([known, records])))


def test_known_ids_read_back_unsorted_or_twice_are_sorted_distinct(tmp_path: Path) -> None:
    """A judged-ids file whose ids are out of order or named twice (another writer's) reads
    as sorted distinct hashes, what every binary search of them needs; one in order is
    taken as it is."""
    path = JUDGED_IDS.at(tmp_path)
    files.write_atomic(path, lambda h: np.savez(h, ids=np.array([9, 3, 9, 1], dtype=np.uint64)))
    assert stores.read_known_ids(tmp_path).tolist() == [1, 3, 9]  # type: ignore[union-attr]
    stores.write_known_ids(tmp_path, np.array([4, 2, 2], dtype=np.uint64))
    assert stores.read_known_ids(tmp_path).tolist() == [2, 4]  # type: ignore[union-attr]


KEEP = 64 * 2**20  # a resident process's budget (keep_in_memory_bytes)


def test_known_ids_this_process_wrote_are_not_read_back_while_the_file_is_unchanged(
    tmp_path: Path,
) -> None:
    """Known ids written with a budget are the next read's, the file not read again, and
    equal the file's; with no budget (a forked child's run) the file is read."""
    stores.write_known_ids(tmp_path, np.array([9, 3, 3, 1], dtype=np.uint64), KEEP)
    before = dict(stores.KNOWN_READS)
    kept = stores.read_known_ids(tmp_path, KEEP)
    assert kept is not None and kept.tolist() == [1, 3, 9] and not kept.flags.writeable
    assert stores.KNOWN_READS["kept"] == before.get("kept", 0) + 1
    read = stores.read_known_ids(tmp_path)
    assert read is not None and read.tolist() == [1, 3, 9]
    assert stores.KNOWN_READS["read"] == before.get("read", 0) + 1


def test_a_changed_file_or_a_planted_kept_value_is_read_and_checked(tmp_path: Path) -> None:
    """Known ids kept for a file that changed since (rewritten in place, replaced, or
    damaged) are not believed: the file is read and checked (a damaged one set aside);
    a kept value not as the writer keeps them (unsorted) is not believed either."""
    from genesis_fp16_infrastructure import kept_in_memory

    stores.write_known_ids(tmp_path, np.array([1, 3], dtype=np.uint64), KEEP)
    path = JUDGED_IDS.at(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    stores.write_known_ids(other, np.array([2, 4, 6], dtype=np.uint64))  # no budget: not kept
    path.write_bytes(JUDGED_IDS.at(other).read_bytes())  # the kept file's bytes changed
    assert stores.read_known_ids(tmp_path, KEEP).tolist() == [2, 4, 6]  # type: ignore[union-attr]

    stores.write_known_ids(tmp_path, np.array([1, 3], dtype=np.uint64), KEEP)
    path.write_bytes(b"PK torn")
    assert stores.read_known_ids(tmp_path, KEEP) is None and not path.exists()

    stores.write_known_ids(tmp_path, np.array([1, 3], dtype=np.uint64), KEEP)
    memory = kept_in_memory.process_memory(KEEP)
    assert memory is not None
    planted = np.array([7, 5], dtype=np.uint64)
    planted.flags.writeable = False
    key = (stores.KNOWN_KIND, str(path))
    memory.put(key, kept_in_memory.identity_of(path), planted, planted.nbytes, "planted")
    assert stores.read_known_ids(tmp_path, KEEP).tolist() == [1, 3]  # type: ignore[union-attr]
