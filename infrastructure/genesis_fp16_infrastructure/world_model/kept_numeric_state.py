"""A kept pool of numeric rows as a process holds it (``world_model.kept_numeric``): its
columns, the rows' own store with room to grow and the views of it lent out, each row's
stamp, what its keys were hashed from and what is kept sorted for the next growth; and
the helpers a growth, a splice or a whole write makes its next state with.

    state = owned(kept, end, inputs, columns)  # a pool just written, rows of its own
    buffer = laid(state, places, rows)  # the kept rows at their places after a splice
"""

from __future__ import annotations

import threading
import weakref
from typing import NamedTuple, cast

import numpy as np
import torch

from genesis_fp16_infrastructure.data.pool_columns import SPLICED_FROM, PoolColumns
from genesis_fp16_infrastructure.data.pool_splice import move_rows
from genesis_fp16_infrastructure.world_model.content_keys import KeptKeys, KeyInputs
from genesis_fp16_infrastructure.world_model.kept_numeric_columns import WIDTH, Kept
from genesis_fp16_infrastructure.world_model.sorted_growth import SortedGrowth


class State(NamedTuple):
    """A kept pool as this process holds it: its columns, where the file's last good frame
    ends (the next append goes there), how many frames make it, and its parents named
    sorted by hash (``by_parent``; None until an append needs them). ``kept.order`` is
    empty in a pool grown here (:meth:`KeptNumeric._grown`): its keys' order is
    ``by_key``'s, made whole only where wanted (:func:`ordered`)."""

    kept: Kept
    end: int
    frames: int
    by_parent: SortedGrowth | None = None
    # The rows' own store, ``kept.numeric`` its first rows, with room to grow: an append
    # writes into it, no copy of the kept rows (None: rows read from the file).
    buffer: np.ndarray | None = None
    # What ``kept.key`` was hashed from (None: read from the file); the views lent out
    # (:meth:`KeptNumeric.view`): kept rows are not written in place while one lives.
    inputs: KeyInputs | None = None
    lent: list[weakref.ref[np.ndarray | torch.Tensor]] | None = None
    # Per labelled row, a number no other working out was given (:func:`stamps`): kept
    # while the row is, new when it is worked out again (recipes.retrain.kept_outputs).
    stamp: np.ndarray | None = None
    # The tensor over ``buffer`` that :meth:`KeptNumeric.rows` hands out views of, and its
    # version then (None: rows read from the file, handed out as a copy).
    guard: Guard | None = None
    # The pool (its columns' token: the same rows, a copy of them included) whose rows
    # these are, when this process worked them out or found them unchanged: asked again
    # for that pool (the scorings' view, then the run's encode), the rows are these, no
    # key worked out or compared.
    made_of: list[object] | None = None
    # The keys sorted (two levels, :mod:`.sorted_growth`), for the next append (_grown):
    # None, made of ``kept.order`` then.
    by_key: SortedGrowth | None = None


class Guard:
    """The one tensor over a rows' store that :meth:`KeptNumeric.rows` hands its callers
    views of, and its version counter as it was handed out. torch has no read-only
    tensor, but every in-place write through a view (``add_``, ``x[i] = v``, ``out=``)
    moves the counter its views share: a moved counter is a write into the kept rows,
    and the kept pool is refused before its next use (:meth:`KeptNumeric._state`).
    A write through ``.numpy()`` moves nothing: no caller makes one (a test runs a
    task's encode, training and drift and finds the rows' bits unchanged). Rows handed
    out as the caller's own get one too: unwritten, their stamps still hold
    (:meth:`KeptNumeric.stamps_of`)."""

    __slots__ = ("tensor", "version")

    def __init__(self, buffer: np.ndarray) -> None:
        self.tensor = torch.from_numpy(buffer)
        self.version = self.tensor._version

    def written(self) -> bool:
        """Whether a view handed out of the store was written into since."""
        return bool(self.tensor._version != self.version)


def splice_of(columns: PoolColumns, state: State | None) -> np.ndarray | None:
    """Where the kept pool's records lie in ``columns`` when the read laid new records
    among them (``pool_columns.SPLICED_FROM``) and the kept rows are that pool's (its
    token among what they were made of); None otherwise."""
    note = vars(columns).get(SPLICED_FROM)
    if note is None or state is None or not state.made_of:
        return None
    token, old_at = note
    if not any(made is token for made in state.made_of) or len(old_at) != len(state.kept.key):
        return None
    return cast(np.ndarray, old_at)


def laid(state: State, places: np.ndarray, rows: int) -> np.ndarray:
    """A store for ``rows`` rows holding the kept ones at ``places`` (ascending, each at or
    after its own): the state's own, its rows moved in place (``pool_splice.move_rows``),
    when it has room and no view of it is lent; else a new one, with room for a quarter
    more."""
    kept = state.kept.numeric
    buffer = state.buffer
    if buffer is None or len(buffer) < rows or lent(state):
        buffer = np.empty((rows + rows // 4, WIDTH), dtype=np.float64)
        buffer[places] = kept
        return buffer
    move_rows(buffer, places)
    return buffer


def room(state: State, rows: int, new: bool = False) -> np.ndarray:
    """A store for ``rows`` rows holding the kept ones first: the state's own when it has
    room (written in place) and not ``new``, else a new one with room for a quarter more."""
    if state.buffer is not None and len(state.buffer) >= rows and not new:
        return state.buffer
    buffer = np.empty((rows + rows // 4, WIDTH), dtype=np.float64)
    buffer[: len(state.kept.numeric)] = state.kept.numeric
    return buffer


def owned(
    kept: Kept, end: int, inputs: KeyInputs, columns: PoolColumns, stamp: np.ndarray | None = None
) -> State:
    """``kept``, as just written (``end``: the file's size), with rows of its own: the
    rows are the caller's too, and what it does with them must not reach what is kept.
    One copy (~23 MB at 100,000 records), into a store with room for the next appends;
    the other columns are made for it, or the pool's, which the record cache keeps from
    run to run alike and nothing writes."""
    rows = len(kept.numeric)
    buffer = np.empty((rows + rows // 4, WIDTH), dtype=np.float64)
    buffer[:rows] = kept.numeric
    numeric = buffer[:rows]
    # The parents named, sorted, for the next run's append (_grown): sorted here, where
    # every record was worked out or written, not in the later run that adds a few.
    by_parent = SortedGrowth.of(kept.parent_hash)
    by_key = SortedGrowth.of(kept.key, kept.order)
    stamp = stamps(rows) if stamp is None or len(stamp) != rows else stamp
    return State(kept._replace(numeric=numeric), end, 1, by_parent, buffer, inputs, [],
                  stamp, Guard(buffer), [columns.token], by_key)  # fmt: skip


_STAMPS = [1]  # the next stamp this process gives
_STAMPS_LOCK = threading.Lock()


def kept_keys(state: State | None) -> KeptKeys | None:
    """What ``state`` says of its pool's content keys (None: nothing to check them by)."""
    if state is None or state.inputs is None:
        return None
    k = state.kept
    return KeptKeys(k.key, k.id_hash, k.parent_start, k.parent_hash, k.labelled, state.inputs)


def stamps(count: int) -> np.ndarray:
    """``count`` numbers (uint64) no earlier call in this process gave (``State.stamp``)."""
    with _STAMPS_LOCK:
        first = _STAMPS[0]
        _STAMPS[0] += count
    return np.arange(first, first + count, dtype=np.uint64)


def sorting(
    kept: SortedGrowth | None, values: np.ndarray, order: np.ndarray | None = None
) -> SortedGrowth:
    """``values`` sorted: ``kept`` when it passes its check against them
    (:meth:`~.sorted_growth.SortedGrowth.indexes`), else sorted now (by ``order``, the
    indices that sort them, when it is whole)."""
    if kept is not None and kept.indexes(values):
        return kept
    whole = order is not None and len(order) == len(values)
    return SortedGrowth.of(values, order if whole else None)


def ordered(state: State) -> Kept:
    """``state``'s pool with its keys' order whole (:class:`State`): as kept, or made
    of ``by_key`` (a pool grown here), or sorted again."""
    kept = state.kept
    if len(kept.order) == len(kept.key):
        return kept
    return kept._replace(order=sorting(state.by_key, kept.key).whole()[0])


def made_of(state: State | None, columns: PoolColumns) -> bool:
    """Whether ``state``'s rows were worked out (or found unchanged) for ``columns``' rows
    (its token: ``PoolColumns.token``, which only a copy of the same rows carries)."""
    return state is not None and any(token is columns.token for token in state.made_of or ())


def lent(state: State) -> bool:
    """Whether a view of ``state``'s rows lent by :meth:`KeptNumeric.view` or
    :meth:`KeptNumeric.rows` still lives."""
    return state.lent is not None and any(ref() is not None for ref in state.lent)


def written(state: State) -> bool:
    """Whether a caller wrote into rows :meth:`KeptNumeric.rows` handed out of ``state``."""
    return state.guard is not None and state.guard.written()


def held_bytes(state: State) -> int:
    """What ``state`` holds, for the store's budget: its columns, the rows' store with its
    room (the rows a view of it), the parents' order and what is kept sorted."""
    held = sum(a.nbytes for a in state.kept)
    if state.buffer is not None:
        held += state.buffer.nbytes - state.kept.numeric.nbytes
    for sorting in (state.by_parent, state.by_key):  # their source is a kept column
        held += 0 if sorting is None else sum(a.nbytes for a in sorting[:4])
    return held
