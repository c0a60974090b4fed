"""A pool's encoded feature rows, kept from one run to the next in a resident run process:
a record is encoded once while the encoder is the same (issue 90, item 2).

A later run that encodes with the served model's encoder
(``recipes.retrain.encoder_choice``) scales each record as the run before it did: each
row of :meth:`~.features.FeatureEncoder.encode_parts` is its record's alone (its numeric
row centred and scaled, its categorical values' columns looked up), so the rows of
records that did not change are the rows encoded then, bit for bit. :class:`KeptEncoded`
keeps the float32 matrix of a pool's labelled records in this process's bounded store
(``KeptNumeric.memory``: on only in a resident run process), beside the encoder it was
made with, and gives the next pool's matrix:

* **The same encoder, or nothing.** An entry is used only when its encoder's saved state
  equals this one's exactly; any other encoder (a fit, a resume) encodes every row, and
  its matrix replaces the entry.
* **A row is kept while its inputs are.** A labelled row is taken from the entry when
  the kept numeric rows say it is the one worked out then (its stamp,
  ``KeptNumeric.stamp``: a row worked out again, new, or moved has another) and its four
  categorical values are the ones it had (compared by value, through each field's
  codes). The rest are encoded: a relabelled or edited record is worked out again by
  ``KeptNumeric`` (another content key), so it is encoded again, never read stale.
* **Grown in place.** The matrix has room for a quarter more rows; the kept rows are not
  copied while it fits. The entry is dropped from the store before its rows are
  written, and kept again after, so a run that fails midway leaves nothing half-written.

    kept = KeptEncoded(memory, name)  # memory: a KeptInMemory, or None (nothing kept)
    x = kept.matrix(encoder, columns, numeric, stamp)  # == encoder.encode_parts(all rows)
"""

from __future__ import annotations

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
    """A pool's encoded rows (``buffer[:rows]``), the encoder's state they were made with,
    each row's numeric stamp and each categorical field's codes and values."""

    encoder: dict[str, Any]
    buffer: torch.Tensor  # float32, with room to grow
    rows: int
    stamp: np.ndarray
    codes: tuple[np.ndarray, ...]
    values: tuple[list[Any], ...]

    def nbytes(self) -> int:
        return int(self.buffer.nbytes + self.stamp.nbytes + sum(c.nbytes for c in self.codes))


class KeptEncoded:
    """The encoded rows of one pool's labelled records, kept in ``memory`` under ``name``
    (the kept numeric rows' file); its counts say what the last :meth:`matrix` did."""

    def __init__(self, memory: KeptInMemory | None, name: str) -> None:
        self.memory = memory
        self.key: Hashable = (KIND, name)
        self.reused = 0  # rows taken from the kept matrix
        self.encoded = 0  # rows encoded (new, changed, or another encoder)

    def matrix(
        self,
        encoder: FeatureEncoder,
        columns: PoolColumns,
        numeric: torch.Tensor,
        stamp: np.ndarray | None,
    ) -> torch.Tensor:
        """``encoder.encode_parts`` of every labelled record (``numeric``: their numeric
        rows, in order; ``stamp``: those rows' stamps, None when unknown), the rows kept
        for the same encoder and inputs taken, the rest encoded; kept for the next run
        when ``memory`` and ``stamp`` are given. The caller's until the next call: gather
        from it, keep no view."""
        n = len(columns.labelled)
        fields = tuple(c.at(columns.labelled) for c in _fields(columns))
        state = encoder.state_dict()
        entry = self._entry(state, stamp)
        todo = np.arange(n) if entry is None else _changed(entry, stamp, fields, n)
        if entry is not None and len(entry.buffer) >= n:
            buffer = entry.buffer  # written in place: the entry is out of the store meanwhile
        else:
            buffer = torch.empty((n + n // 4, encoder.n_features), dtype=torch.float32)
            if entry is not None:
                kept = min(entry.rows, n)
                buffer[:kept] = entry.buffer[:kept]
        if len(todo):
            rows = torch.from_numpy(todo)
            parts = Categorical(*(_distinct(c.at(todo)) for c in fields))
            buffer[rows] = encoder.encode_parts(parts, numeric, rows)
        self.reused, self.encoded = n - len(todo), len(todo)
        if self.memory is not None and stamp is not None:
            codes = tuple(c.codes for c in fields)
            values = tuple(list(c.values) for c in fields)
            kept_entry = _Entry(state, buffer, n, stamp, codes, values)
            self.memory.put(self.key, KIND, kept_entry, kept_entry.nbytes(), f"{KIND} of {n:,}")
        return buffer[:n]

    def _entry(self, state: dict[str, Any], stamp: np.ndarray | None) -> _Entry | None:
        """The kept entry, if made with this encoder and there are stamps to check its
        rows by; out of the store from here on (its rows may be written)."""
        if self.memory is None:
            return None
        found = self.memory.get(self.key, KIND)
        self.memory.put(self.key, None, None, 0, "nothing")  # out until kept again
        if not isinstance(found, _Entry) or stamp is None or found.encoder != state:
            return None
        return found


def _fields(columns: PoolColumns) -> tuple[Coded, Coded, Coded, Coded]:
    """The categorical columns the encoder reads, in :class:`Categorical`'s order."""
    return (columns.operator, columns.tools, columns.pattern, columns.agent)


def _changed(
    entry: _Entry, stamp: np.ndarray | None, fields: tuple[Coded, ...], n: int
) -> np.ndarray:
    """The labelled rows to encode: new ones, and those whose stamp or any categorical
    value differs from the entry's row at the same place."""
    assert stamp is not None
    m = min(n, entry.rows, len(stamp), len(entry.stamp))
    same = entry.stamp[:m] == stamp[:m]
    for now, codes, values in zip(fields, entry.codes, entry.values, strict=True):
        # The kept codes as codes into today's values (-1: a value no longer there).
        place = {value: k for k, value in enumerate(now.values)}
        mapped = np.array([place.get(v, -1) for v in values], dtype=np.int64)
        same &= mapped[codes[:m]] == now.codes[:m]
    return np.concatenate((np.flatnonzero(~same), np.arange(m, n)))


def _distinct(coded: Coded) -> Coded:
    """``coded`` with only the values it uses (a few new rows look up a few tables' rows,
    not a table of the whole pool's values): each row's value, so its encoding, the same."""
    used, codes = np.unique(coded.codes, return_inverse=True)
    return Coded(codes.astype(np.int64).reshape(-1), [coded.values[k] for k in used.tolist()])
