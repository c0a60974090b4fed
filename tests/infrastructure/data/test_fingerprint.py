"""The data fingerprint: which records are new, gone or relabelled since a checkpoint."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from genesis_fp16_infrastructure.data.fingerprint import (
    DataFingerprint,
    compare,
    extended_fingerprint,
    fingerprint_of,
)
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import Label, derive_label
from genesis_fp16_infrastructure.data.synthetic import generate_pool


def _records(count: int = 200) -> list[dict[str, Any]]:
    """The labelled records of a generated pool, as the pool file holds them."""
    pool = generate_pool(count, seed=1)["trajectories"]
    return [r for r in pool.values() if derive_label(r["status"], r.get("success_score"))]


def _seen(tmp_path: Path, records: list[dict[str, Any]]) -> DataFingerprint:
    """The fingerprint of a read of a pool file holding ``records``."""
    path = tmp_path / "pool.json"
    path.write_text(json.dumps({"trajectories": {r["trajectory_id"]: r for r in records}}))
    return fingerprint_of(read_trajectories(path).columns)


def _through_a_checkpoint(state: dict[str, object]) -> dict[str, object]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, object] = torch.load(buffer, weights_only=True)
    return loaded


def test_the_same_records_in_any_order_are_unchanged(tmp_path: Path) -> None:
    """A fingerprint saved in a checkpoint matches the same records read in another order."""
    records = _records()
    saved = _through_a_checkpoint(_seen(tmp_path, records).state_dict())
    change = compare(saved, _seen(tmp_path, list(reversed(records))))
    assert change.unchanged and change.previous == change.records == len(records)


def test_new_removed_and_relabelled_records_are_each_counted(tmp_path: Path) -> None:
    """Growth, removal and a changed label are changes, each counted by record."""
    records = _records()
    saved = _seen(tmp_path, records[:150]).state_dict()
    flipped = [
        {**r, "success_score": 0.05 if (r.get("success_score") or 0) >= 0.7 else 0.95}
        for r in records[:5]
    ]
    now = [*flipped, *records[10:]]  # 5 relabelled, 5 removed, the rest past 150 new
    new = len(records) - 150
    change = compare(saved, _seen(tmp_path, now))
    assert not change.unchanged
    assert (change.added, change.removed, change.relabelled) == (new, 5, 5)
    assert (change.records, change.previous) == (len(now), 150)


def test_a_checkpoint_without_a_fingerprint_counts_every_record_as_new(tmp_path: Path) -> None:
    """No saved fingerprint (an older checkpoint): the data is unknown, never up to date."""
    records = _records(50)
    change = compare(None, _seen(tmp_path, records))
    assert not change.unchanged and change.added == len(records) and change.previous is None


def test_a_record_edited_in_place_with_the_same_id_and_label_is_a_change(tmp_path: Path) -> None:
    """A corrected attempt (its planned change rewritten) keeps its id and label and is
    still counted as changed: the model never learned it."""
    records = _records(60)
    saved = _seen(tmp_path, records).state_dict()
    edited = {**records[7], "code_changes": "+fixed"}
    change = compare(saved, _seen(tmp_path, [*records[:7], edited, *records[8:]]))
    assert not change.unchanged and (change.added, change.removed, change.relabelled) == (0, 0, 1)


def test_a_version_1_fingerprint_counts_as_unknown(tmp_path: Path) -> None:
    """A checkpoint from before the attempt was hashed: its data is unknown, trained afresh."""
    seen = _seen(tmp_path, _records(30))
    old = {**seen.state_dict(), "version": 1}
    assert compare(old, seen).previous is None


def test_the_digest_is_the_one_earlier_checkpoints_hold(tmp_path: Path) -> None:
    """Sorted by tensors now, the digest is still blake2b of the record hashes packed
    little-endian in (id hash, record hash) order, each worked out from the record's
    objects, as checkpoints written before keep it (else every served model would look
    out of date after an upgrade)."""
    import hashlib
    import struct

    from genesis_fp16_infrastructure.data.schema import labelled_hash, record_id_hash

    records = _records()
    _seen(tmp_path, records)
    examples = read_trajectories(tmp_path / "pool.json").examples
    pairs = sorted(
        (record_id_hash(e.trajectory_id), labelled_hash(e.trajectory_id, e.attempt, e.label))
        for e in examples
    )
    packed = struct.pack(f"<{len(pairs)}q", *(p[1] for p in pairs))
    now = _seen(tmp_path, list(reversed(records)))
    assert now.digest == hashlib.blake2b(packed, digest_size=16).hexdigest()
    assert now.ids.tolist() == [p[0] for p in pairs]


def test_an_id_hash_given_twice_counts_once_with_its_last_record_hash() -> None:
    """As a dict of (id hash -> record hash) counts them, sorted or not, empty or not."""
    rng = np.random.default_rng(5)
    for size_old, size_new in ((300, 280), (0, 40), (40, 0), (1, 1)):
        old_ids, new_ids = rng.integers(0, 60, size_old), rng.integers(0, 60, size_new)
        old_hashes, new_hashes = rng.integers(0, 3, size_old), rng.integers(0, 3, size_new)
        state = DataFingerprint(size_old, "old", torch.tensor(old_ids), torch.tensor(old_hashes))
        current = DataFingerprint(size_new, "new", torch.tensor(new_ids), torch.tensor(new_hashes))
        change = compare(state.state_dict(), current)
        old = dict(zip(old_ids.tolist(), old_hashes.tolist(), strict=True))
        new = dict(zip(new_ids.tolist(), new_hashes.tolist(), strict=True))
        kept = old.keys() & new.keys()
        assert (change.added, change.removed) == (len(new) - len(kept), len(old) - len(kept))
        assert change.relabelled == sum(old[i] != new[i] for i in kept)


def test_a_records_hash_is_blake2b_of_its_id_label_and_attempts_repr() -> None:
    """The record hash checkpoints keep: the signed big-endian 8-byte blake2b of the id,
    the label and the attempt's repr, NUL-separated; and the id hash, of the id alone.
    The reader's faster path (the repr without its recursion guard, one hash without a
    list) must give these very bits, or every served model would look out of date."""
    import hashlib

    from genesis_fp16_infrastructure.data.schema import AttemptInput, labelled_hash, record_id_hash

    def blake(text: str) -> int:
        digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    attempt = AttemptInput(trajectory_id="t1", parent_ids=("p",), tools_used=("a", "b"))
    label = Label(True, 0.75, "success")
    text = f"t1\x00True\x000.75\x00success\x00{attempt!r}"
    assert labelled_hash("t1", attempt, label) == blake(text)
    assert record_id_hash("t1") == blake("t1")


def test_sorted_ids_are_looked_up_without_a_sort_and_counted_as_a_dict_counts_them() -> None:
    """A fingerprint's own order (ids sorted, some given twice): what compare counts in
    one lookup of each saved id, no sort, is what a dict of the pairs counts, whichever
    side is larger, sorted or not (an unsorted side is sorted first)."""
    rng = np.random.default_rng(7)
    for size_old, size_new in ((500, 520), (520, 500), (1, 300), (300, 1)):
        old_ids, new_ids = rng.integers(0, 400, size_old), rng.integers(0, 400, size_new)
        old_hashes, new_hashes = rng.integers(0, 2, size_old), rng.integers(0, 2, size_new)
        for sort_old in (True, False):
            o = np.argsort(old_ids, kind="stable") if sort_old else np.arange(size_old)
            n = np.argsort(new_ids, kind="stable")
            state = DataFingerprint(
                size_old, "old", torch.tensor(old_ids[o]), torch.tensor(old_hashes[o])
            )
            current = DataFingerprint(
                size_new, "new", torch.tensor(new_ids[n]), torch.tensor(new_hashes[n])
            )
            change = compare(state.state_dict(), current)
            old = dict(zip(old_ids[o].tolist(), old_hashes[o].tolist(), strict=True))
            new = dict(zip(new_ids[n].tolist(), new_hashes[n].tolist(), strict=True))
            kept = old.keys() & new.keys()
            assert (change.added, change.removed) == (len(new) - len(kept), len(old) - len(kept))
            assert change.relabelled == sum(old[i] != new[i] for i in kept)
            assert 0 < len(kept) < min(len(old), len(new)) or min(size_old, size_new) == 1


def _grown(tmp_path: Path, count: int = 300, new: int = 40) -> tuple[DataFingerprint, Any]:
    """A served model's fingerprint (a pool's first labelled records) and the pool grown
    by ``new`` more labelled records after them, fingerprinted as a later read grows it."""
    records = _records(count)
    before = _seen(tmp_path, records[:-new])
    columns = read_trajectories_of(tmp_path, records)
    rows = int(columns.labelled[len(records) - new])
    return before, extended_fingerprint(before, columns, rows)


def read_trajectories_of(tmp_path: Path, records: list[dict[str, Any]]) -> Any:
    path = tmp_path / "grown.json"
    path.write_text(json.dumps({"trajectories": {r["trajectory_id"]: r for r in records}}))
    return read_trajectories(path).columns


def test_a_fingerprint_grown_from_the_saved_one_is_compared_without_a_lookup(
    tmp_path: Path,
) -> None:
    """A later read's fingerprint grown from the served model's records: compare counts
    the new records alone, as the lookup counts them, and looks nothing up."""
    before, current = _grown(tmp_path)
    assert current.grown_from == (before.digest, before.records)
    saved = _through_a_checkpoint(before.state_dict())
    fast = compare(saved, current)
    slow = compare(saved, replace(current, grown_from=None))
    assert fast == slow and (fast.added, fast.removed, fast.relabelled) == (40, 0, 0)
    # no lookup at all: the saved ids are never read past their count
    planted = dict(saved, ids=torch.zeros(before.records, dtype=torch.int64))
    assert compare(planted, current) == fast


def test_a_planted_or_stale_grown_from_is_refused_and_looked_up(tmp_path: Path) -> None:
    """A grown fingerprint compared with another saved model (another digest), or with a
    saved state whose count is not its arrays', is looked up record by record."""
    before, current = _grown(tmp_path)
    saved = before.state_dict()
    other = _seen(tmp_path, _records(300)[:200]).state_dict()  # another served model
    assert compare(other, current) == compare(other, replace(current, grown_from=None))
    assert (compare(other, current).added, compare(other, current).removed) == (
        current.records - 200,
        0,
    )
    short = dict(saved, ids=saved["ids"][:-1], labelled=saved["labelled"][:-1])
    assert compare(short, current) == compare(short, replace(current, grown_from=None))
    assert compare(short, current).added == 41  # the lookup's answer, not the grown 40
    planted = replace(current, grown_from=(before.digest, before.records + 1))
    assert compare(saved, planted) == compare(saved, replace(current, grown_from=None))


def test_a_planted_or_stale_kept_fingerprint_is_refused_and_the_pool_fingerprinted(
    tmp_path: Path,
) -> None:
    """The kept fingerprint a later read grows is checked against the old rows first: one
    of the right count whose record hashes or ids are not theirs (planted, or another
    pool's) is refused, and the grown pool is fingerprinted whole, never merged into."""
    before, grown = _grown(tmp_path)
    records = _records(300)
    columns = read_trajectories_of(tmp_path, records)
    rows = int(columns.labelled[len(records) - 40])
    whole = fingerprint_of(columns)
    assert _same(grown, whole) and grown.grown_from is not None  # the kept one agrees: merged
    relabelled = replace(before, labelled=before.labelled + 1)
    other_ids = replace(before, ids=before.ids + 1)
    stale = _seen(tmp_path, _records(400)[100 : 100 + before.records])  # another pool's
    short = replace(before, records=before.records + 1)
    for planted in (relabelled, other_ids, stale):
        out = extended_fingerprint(planted, columns, rows)
        assert _same(out, whole) and out.grown_from is None
    with pytest.raises(ValueError, match="a fingerprint of"):
        extended_fingerprint(replace(before, ids=before.ids[:-1]), columns, rows)
    assert extended_fingerprint(short, columns, rows).grown_from is None


def _same(a: DataFingerprint, b: DataFingerprint) -> bool:
    """The same records, hashes and digest."""
    same_arrays = torch.equal(a.ids, b.ids) and torch.equal(a.labelled, b.labelled)
    return (a.records, a.digest) == (b.records, b.digest) and same_arrays
