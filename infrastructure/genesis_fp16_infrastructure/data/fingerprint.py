"""What a model was trained on, kept beside it: every labelled record's id and label, hashed.

A scheduled run reads a pool that may have grown, shrunk or been relabelled since the
checkpoint it would resume was written. The checkpoint keeps the fingerprint of the
records its model saw (:meth:`DataFingerprint.state_dict`, plain tensors and values), and
:func:`compare` says what changed::

    seen = fingerprint_of(data.columns)
    change = compare(saved_state.get("data"), seen)  # None: the checkpoint kept none
    change.unchanged, change.added, change.removed, change.relabelled

A record is its ``trajectory_id``, its label (success, score, outcome) and its attempt (every
field the encoder reads): a record corrected in place, same id and label, is a change
too, counted with the relabelled ones (version 1 hashed the id and label only, so such a
correction was never learned; a version-1 checkpoint's data counts as unknown, and its
next run trains afresh once). Each is one 64-bit hash; 20,000 records keep 320 KB in a
checkpoint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.data.pool_columns import PoolColumns

STATE_VERSION = 2  # 2: the attempt's fields are part of a record's hash


@dataclass(frozen=True)
class DataFingerprint:
    """The labelled records a model was trained on: ``digest`` names the whole set;
    ``ids`` and ``labelled`` hold each record's id hash and (id, label) hash, by id hash."""

    records: int
    digest: str
    ids: torch.Tensor
    labelled: torch.Tensor
    # (digest, records) of the fingerprint this one grew from by records none of whose ids
    # it held (:func:`extended_fingerprint`); None when not known so. Never saved.
    grown_from: tuple[str, int] | None = field(default=None, compare=False, repr=False)

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "records": self.records,
            "digest": self.digest,
            "ids": self.ids.clone(),
            "labelled": self.labelled.clone(),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | None) -> DataFingerprint | None:
        """The saved fingerprint, or None when there is none (a checkpoint written before
        fingerprints, or of another version: its data is unknown)."""
        if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
            return None
        ids, labelled = state["ids"], state["labelled"]
        if not (isinstance(ids, torch.Tensor) and isinstance(labelled, torch.Tensor)):
            raise ValueError(  # a reference to a side file never read (checkpoint_arrays)
                f"the data fingerprint's ids are {type(ids).__name__}, not tensors: read the "
                "checkpoint's per-record arrays first (checkpoint_arrays.with_arrays)"
            )
        return cls(int(state["records"]), str(state["digest"]), ids, labelled)


@dataclass(frozen=True)
class DataChange:
    """How the records a run reads differ from those its checkpoint's model saw.

    ``previous`` is None when the checkpoint kept no fingerprint: every record counts as
    new. A removed or relabelled record is a change like a new one: never ignored;
    ``relabelled`` counts every kept id whose label or attempt differs.
    """

    records: int
    previous: int | None
    added: int
    removed: int
    relabelled: int

    @property
    def unchanged(self) -> bool:
        return self.previous is not None and not (self.added or self.removed or self.relabelled)


def fingerprint_of(columns: PoolColumns) -> DataFingerprint:
    """The fingerprint of a read's labelled records, from its columns
    (``data.pool_columns``), independent of their order: sorted by (id hash, record
    hash), as tuples of Python ints once were, with the same digest."""
    ids, labelled = _sorted(columns.id_hash[columns.labelled], columns.key)
    return _made(ids, labelled)


def extended_fingerprint(
    before: DataFingerprint, columns: PoolColumns, rows: int
) -> DataFingerprint:
    """``fingerprint_of(columns)`` from ``before``, the fingerprint of the labelled records
    among ``columns``' first ``rows`` (the pool ``data.pool_extend`` grew): only the
    labelled records after them are sorted, then merged in (issue 90: a later read
    fingerprints what is new). ``before`` is a kept value: it is checked against the old
    rows first (its count, and a sample of its records found in them, :func:`_agrees`),
    and one that is not theirs is refused: the whole pool is fingerprinted. The digest
    still reads every record hash: 8 bytes each, hashed where they lie (:func:`_made`)."""
    first = int(np.searchsorted(columns.labelled, rows))
    if len(before.ids) != first:
        raise ValueError(f"a fingerprint of {len(before.ids)} records for {first} of {rows} rows")
    if not _agrees(before, columns, first):
        return fingerprint_of(columns)
    new = np.arange(first, len(columns.labelled))
    return _merged(before, columns, new) or fingerprint_of(columns)


def spliced_fingerprint(
    before: DataFingerprint, old: PoolColumns, columns: PoolColumns, old_at: np.ndarray
) -> DataFingerprint:
    """``fingerprint_of(columns)`` from ``before``, the fingerprint of ``old``'s labelled
    records, where ``columns`` is ``old`` with new records laid among its rows
    (``data.pool_splice``: no new record of an old id; ``old_at``: each old row's row in
    ``columns``): the new labelled records sorted, then merged in. ``before`` is checked
    against ``old`` as :func:`extended_fingerprint` checks it, and refused the same way."""
    if not _agrees(before, old, len(old.labelled)):
        return fingerprint_of(columns)
    is_old = np.zeros(len(columns), np.bool_)
    is_old[old_at] = True
    new = np.flatnonzero(~is_old[columns.labelled])
    return _merged(before, columns, new) or fingerprint_of(columns)


def _merged(
    before: DataFingerprint, columns: PoolColumns, new: np.ndarray
) -> DataFingerprint | None:
    """``before`` with ``columns``' labelled records ``new`` (their places among the
    labelled) merged in, its ids none of theirs; None when an id hash is on both sides."""
    ids, labelled = _sorted(columns.id_hash[columns.labelled[new]], columns.key[new])
    old_ids, new_ids = before.ids.numpy(), ids.numpy()
    # Each new one before the first old id hash not smaller than its own (one search);
    # an id hash on both sides: order by record hash too, the whole pool's way.
    at = np.searchsorted(old_ids, new_ids)
    if len(old_ids) and bool((old_ids[np.minimum(at, len(old_ids) - 1)] == new_ids).any()):
        return None
    merged_ids = np.insert(old_ids, at, new_ids)
    merged = np.insert(before.labelled.numpy(), at, labelled.numpy())
    made = _made(torch.from_numpy(merged_ids), torch.from_numpy(merged))
    # No new id hash is an old one (checked above): what compare says against ``before``'s
    # records is known, whatever their number (:func:`compare`)
    return replace(made, grown_from=(before.digest, before.records))


SAMPLE = 64  # the records of a kept fingerprint looked up in the pool it is said to be of


def _agrees(before: DataFingerprint, columns: PoolColumns, first: int) -> bool:
    """Whether ``before`` is the fingerprint of ``columns``' first ``first`` labelled
    records, as far as a sample of ``SAMPLE`` of its records tells (found by id hash in
    the pool's ranking, each a labelled record among them with that record hash), its
    ids sorted and as many as its count. Costs what the sample does, not the pool."""
    ids, hashes = before.ids.numpy(), before.labelled.numpy()
    if not before.records == len(ids) == len(hashes) == first:
        return False
    if not first:
        return True
    rank = columns.id_rank  # a grown pool's: the old one's with the new rows inserted
    if rank is None:
        return False  # two ids of one hash: nothing to find them by
    at = np.unique(np.linspace(0, first - 1, min(SAMPLE, first), dtype=np.int64))
    sample = ids[at]
    if not bool((sample[1:] >= sample[:-1]).all()):
        return False
    place = np.minimum(np.searchsorted(rank.hashes, sample), len(rank.hashes) - 1)
    row = rank.order[place]
    position = np.minimum(np.searchsorted(columns.labelled[:first], row), first - 1)
    return bool(
        (rank.hashes[place] == sample).all()
        and (columns.labelled[position] == row).all()
        and (columns.key[position] == hashes[at]).all()
    )


def _sorted(ids: np.ndarray, labelled: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """The id hashes and record hashes of some records, sorted by (id hash, record hash)."""
    ids_t, labelled_t = torch.from_numpy(ids), torch.from_numpy(labelled.copy())
    order = torch.sort(labelled_t, stable=True).indices
    order = order[torch.sort(ids_t[order], stable=True).indices]
    return ids_t[order], labelled_t[order]


def _made(ids: torch.Tensor, labelled: torch.Tensor) -> DataFingerprint:
    # The int64 little-endian bytes of the record hashes, hashed where they lie: on a
    # little-endian host no copy (a copy, then its bytes, were two more passes over the
    # pool's 8 bytes a record: 1.4 ms against 0.8 at 100,000 records).
    packed = np.ascontiguousarray(labelled.numpy(), dtype="<i8")
    digest = hashlib.blake2b(packed.data, digest_size=16).hexdigest()
    return DataFingerprint(len(ids), digest, ids, labelled)


def compare(saved: Mapping[str, Any] | None, current: DataFingerprint) -> DataChange:
    """What changed from the saved fingerprint (a state dict, or None) to ``current``.

    Both sides' id hashes are sorted (a fingerprint's order, checked: one comparison of
    neighbours each), so each saved id is looked up in the current ones by one binary
    search in their order, which walks the array once; no sort and no set operation
    over the two pools (``np.intersect1d`` sorted both pools' ids together: 6 ms of CPU
    at 100,000 records, issue 90). A side that is not sorted is sorted first. Counts
    are those of the set operation (``tests/infrastructure/data/test_fingerprint.py``).

    A fingerprint grown from the saved one's records (``current.grown_from``: its digest
    and count, :func:`extended_fingerprint`) by records of ids it never held differs from
    it by those alone: added, none removed or relabelled, with no lookup at all (a daemon's
    later run over the model it served last: 4 ms of CPU at 100,000 records before)."""
    before = DataFingerprint.from_state(saved)
    if before is None:
        return DataChange(current.records, None, current.records, 0, 0)
    if before.digest == current.digest:
        return DataChange(current.records, before.records, 0, 0, 0)
    if current.grown_from == (before.digest, before.records) and _whole(before):
        return DataChange(current.records, before.records, current.records - before.records, 0, 0)
    old_ids, old_labelled = _last_of_each(before.ids.numpy(), before.labelled.numpy())
    new_ids, new_labelled = _last_of_each(current.ids.numpy(), current.labelled.numpy())
    at = np.minimum(np.searchsorted(new_ids, old_ids), max(len(new_ids) - 1, 0))
    kept = new_ids[at] == old_ids if len(new_ids) else np.zeros(len(old_ids), dtype=np.bool_)
    relabelled = old_labelled[kept] != new_labelled[at[kept]]
    common = int(np.count_nonzero(kept))
    return DataChange(
        records=current.records,
        previous=before.records,
        added=len(new_ids) - common,
        removed=len(old_ids) - common,
        relabelled=int(np.count_nonzero(relabelled)),
    )


def _whole(fingerprint: DataFingerprint) -> bool:
    """Whether a saved fingerprint's count is its arrays' (a state read back, checked
    before its digest and count are believed to name a grown fingerprint's records)."""
    return fingerprint.records == len(fingerprint.ids) == len(fingerprint.labelled)


def _last_of_each(ids: np.ndarray, labelled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each id hash once, with the last of its record hashes (an id hash twice: the last
    one counts, as a dict of them keeps), sorted by id hash. A fingerprint's ids are
    sorted already: that is checked (one comparison of neighbours) and they pass through
    unsorted; otherwise a stable sort keeps each id's order."""
    if len(ids) > 1 and not bool((ids[1:] >= ids[:-1]).all()):
        order = np.argsort(ids, kind="stable")
        ids, labelled = ids[order], labelled[order]
    last = np.ones(len(ids), dtype=np.bool_)
    last[:-1] = ids[1:] != ids[:-1]
    return ids[last], labelled[last]
