"""The joined pool's cache entry: written whole, and nothing of it used unchecked."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from genesis_fp16_infrastructure.data import pool_file
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.pool_columns import Coded, PoolColumns
from genesis_fp16_infrastructure.data.pool_file import (
    StoredPool,
    read_pool_file,
    size_bound,
    write_pool_file,
)
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.synthetic import generate_pool

_FILES = [("pool/a.json", "d" * 64)]
_ROOM = 2**30  # a limit no test entry reaches


def _columns(tmp_path: Path) -> PoolColumns:
    """A slim read's pool of 200 generated records, each a parent in the pool and one
    outside it (an id no record has)."""
    pool = generate_pool(200, seed=5)
    ids = list(pool["trajectories"])
    for k, record in enumerate(pool["trajectories"].values()):
        record["parent_trajectories"] = [ids[k - 1], f"gone-{k % 7}"]
    (tmp_path / "a.json").write_text(json.dumps(pool))
    return read_trajectories(tmp_path / "a.json", keep_text=False).columns


def _broken(columns: PoolColumns, damage: str) -> PoolColumns:
    """``columns`` with one number out of range, as a writer's bug would leave it."""
    n = len(columns)
    changes: dict[str, Any] = {}
    if damage == "agent code":
        codes = columns.agent.codes.copy()
        codes[3] = len(columns.agent.values)
        changes["agent"] = Coded(codes, columns.agent.values)
    elif damage == "negative code":
        codes = columns.tools.codes.copy()
        codes[0] = -1
        changes["tools"] = Coded(codes, columns.tools.values)
    elif damage in ("labelled past the pool", "labelled out of order"):
        rows = columns.labelled.copy()
        if damage == "labelled past the pool":
            rows[-1] = n
        else:
            rows[[0, 1]] = rows[[1, 0]]
        changes["labelled"] = rows
    elif damage == "parent":
        parent = columns.parent.copy()
        parent[0] = n + len(columns.outside)
        changes["parent"] = parent
    elif damage == "parent start":
        start = columns.parent_start.copy()
        start[-1] += 1
        changes["parent_start"] = start
    else:
        outcome = columns.outcome.copy()
        outcome[0] = 99
        changes["outcome"] = outcome
    return dataclasses.replace(columns, **changes)


DAMAGES = [
    "agent code", "negative code", "labelled past the pool", "labelled out of order",
    "parent", "parent start", "outcome",
]  # fmt: skip


def test_an_entry_round_trips_column_for_column(tmp_path: Path) -> None:
    """What is written is read back: every column, value for value and dtype for dtype."""
    columns = _columns(tmp_path)
    assert len(columns.parent) and len(columns.outside)  # parents inside and outside
    write_pool_file(tmp_path / "e.gfpool", StoredPool(columns, 3, _FILES, []), "v")
    stored = read_pool_file(tmp_path / "e.gfpool", "v", _ROOM)
    assert stored.files == _FILES and stored.duplicates == 3
    for name, value in vars(columns).items():
        other = getattr(stored.columns, name)
        if isinstance(value, np.ndarray):
            assert value.dtype == other.dtype and np.array_equal(value, other, equal_nan=True)
        elif isinstance(value, Coded):
            assert value.values == other.values and np.array_equal(value.codes, other.codes)
        else:
            assert value == other, name


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_number_out_of_range_is_refused_though_its_checksums_hold(
    tmp_path: Path, damage: str
) -> None:
    """A code naming no value, a labelled row past the pool or out of order, a parent
    naming no row or outside id, parents' starts past the parents, an outcome past
    OUTCOMES: written with checksums that match, refused on read with what is wrong
    (served, the run's examples or lineage raised IndexError on every read)."""
    columns = _broken(_columns(tmp_path), damage)
    write_pool_file(tmp_path / "e.gfpool", StoredPool(columns, 0, _FILES, []), "v")
    with pytest.raises(ValueError, match=r"pool .*(range|names no value|out of order)"):
        read_pool_file(tmp_path / "e.gfpool", "v", _ROOM)


def test_an_entry_over_its_limit_is_refused_by_its_size_alone(tmp_path: Path) -> None:
    """One byte over ``limit`` is refused before the entry's first byte is read."""
    path = tmp_path / "e.gfpool"
    write_pool_file(path, StoredPool(_columns(tmp_path), 0, _FILES, []), "v")
    size = path.stat().st_size
    assert read_pool_file(path, "v", size).columns is not None
    with pytest.raises(ValueError, match=f"{size:,} bytes, over the {size - 1:,}"):
        read_pool_file(path, "v", size - 1)


def _age(folder: Path) -> None:
    """Files written a minute ago: older than RACY_NS before any scan, so cacheable."""
    for file in folder.iterdir():
        past = file.stat().st_mtime_ns - 60 * 10**9
        os.utime(file, ns=(past, past))


def test_the_size_bound_holds_an_entry_of_tiny_records_and_many_quarantined_lines(
    tmp_path: Path,
) -> None:
    """The pool that costs its entry most against its files' own entries (minimal
    records with no parent, a quarantined entry per two-byte line) is still served whole:
    the bound refuses only what this build cannot have written."""
    folder = tmp_path / "pool"
    folder.mkdir()
    records = [{"trajectory_id": f"{i}", "status": "success"} for i in range(3000)]
    lines = [json.dumps(r, separators=(",", ":")) for r in records] + ["x"] * 3000
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "b.json").write_text(json.dumps([1] * 2000, separators=(",", ":")))
    _age(folder)
    for name in ("cold", "second", "warm"):
        manifest, _ = scan_files(folder)
        cache = RecordCache(tmp_path / "cache", manifest)
        data = read_trajectories(folder, tmp_path / f"{name}.jsonl", cache=cache, keep_text=False)
    assert cache.pool_hit and data.quarantined == 5000 and data.labelled == 3000
    (entry,) = (tmp_path / "cache").glob("pool-*.gfpool")
    own = sum(p.stat().st_size for p in (tmp_path / "cache").glob("*-slim.msgpack"))
    paths = [str(p) for p in sorted(folder.iterdir())]
    assert entry.stat().st_size <= size_bound(own, paths)
    assert pool_file.FORMAT == 2
