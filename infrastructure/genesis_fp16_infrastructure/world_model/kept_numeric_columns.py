"""A kept pool's columns (``world_model.kept_numeric``): what the kept file holds, each
column's type, and the checks a read makes before a row of it is used.

A whole frame holds :data:`DTYPES`' columns, an append frame :data:`APPEND`'s
(``KeptNumeric._grown``'s), a splice frame :data:`SPLICE`'s (``KeptNumeric._spliced``'s):
:func:`whole` and :func:`applied` rebuild the pool from them,
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
from genesis_fp16_infrastructure.data.pool_columns import ranges
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
# A splice frame (KeptNumeric._spliced): an append's columns, every place one of the
# pool after it (the new records' labelled rows, the kept ones redone and their depths
# moved), and ``at``: each new record's place in that pool, ascending; the kept records
# fill the others, in their order.
SPLICE = {**APPEND, "at": "<i8"}
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
    """``kept`` grown by an ``append`` frame (:meth:`KeptNumeric._grown`'s) or a
    ``splice`` (:meth:`KeptNumeric._spliced`'s), checked."""
    a = frame.arrays
    columns = {"append": APPEND, "splice": SPLICE}.get(frame.kind)
    if columns is None or set(a) != set(columns):
        raise ValueError(f"a {frame.kind} frame of columns {sorted(a)} after the first")
    if frame.records != len(kept.key) or frame.labelled != len(kept.labelled):
        raise ValueError(f"an {frame.kind} onto another pool than the frames before it make")
    if len(kept.depth) != len(kept.key) or a["parent_start"][0] != 0:
        raise ValueError(f"an {frame.kind} onto a pool without depths, or parents out of order")
    for name, array in a.items():
        if array.dtype != np.dtype(columns[name]):
            raise ValueError(f"kept column {name} of dtype {array.dtype}")
    if frame.kind == "splice":
        return _spliced(kept, a)
    for name, bound in (("redone", frame.labelled), ("redepth", frame.records)):
        _in_range(a[name], bound, name)
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


def _spliced(kept: Kept, a: dict[str, np.ndarray]) -> Kept:
    """``kept`` with a splice frame's records laid among its own (:data:`SPLICE`)."""
    at, new_starts = a["at"], a["parent_start"]
    total = len(kept.key) + len(at)
    if len(at) != len(a["key"]) or len(new_starts) != len(at) + 1:
        raise ValueError("a splice frame whose places are not its records'")
    if len(at) and (at[0] < 0 or at[-1] >= total or (np.diff(at) <= 0).any()):
        raise ValueError("kept splice places out of order or out of range")
    new = np.zeros(total, np.bool_)
    new[at] = True
    old_at = np.flatnonzero(~new)
    old_counts, new_counts = np.diff(kept.parent_start), np.diff(new_starts)
    if len(a["parent_hash"]) != new_starts[-1] or (new_counts < 0).any():
        raise ValueError("kept splice parents out of order")
    counts = np.empty(total, np.int64)
    counts[old_at], counts[at] = old_counts, new_counts
    start = np.concatenate(([0], np.cumsum(counts)))
    parent_hash = np.empty(start[-1], np.int64)
    parent_hash[ranges(start[old_at], old_counts)] = kept.parent_hash
    parent_hash[ranges(start[at], new_counts)] = a["parent_hash"]
    labelled_new = a["labelled"]
    if len(labelled_new) and not new[labelled_new].all():
        raise ValueError("kept splice labelled rows that are not its records")
    if len(labelled_new) != len(a["numeric"]) or (np.diff(labelled_new) <= 0).any():
        raise ValueError("kept splice labelled rows out of order, or not its rows'")
    labelled = np.sort(np.concatenate((old_at[kept.labelled], labelled_new)))
    is_new = new[labelled]
    numeric = np.empty((len(labelled), WIDTH), np.float64)
    numeric[~is_new], numeric[is_new] = kept.numeric, a["numeric"]
    _in_range(a["redone"], len(labelled), "redone")
    numeric[a["redone"]] = a["redone_numeric"]
    _in_range(a["redepth"], total, "redepth")
    columns = {"key": np.uint64, "id_hash": np.int64, "depth": np.int64}
    laid = {}
    for name, dtype in columns.items():
        laid[name] = np.empty(total, dtype)
        laid[name][old_at], laid[name][at] = getattr(kept, name), a[name]
    laid["depth"][a["redepth"]] = a["redepth_value"]
    return Kept(laid["key"], kept.order, laid["id_hash"], start, parent_hash, labelled, numeric,
                laid["depth"])  # fmt: skip


def _in_range(at: np.ndarray, bound: int, name: str) -> None:
    if len(at) and (at.min() < 0 or at.max() >= bound):
        raise ValueError(f"kept {name} rows out of range")


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
