"""A pool's encoded feature rows, kept from one run to the next in a resident run process:
a record is encoded once while the encoder is the same (issue 90, item 2).

A later run that encodes with the served model's encoder
(``recipes.retrain.encoder_choice``) scales each record as the run before it did: each
row of :meth:`~.features.FeatureEncoder.encode_parts` is its record's alone (its numeric
row centred and scaled, its categorical values' columns looked up), so the rows of
records that did not change are the rows encoded then, bit for bit. :class:`KeptEncoded`
keeps the float32 rows of each part of a pool (the task's train, validation and
held-out parts) in this process's bounded store (``KeptNumeric.memory``: on only in a
resident run process), beside the encoder they were made with, and gives the next
pool's parts:

* **The same encoder, or nothing.** An entry is used only when its encoder's saved state
  equals this one's exactly; any other encoder (a fit, a resume) encodes every row, and
  its rows replace the entry.
* **A row is kept while its inputs are.** Each part (train, validation, held-out) is
  kept in its own order. A row is taken from the entry when it is the same labelled
  record at the same place in the part, the kept numeric rows say its numbers are the
  ones worked out then (its stamp, ``KeptNumeric.stamp``: a row worked out again, new,
  or moved has another) and its four categorical values are the ones it had (compared
  by value, through each field's codes). The rest are encoded: a relabelled or edited
  record is worked out again by ``KeptNumeric`` (another content key), so it is encoded
  again, never read stale. Kept rows whose record moved within the part (one before it
  went to another part: validation's share shrinks as a pool grows) are gathered to
  their new places, one copy, not encoded.
* **Grown in place, given as a view.** A part has room for a quarter more rows. A pool
  grown at its end keeps its parts' records in order and adds the new ones after them,
  so the new rows are written after the kept ones and the part given is a view of
  them: no copy and no gather. The entry is dropped from the store before its rows are
  written, and kept again after, so a run that fails midway leaves nothing half-written;
  and it is not written in place while a part given out of it lives (the task before,
  not yet freed): then the kept rows are copied into a new store.

    kept = KeptEncoded(memory, name)  # memory: a KeptInMemory, or None (nothing kept)
    x = kept.part("train", rows, encoder, columns, numeric, stamp)  # == encode_parts(rows)
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from genesis_fp16_infrastructure.data.pool_columns import Coded, PoolColumns
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.world_model.features import Categorical, FeatureEncoder

KIND = "encoded rows"  # the store's key: (KIND, the kept numeric rows' file)


@dataclass
class _Entry:
    """A part's encoded rows (``buffer[:len(rows)]``), the encoder's state they were made
    with, and per row its labelled record (``rows``), that record's numeric stamp and its
    categorical fields' codes, with each field's values."""

    encoder: dict[str, Any]
    buffer: torch.Tensor  # float32, with room to grow
    rows: np.ndarray
    stamp: np.ndarray
    codes: tuple[np.ndarray, ...]
    values: tuple[list[Any], ...]
    lent: list[weakref.ref[torch.Tensor]]  # the parts given out: not written while alive

    def nbytes(self) -> int:
        held = self.buffer.nbytes + self.rows.nbytes + self.stamp.nbytes
        return int(held + sum(c.nbytes for c in self.codes))


class KeptEncoded:
    """The encoded rows of one pool's parts, kept in ``memory`` under ``name`` (the kept
    numeric rows' file) and each part's name; its counts say what :meth:`part` did."""

    def __init__(self, memory: KeptInMemory | None, name: str) -> None:
        self.memory = memory
        self.name = name
        self.reused = 0  # rows taken from the kept parts
        self.encoded = 0  # rows encoded (new, changed, or another encoder)

    def part(
        self,
        part: str,
        rows: np.ndarray,
        encoder: FeatureEncoder,
        columns: PoolColumns,
        numeric: torch.Tensor,
        stamp: np.ndarray | None,
    ) -> torch.Tensor:
        """``encoder.encode_parts`` of the labelled records ``rows`` (``numeric``: every
        labelled record's numeric rows; ``stamp``: their stamps, None when unknown), the
        rows kept for the same place in ``part``, encoder and inputs taken, the rest
        encoded; kept for the next run when ``memory`` and ``stamp`` are given. A grown
        part (the kept rows first, the new ones after: a pool grown at its end) is
        written in place after the kept rows, and given as a view of them: no copy."""
        fields = tuple(c.at(columns.labelled[rows]) for c in _fields(columns))
        state = encoder.state_dict()
        key = (KIND, self.name, part)
        entry = self._entry(key, state, stamp)
        n = len(rows)
        todo, source = np.arange(n), np.full(n, -1, np.int64)
        if entry is not None:
            source = _kept_places(entry, rows, stamp, fields)
            todo = np.flatnonzero(source < 0)
        kept = np.flatnonzero(source >= 0)
        # In place when every kept row is where it was (a part grown at its end), there is
        # room and no part given out of it lives; else the kept rows gathered into a new
        # store (a record moved between parts: validation's share shrinks as a pool grows).
        if (
            entry is not None
            and len(entry.buffer) >= n
            and np.array_equal(source[kept], kept)
            and not _lent(entry)
        ):
            buffer = entry.buffer  # the entry is out of the store meanwhile
        else:
            buffer = torch.empty((n + n // 4, encoder.n_features), dtype=torch.float32)
            if entry is not None and len(kept):  # one gather (rows to encode take row 0)
                where = torch.from_numpy(np.maximum(source, 0))
                torch.index_select(entry.buffer, 0, where, out=buffer[:n])
        if len(todo):
            at = torch.from_numpy(todo)
            parts = Categorical(*(_distinct(c.at(todo)) for c in fields))
            x = encoder.encode_parts(parts, numeric, torch.from_numpy(rows[todo]))
            if len(todo) == todo[-1] - todo[0] + 1:  # a run of rows (a grown part's tail)
                buffer[int(todo[0]) : int(todo[-1]) + 1] = x
            else:
                buffer[at] = x
        self.reused += n - len(todo)
        self.encoded += len(todo)
        out = buffer[:n]
        if self.memory is not None and stamp is not None:
            codes = tuple(c.codes for c in fields)
            values = tuple(list(c.values) for c in fields)
            lent = [weakref.ref(out)]
            kept_entry = _Entry(state, buffer, rows.copy(), stamp[rows], codes, values, lent)
            self.memory.put(key, KIND, kept_entry, kept_entry.nbytes(), f"{KIND} of {n:,}")
        return out

    def _entry(
        self, key: Hashable, state: dict[str, Any], stamp: np.ndarray | None
    ) -> _Entry | None:
        """The kept entry, if made with this encoder and there are stamps to check its
        rows by; out of the store from here on (its rows may be written)."""
        if self.memory is None:
            return None
        found = self.memory.get(key, KIND)
        self.memory.put(key, None, None, 0, "nothing")  # out until kept again
        if not isinstance(found, _Entry) or stamp is None or found.encoder != state:
            return None
        return found


def _lent(entry: _Entry) -> bool:
    """Whether a part given out of ``entry``'s rows still lives (a task not yet freed)."""
    return any(ref() is not None for ref in entry.lent)


def _fields(columns: PoolColumns) -> tuple[Coded, Coded, Coded, Coded]:
    """The categorical columns the encoder reads, in :class:`Categorical`'s order."""
    return (columns.operator, columns.tools, columns.pattern, columns.agent)


def _kept_places(
    entry: _Entry, rows: np.ndarray, stamp: np.ndarray | None, fields: tuple[Coded, ...]
) -> np.ndarray:
    """Per place in the part, the entry's place of the same labelled record when its row
    still holds (the same stamp and the same categorical values); -1 where it must be
    encoded (new, worked out again, or of other values)."""
    assert stamp is not None
    kept_rows = entry.rows
    if len(kept_rows) == 0:
        return np.full(len(rows), -1, np.int64)
    order = None if bool(np.all(kept_rows[1:] > kept_rows[:-1])) else np.argsort(kept_rows)
    at = np.searchsorted(kept_rows, rows, sorter=order)
    at = np.minimum(at, len(kept_rows) - 1)
    if order is not None:
        at = order[at]
    same = (kept_rows[at] == rows) & (entry.stamp[at] == stamp[rows])
    for now, codes, values in zip(fields, entry.codes, entry.values, strict=True):
        same &= _as_codes(values, now.values)[codes[at]] == now.codes
    return np.where(same, at, -1)


def _as_codes(kept: list[Any], values: list[Any]) -> np.ndarray:
    """Each kept value's code among today's ``values`` (-1: no longer there). A grown
    pool's values begin with the kept ones (the codes stay): one comparison of lists."""
    if values[: len(kept)] == kept:
        return np.arange(len(kept), dtype=np.int64)
    place = {value: k for k, value in enumerate(values)}
    return np.array([place.get(v, -1) for v in kept], dtype=np.int64)


def _distinct(coded: Coded) -> Coded:
    """``coded`` with only the values it uses (a few new rows look up a few tables' rows,
    not a table of the whole pool's values): each row's value, so its encoding, the same."""
    used, codes = np.unique(coded.codes, return_inverse=True)
    return Coded(codes.astype(np.int64).reshape(-1), [coded.values[k] for k in used.tolist()])
