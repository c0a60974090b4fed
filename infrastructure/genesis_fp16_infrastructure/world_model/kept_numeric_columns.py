"""A kept pool's columns (``world_model.kept_numeric``): what the kept file holds, each
column's type, and the checks a read makes before a row of it is used.

A whole frame holds :data:`DTYPES`' columns, an append frame :data:`APPEND`'s
(``KeptNumeric._grown``'s): :func:`whole` and :func:`applied` rebuild the pool from them,
:func:`check` refuses one whose columns disagree, and :func:`size_bound` is the most a
file for a pool of a given size may hold.

    kept = whole(frames[0].arrays)
    for frame in frames[1:]:
        kept = applied(kept, frame)
    check(kept)  # ValueError: the file is refused, its rows worked out
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from genesis_fp16_infrastructure.data.lineage import MAX_DEPTH
from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES
from genesis_fp16_infrastructure.world_model.kept_numeric_file import Frame

WIDTH = len(NUMERIC_FEATURES)
DTYPES = {
    "key": "<u8",  # per pool record: its content key
    "order": "<i8",  # the records by key, ascending (distinct: checked)
    "id_hash": "<i8",  # per pool record
    "parent_start": "<i8",  # pool records + 1
    "parent_hash": "<i8",  # per parent named: its id's hash
    "labelled": "<i8",  # the labelled rows, in pool order
    "numeric": "<f8",  # (labelled, NUMERIC_FEATURES)
    "depth": "<i8",  # per pool record (lineage_columns' depth); none when the lineage loops
}
# An append frame (KeptNumeric._grown): the new records' columns as above (their parents'
# starts from 0, their labelled rows as pool rows), and the kept records worked out again
# beside them: their labelled positions and rows, and the records whose depth moved.
APPEND = {
    **{k: v for k, v in DTYPES.items() if k != "order"},
    "redone": "<i8",
    "redone_numeric": "<f8",
    "redepth": "<i8",
    "redepth_value": "<i8",
}
FIXED = 64 * 2**10


class Kept(NamedTuple):
    """A pool's kept columns (``DTYPES``)."""

    key: np.ndarray
    order: np.ndarray
    id_hash: np.ndarray
    parent_start: np.ndarray
    parent_hash: np.ndarray
    labelled: np.ndarray
    numeric: np.ndarray
    depth: np.ndarray


def whole(arrays: dict[str, np.ndarray]) -> Kept:
    if set(arrays) != set(DTYPES):
        raise ValueError(f"columns {sorted(arrays)}, not this build's")
    for name, array in arrays.items():
        if array.dtype != np.dtype(DTYPES[name]):
            raise ValueError(f"kept column {name} of dtype {array.dtype}")
    return Kept(**arrays)


def applied(kept: Kept, frame: Frame) -> Kept:
    """``kept`` grown by an ``append`` frame (:meth:`KeptNumeric._grown`'s), checked."""
    a = frame.arrays
    if frame.kind != "append" or set(a) != set(APPEND):
        raise ValueError(f"a {frame.kind} frame of columns {sorted(a)} after the first")
    if frame.records != len(kept.key) or frame.labelled != len(kept.labelled):
        raise ValueError("an append onto another pool than the frames before it make")
    for name, bound in (("redone", frame.labelled), ("redepth", frame.records)):
        at = a[name]
        if len(at) and (at.min() < 0 or at.max() >= bound):
            raise ValueError(f"kept {name} rows out of range")
    if len(kept.depth) != len(kept.key) or a["parent_start"][0] != 0:
        raise ValueError("an append onto a pool without depths, or its parents out of order")
    for name, array in a.items():
        if array.dtype != np.dtype(APPEND[name]):
            raise ValueError(f"kept column {name} of dtype {array.dtype}")
    numeric = np.concatenate((kept.numeric, a["numeric"]))
    numeric[a["redone"]] = a["redone_numeric"]  # positions among the kept labelled rows
    depth = np.concatenate((kept.depth, a["depth"]))
    depth[a["redepth"]] = a["redepth_value"]
    slots = len(kept.parent_hash)
    return Kept(
        np.concatenate((kept.key, a["key"])),
        kept.order,  # sorted again once every frame is applied
        np.concatenate((kept.id_hash, a["id_hash"])),
        np.concatenate((kept.parent_start[:-1], a["parent_start"] + slots)),
        np.concatenate((kept.parent_hash, a["parent_hash"])),
        np.concatenate((kept.labelled, a["labelled"])),
        numeric,
        depth,
    )


def size_bound(records: int, parents: int) -> int:
    """The most bytes a kept file for a pool of about ``records`` records naming
    ``parents`` parents can hold: twice that pool's columns (a pool may shrink by half
    between runs and still be read), and the header."""
    # key, order, id hash, parents' start, depth; labelled; rows (the order column was
    # left out of this count before the file grew by frames: twice the pool hid it)
    per_record = 5 * 8 + 8 + WIDTH * 8
    return 2 * (records * per_record + parents * 8) + FIXED


def check(kept: Kept) -> None:
    """Every column as long as its pool, every row and parent start in range."""
    n = len(kept.key)
    if len(kept.id_hash) != n or len(kept.parent_start) != n + 1:
        raise ValueError("kept columns of other lengths than the pool's")
    if len(kept.depth) not in (0, n):
        raise ValueError("kept depths of another length than the pool's")
    if len(kept.depth) and (kept.depth.min() < 0 or kept.depth.max() > MAX_DEPTH):
        raise ValueError("kept depths out of range")
    if kept.numeric.shape != (len(kept.labelled), WIDTH):
        raise ValueError("kept numeric rows of another shape than the labelled records'")
    start = kept.parent_start
    if start[0] != 0 or start[-1] != len(kept.parent_hash) or (np.diff(start) < 0).any():
        raise ValueError("kept parents' starts out of order")
    labelled = kept.labelled
    if len(labelled) and (labelled.min() < 0 or labelled.max() >= n):
        raise ValueError("kept labelled rows out of range")
    if len(kept.order) != n or (n and (kept.order.min() < 0 or kept.order.max() >= n)):
        raise ValueError("kept key order out of range")
    if (np.diff(kept.key[kept.order]) <= 0).any():  # distinct ids: distinct keys
        raise ValueError("kept keys out of order, or repeated")
