"""A grown pool's parent hashes and content keys from the kept pool's (issue 90 item 2):
the kept ones with the new records' after them, in the kept arrays' own memory, the
same bits as worked out whole; a kept pool whose parents are not the pool's (other
numbers, ids outside it) is worked out whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pool_files import read_files

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns, appended, roomy
from genesis_fp16_infrastructure.data.pool_extend import extended
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink
from genesis_fp16_infrastructure.data.readers import _file_records
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.world_model.content_keys import (
    KeptKeys,
    KeyInputs,
    content_keys,
    keyed,
    parent_hashes,
)


def _pools(tmp_path: Path) -> tuple[PoolColumns, PoolColumns, KeptKeys]:
    """An old pool (with room to grow, as a resident process keeps it), the pool grown by
    a new file's records, and what the old pool's keys were kept with."""
    old = roomy(read_files(tmp_path / "old", {"a.json": generate_pool(600, 99)}))
    read_files(tmp_path / "new", {"b.json": generate_pool(30, 3099)})
    block = _file_records(tmp_path / "new" / "b.json", QuarantineSink(None), None, False)
    grown = extended(old, [block])
    assert grown is not None
    slots = appended(parent_hashes(old), np.zeros(0, np.int64))  # as a growth keeps them
    kept = KeptKeys(
        content_keys(old, slots), old.id_hash, old.parent_start, slots, old.labelled,
        KeyInputs.of(old),
    )  # fmt: skip
    return old, grown[0], kept


def test_a_grown_pool_grows_the_kept_hashes_and_keys(tmp_path: Path) -> None:
    """The grown pool's parent hashes and keys are the kept ones' memory with the new
    records' after them, bit for bit those worked out whole."""
    _, grown, kept = _pools(tmp_path)
    slots = parent_hashes(grown, kept)
    whole = parent_hashes(grown)
    assert np.array_equal(slots, whole) and len(slots) > len(kept.parent_hash)
    assert np.shares_memory(slots, kept.parent_hash)
    keys = keyed(grown, slots, kept)
    assert np.array_equal(keys, content_keys(grown, whole))


def test_parents_not_the_kept_ones_are_worked_out_whole(tmp_path: Path) -> None:
    """Kept with other parent numbers (a stale or planted entry), or with parents named
    outside the pool: the kept hashes are not taken; the hashes are those worked out
    whole."""
    _, grown, kept = _pools(tmp_path)
    moved = kept.inputs.parent.copy()
    moved[0] = (moved[0] + 1) % len(kept.id_hash)
    planted = kept._replace(parent_hash=kept.parent_hash + 1)
    for other in (
        planted._replace(inputs=kept.inputs._replace(parent=moved)),
        planted._replace(inputs=kept.inputs._replace(outside=1)),
        planted._replace(id_hash=kept.id_hash + 1),
    ):
        slots = parent_hashes(grown, other)
        assert np.array_equal(slots, parent_hashes(grown))
        assert not np.shares_memory(slots, other.parent_hash)
