"""A pool's encoded feature rows, kept from one run to the next in a resident run process:
a record is encoded once while the encoder is the same (issue 90, item 2).

A later run that encodes with the served model's encoder
(``recipes.retrain.encoder_choice``) scales each record as the run before it did: each
row of :meth:`~.features.FeatureEncoder.encode_parts` is its record's alone (its numeric
row centred and scaled, its categorical values' columns looked up), so the rows of
records that did not change are the rows encoded then, bit for bit. :class:`KeptEncoded`
keeps the float32 rows of every labelled record of a pool, in the read's order, in this
process's bounded store (``KeptNumeric.memory``: on only in a resident run process),
beside the encoder they were made with, and gives the next pool's rows; the task's
parts (train, validation, held-out) are rows of them (``recipes.retrain.task.Part``), so
a record that moves from one part to another (validation's capped share shrinks as a
pool grows) moves no row:

* **The same encoder, or nothing.** An entry is used only when its encoder's saved state
  equals this one's exactly; any other encoder (a fit, a resume) encodes every row, and
  its rows replace the entry. An entry that is not what this module keeps (its rows of
  another width, fewer rows than it says) is refused, counted (``refused``).
* **A row is kept while its inputs are.** A row is taken from the entry when the same
  labelled record is at the same place in the pool, the kept numeric rows say its numbers
  are the ones worked out then (its stamp, ``KeptNumeric.stamp``: a row worked out again,
  or new, has another) and its four categorical values are the ones it had (compared by
  value, through each field's codes). A row that moved (a new file sorting among the
  old lays its records before it) keeps its stamp: it is found by its stamp at its old
  place, its values compared there, and copied to its new one, in a store of its own.
  Where the read laid the new records among the entry's pool (its note,
  ``pool_columns.SPLICED_FROM``, naming the pool the entry was made for), each kept row's
  new place comes from the note (no search by stamp), its record, stamp and values are
  checked there, and the rows are moved to their places in their own store, stretch by
  stretch from the last, where no row given out of it lives.
  The rest are encoded: a relabelled or edited record is worked out again by
  ``KeptNumeric`` (another content key), so it is encoded again, never read stale.
* **Checked by what changed.** Each of those columns is compared with the kept one as a
  whole array first, one comparison of the bytes (a pool grown at its end passes them
  all); only a column that differs is compared a record at a time, and only the records
  it finds are encoded again. No part's records are searched or gathered for the check.
* **Grown in place, given as a view.** The rows have room for a quarter more. A pool
  grown at its end keeps its records in order and adds the new ones after them, so the
  new rows are written after the kept ones and the pool's rows given are a view of them:
  no copy. The entry is dropped from the store before its rows are written, and kept
  again after, so a run that fails midway leaves nothing half-written; and it is not
  written in place while rows given out of it live (the task before, not yet freed):
  then the kept rows are copied into a new store.

* **The held-out part grows too.** The held-out records are drawn by their ids alone, so
  a grown pool's held-out part is the last one's with the new records' after it
  (:meth:`KeptEncoded.part`): its rows are kept beside the pool's, the rows of its
  records encoded again since (a new record's siblings) gathered again, and the new
  ones' written after them; a part that does not begin with the kept one is gathered
  whole. Its rows too are written in place only while no view of them lives.

    kept = KeptEncoded(memory, name)  # memory: a KeptInMemory, or None (nothing kept)
    x = kept.pool(encoder, columns, numeric, stamp)  # == encode_parts of every labelled one
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from genesis_fp16_infrastructure.data.pool_columns import SPLICED_FROM, Coded, PoolColumns
from genesis_fp16_infrastructure.data.pool_splice import labelled_places, move_rows
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.world_model.content_keys import same_bits
from genesis_fp16_infrastructure.world_model.features import Categorical, FeatureEncoder

KIND = "encoded rows"  # the store's key: (KIND, the kept numeric rows' file)


@dataclass
class _Entry:
    """A pool's encoded rows (``buffer[:len(stamp)]``), the encoder's state they were made
    with, and what each row was made of: its labelled record (``labelled``: the pool's),
    that record's numeric stamp, and every record's categorical codes with each field's
    values. The arrays are the pool's own (the record cache hands each read arrays of its
    own, and nothing writes into them), held, not copied; ``values`` are copies."""

    encoder: dict[str, Any]
    buffer: torch.Tensor  # float32, with room to grow
    labelled: np.ndarray
    stamp: np.ndarray
    codes: tuple[np.ndarray, ...]
    values: tuple[list[Any], ...]
    lent: list[weakref.ref[torch.Tensor]]  # the rows given out: not written while alive
    part: _Part | None = None  # the held-out part's rows (:meth:`KeptEncoded.part`)
    token: object = None  # the pool's (``PoolColumns.token``): what a splice note names

    def nbytes(self) -> int:
        held = self.buffer.nbytes + self.labelled.nbytes + self.stamp.nbytes
        part = 0 if self.part is None else self.part.places.nbytes + self.part.store.nbytes
        return int(held + part + sum(c.nbytes for c in self.codes))

    def sound(self, n_features: int) -> bool:
        """Whether this is an entry as :meth:`KeptEncoded.pool` keeps them: rows of
        ``n_features`` float32 columns, one per stamp, and four fields' codes."""
        buffer = self.buffer
        return (
            isinstance(buffer, torch.Tensor)
            and buffer.dtype == torch.float32
            and buffer.dim() == 2
            and buffer.shape[1] == n_features
            and len(buffer) >= len(self.stamp) == len(self.labelled)
            and len(self.codes) == len(self.values) == 4
        )


@dataclass
class _Part:
    """A part's rows as :meth:`KeptEncoded.part` gathered them: its places (ascending), a
    store of its rows with room to grow, the views of it given out (its rows not written
    while one lives), and the places (indices into ``places``) whose records were encoded
    again since (:meth:`KeptEncoded.pool`: gathered again)."""

    places: np.ndarray
    store: torch.Tensor
    lent: list[weakref.ref[torch.Tensor]]
    stale: np.ndarray


class KeptEncoded:
    """The encoded rows of one pool, kept in ``memory`` under ``name`` (the kept numeric
    rows' file); its counts say what :meth:`pool` did."""

    def __init__(self, memory: KeptInMemory | None, name: str) -> None:
        self.memory = memory
        self.name = name
        self.reused = 0  # rows taken from the kept rows
        self.encoded = 0  # rows encoded (new, changed, or another encoder)
        self.refused = 0  # kept entries that were not this module's (module docstring)
        self.part_reused = 0  # a part's rows taken from the part kept (:meth:`part`)
        self.laid = 0  # pools whose kept rows a splice note placed (no search by stamp)
        self._kept: _Entry | None = None  # what the last pool() kept

    def pool(
        self,
        encoder: FeatureEncoder,
        columns: PoolColumns,
        numeric: torch.Tensor,
        stamp: np.ndarray | None,
    ) -> torch.Tensor:
        """``encoder.encode_parts`` of every labelled record (``numeric``: their numeric
        rows; ``stamp``: their stamps, None when unknown), the kept rows taken where
        encoder and inputs are the same, the rest encoded; kept for the next run when
        ``memory`` and ``stamp`` are given. A pool grown at its end is written in place
        after the kept rows, and given as a view of them: no copy."""
        n = len(columns.labelled)
        state = encoder.state_dict()
        key = (KIND, self.name)
        entry = self._entry(key, state, stamp, encoder.n_features)
        fields = _fields(columns)
        todo, laid, moved = np.arange(n), None, None
        if entry is not None and stamp is not None:
            laid = _laid_places(entry, columns, stamp)  # a splice: the kept rows' places
            if laid is None:
                todo = _changed(entry, columns, stamp)
                moved = _moved(entry, columns, stamp, todo)
        kept = 0 if entry is None else min(len(entry.stamp), n)
        other = todo  # the places whose row is not the kept one at that place
        if laid is not None:  # the kept rows moved to their places (a splice)
            assert entry is not None
            places, holds = laid
            buffer = _laid_rows(entry, places, n)
            self.laid += 1
            left = np.ones(n, np.bool_)
            left[places[holds]] = False
            todo = np.flatnonzero(left)
        elif moved is not None:  # rows taken from other places: into a store of their own
            assert entry is not None
            places, sources = moved
            buffer = torch.empty((n + n // 4, encoder.n_features), dtype=torch.float32)
            buffer[:kept] = entry.buffer[:kept]  # those at their place, the rest overwritten
            buffer[torch.from_numpy(places)] = entry.buffer[torch.from_numpy(sources)]
            left = np.ones(n, np.bool_)
            left[places] = False
            todo = todo[left[todo]]
        elif entry is not None and len(entry.buffer) >= n and not _lent(entry):
            buffer = entry.buffer  # the entry is out of the store meanwhile
        else:
            buffer = torch.empty((n + n // 4, encoder.n_features), dtype=torch.float32)
            if entry is not None and kept:  # one copy of the kept rows (a copy is lent)
                buffer[:kept] = entry.buffer[:kept]
        if len(todo):
            records = columns.labelled[todo]
            parts = Categorical(*(_distinct(c.at(records)) for c in fields))
            x = encoder.encode_parts(parts, numeric, torch.from_numpy(todo))
            if len(todo) == todo[-1] - todo[0] + 1:  # a run of rows (a grown pool's tail)
                buffer[int(todo[0]) : int(todo[-1]) + 1] = x
            else:
                buffer[torch.from_numpy(todo)] = x
        self.reused += n - len(todo)
        self.encoded += len(todo)
        out = buffer[:n]
        if self.memory is not None and stamp is not None:
            codes = tuple(c.codes for c in fields)
            values = tuple(list(c.values) for c in fields)
            lent = [weakref.ref(out)]
            part = None if entry is None or laid is not None else _restamped(entry.part, other)
            kept_entry = _Entry(
                state, buffer, columns.labelled, stamp, codes, values, lent, part, columns.token
            )
            self.memory.put(key, KIND, kept_entry, kept_entry.nbytes(), f"{KIND} of {n:,}")
            self._kept = kept_entry
        return out

    def part(self, x: torch.Tensor, places: np.ndarray) -> torch.Tensor:
        """``x[places]`` (``x``: the last :meth:`pool`'s rows, on the host; ``places``
        ascending): the held-out part's rows, which grows at its end as the pool does.
        Where these places begin with the last run's part's, its rows are taken, but for
        its records encoded again since (gathered again); the new places' rows are
        gathered and written after them, in a store with room. A store's rows are
        written in place only while no view given of them lives (else copied first)."""
        entry = self._kept
        index = torch.from_numpy(places)
        if entry is None or entry.buffer.data_ptr() != x.data_ptr():  # not pool()'s rows
            return x.index_select(0, index)
        kept = entry.part
        start = 0
        if kept is not None and same_bits(places[: len(kept.places)], kept.places):
            start = len(kept.places)
        if kept is None or not start or len(kept.store) < len(places) or _lent(kept):
            store = torch.empty((len(places) + len(places) // 4, x.shape[1]), dtype=x.dtype)
            if kept is not None and start:
                store[:start] = kept.store[:start]
        else:
            store = kept.store
        if kept is not None and start and len(kept.stale):
            stale = torch.from_numpy(kept.stale)
            store[stale] = x.index_select(0, index.index_select(0, stale))
        store[start : len(places)] = x.index_select(0, index[start:])
        self.part_reused += start - (0 if kept is None or not start else len(kept.stale))
        out = store[: len(places)]
        entry.part = _Part(places.copy(), store, [weakref.ref(out)], np.zeros(0, np.int64))
        key, size, what = (KIND, self.name), entry.nbytes(), f"{KIND} of {len(entry.stamp):,}"
        if self.memory is not None and self.memory.get(key, KIND, given=False) is entry:
            self.memory.put(key, KIND, entry, size, what)  # kept again, its size the part's too
        return out

    def _entry(
        self, key: tuple[str, str], state: dict[str, Any], stamp: np.ndarray | None, width: int
    ) -> _Entry | None:
        """The kept entry, if made with this encoder and there are stamps to check its
        rows by; out of the store from here on (its rows may be written)."""
        if self.memory is None:
            return None
        found = self.memory.get(key, KIND)
        self.memory.put(key, None, None, 0, "nothing")  # out until kept again
        if found is None:
            return None
        if not isinstance(found, _Entry) or not found.sound(width):
            if not isinstance(found, _Entry) or found.encoder == state:
                self.refused += 1  # another encoder's rows are of another width: not refused
            return None
        if stamp is None or found.encoder != state:
            return None
        return found


def _laid_places(
    entry: _Entry, columns: PoolColumns, stamp: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Where the entry's rows lie now when the read laid new records among its pool's
    (``SPLICED_FROM`` naming that pool): each kept row's place (ascending), and whether
    its row holds there (the same record, stamp and categorical values, by value); None
    without such a note, or one that does not place the entry's records."""
    note = vars(columns).get(SPLICED_FROM)
    if note is None or entry.token is None or note[0] is not entry.token:
        return None
    places = labelled_places(columns, note[1], entry.labelled)
    if places is None or not len(places):
        return None
    rows = columns.labelled[places]
    last = int(entry.labelled[-1])  # ascending: the highest of the entry's records
    holds = stamp[places] == entry.stamp
    for now, codes, values in zip(_fields(columns), entry.codes, entry.values, strict=True):
        if last >= len(codes):
            return None  # not the entry's records (its arrays are the pool's it kept)
        holds &= _as_codes(values, now.values)[codes[entry.labelled]] == now.codes[rows]
    return places, holds


def _laid_rows(entry: _Entry, places: np.ndarray, n: int) -> torch.Tensor:
    """A store for ``n`` rows holding the entry's at ``places`` (ascending, each at or
    after its own): the entry's own, its rows moved in place (``pool_splice.move_rows``),
    when it has room and no row given out of it
    lives; else a new one with room for a quarter more."""
    kept = len(places)
    buffer = entry.buffer
    if len(buffer) < n or _lent(entry):
        fresh = torch.empty((n + n // 4, buffer.shape[1]), dtype=torch.float32)
        fresh[torch.from_numpy(places)] = buffer[:kept]
        return fresh
    move_rows(buffer.numpy(), places)  # the tensor's own memory
    return buffer


def _restamped(part: _Part | None, todo: np.ndarray) -> _Part | None:
    """``part`` with its places among ``todo`` (ascending: encoded again) marked stale."""
    if part is None or not len(part.places):
        return None
    at = np.minimum(np.searchsorted(part.places, todo), len(part.places) - 1)
    again = np.unique(np.concatenate((part.stale, at[part.places[at] == todo])))
    return _Part(part.places, part.store, part.lent, again)


def _lent(entry: _Entry | _Part) -> bool:
    """Whether rows given out of ``entry`` still live (a task not yet freed)."""
    return any(ref() is not None for ref in entry.lent)


def _fields(columns: PoolColumns) -> tuple[Coded, Coded, Coded, Coded]:
    """The categorical columns the encoder reads, in :class:`Categorical`'s order."""
    return (columns.operator, columns.tools, columns.pattern, columns.agent)


def _changed(entry: _Entry, columns: PoolColumns, stamp: np.ndarray) -> np.ndarray:
    """The places of the labelled records to encode, ascending: each new one (past the
    kept rows), and each kept one whose record, stamp or categorical values are not the
    ones its row was made of. Each column is compared as a whole first; a record at a
    time only where it differs (a pool grown at its end: none)."""
    labelled, n = columns.labelled, len(columns.labelled)
    kept = min(len(entry.stamp), n)
    bad = np.zeros(n, np.bool_)  # a mask, not sets joined: every place may differ (moved)
    bad[_differ(labelled[:kept], entry.labelled[:kept])] = True
    bad[_differ(stamp[:kept], entry.stamp[:kept])] = True
    bad[kept:] = True
    records = np.zeros(len(columns), np.bool_)  # records whose values are not the kept ones
    for now, codes, values in zip(_fields(columns), entry.codes, entry.values, strict=True):
        common = min(len(codes), len(now.codes))  # a kept place's record is below both
        grown = now.values[: len(values)] == values  # the codes stay: one list comparison
        if grown and not len(_differ(now.codes[:common], codes[:common])):
            continue
        as_codes = np.arange(len(values)) if grown else _as_codes(values, now.values)
        records[:common] |= as_codes[codes[:common]] != now.codes[:common]
    if records.any():
        bad[:kept] |= records[labelled[:kept]]
    return np.flatnonzero(bad).astype(np.int64)


def _moved(
    entry: _Entry, columns: PoolColumns, stamp: np.ndarray, todo: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Of the places ``todo`` (to encode: their record, stamp or values are not those of
    the kept row at their place), those whose row is kept at another place, as
    ``(places, the kept places)``; None when there are none. A new file sorting among the
    old moves the rows after its records; the kept numeric rows keep a moved row's stamp
    (distinct: one row each), and its categorical values are compared by value."""
    if not len(todo) or not len(entry.stamp):
        return None
    older = todo[stamp[todo] <= entry.stamp.max()]  # a stamp given since is none of these
    if not len(older):
        return None
    order = np.argsort(entry.stamp, kind="stable")
    ranked = entry.stamp[order]
    at = np.minimum(np.searchsorted(ranked, stamp[older]), len(ranked) - 1)
    found = ranked[at] == stamp[older]
    places, sources = older[found], order[at[found]]
    same = np.ones(len(places), np.bool_)
    records, kept_records = columns.labelled[places], entry.labelled[sources]
    for now, codes, values in zip(_fields(columns), entry.codes, entry.values, strict=True):
        if not (len(kept_records) and int(kept_records.max()) < len(codes)):
            return None  # not the entry's records (its arrays are the pool's it kept)
        same &= _as_codes(values, now.values)[codes[kept_records]] == now.codes[records]
    places, sources = places[same], sources[same]
    return (places, sources) if len(places) else None


def _differ(now: np.ndarray, then: np.ndarray) -> np.ndarray:
    """The places where ``now`` and ``then`` (the same length) differ: none when they hold
    the same bits (``same_bits``: the same memory, or one comparison of the bytes), else
    compared a place at a time."""
    if same_bits(now, then):
        return np.zeros(0, np.int64)
    return np.flatnonzero(now != then)


def _as_codes(kept: list[Any], values: list[Any]) -> np.ndarray:
    """Each kept value's code among today's ``values`` (-1: no longer there)."""
    place = {value: k for k, value in enumerate(values)}
    return np.array([place.get(v, -1) for v in kept], dtype=np.int64)


def _distinct(coded: Coded) -> Coded:
    """``coded`` with only the values it uses (a few new rows look up a few tables' rows,
    not a table of the whole pool's values): each row's value, so its encoding, the same."""
    used, codes = np.unique(coded.codes, return_inverse=True)
    return Coded(codes.astype(np.int64).reshape(-1), [coded.values[k] for k in used.tolist()])
