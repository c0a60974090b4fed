"""Each record's unscaled numeric features, kept from one run to the next: a record is
worked out once (issue 90, item 2).

The encoder is fitted on each run's training records, so its matrix cannot be kept; the
rows it is made from can. :func:`~.features.numeric_rows` (a record's own numbers and
its lineage numbers) does not depend on the fit, only on the record and the records
around it: its parents (their score, operator, depth and parents), its siblings (the
parents' other children) and, through the depth, every ancestor. At 100,000 records it
was over half of a run's ``encode``, and the judged run's scorings built it again.

:class:`KeptNumeric` keeps the rows of a pool's labelled records in one file of its own
beside the record cache, named by the data path (the files of other paths are deleted by
:meth:`KeptNumeric.forget_others`, as a training run starts), and gives the next pool's
rows from it:

* **Keyed by content.** Every record of the pool has a key: a hash of its id, score,
  time, operator, parents (their ids, in order) and, when labelled, its
  ``labelled_hash`` (its label and every input). A row is reused only for a record of
  the same key whose neighbourhood is unchanged too.
* **What changed, and who sees it.** The records whose key is new (added, relabelled,
  edited) or gone (removed, or the old version of an edited one) are changed. A record
  is worked out again when it changed, when one of its parents names a changed record
  (or, again and again, a record so worked out: every descendant, for the depth; the
  grandchildren with them), or when it shares a parent with a changed record (its
  siblings). Everything else reads what it read before. A pool whose unchanged records
  come in another order (files read in another order: a sibling mean adds in that
  order) is worked out whole.
* **Worked out from what they need.** The records worked out read the pool's columns,
  but not a whole pool's lineage index: the file keeps every record's depth too, so
  :func:`~.lineage_columns.rows_index` takes the depths of the records whose rows hold
  (their ancestors unchanged), works out the rest from their parents, and lists the
  children of the worked-out records' parents alone. A pool whose parent links loop
  keeps no depths (the loop rule's depths are the whole pool's): the next run builds
  the whole index, as it does when new records make a loop.
* **Grown, not rewritten.** A pool that is the kept one with records added at its end
  (a new file sorting last, a grown ``.jsonl``: the common later run) works out its new
  records and the kept ones beside them, and appends one frame to the file
  (:mod:`.kept_numeric_file`: a kill -9 mid-append leaves a torn frame, which the next
  read leaves out). A pool that is the kept one with records laid among its own (a new
  file sorting among the old: the read's ``pool_columns.SPLICED_FROM`` names the kept
  pool and where its records now lie, and every kept record's key, parents and label
  are checked at its new place) is grown the same way, its rows moved to their places in
  their own store where no view of it is lent, and a ``splice`` frame appended. Anything
  else that changed writes the file whole, as does every ``MAX_FRAMES``-th frame.
* **Kept in memory too.** In a resident run process (``memory``: ``kept_in_memory``,
  the run's ``keep_in_memory_bytes``), the kept pool stays in memory under the file's
  identity (device, inode, size, mtime, ctime) as this process wrote or read it; the
  next run takes it from there, no file read, while the identity is the same, and reads
  the file otherwise. A budget of 0 keeps nothing: every run reads the file. There a
  record whose key's columns are the same bits keeps its key (:mod:`.content_keys`),
  and the pool the rows were last worked out or found unchanged for, asked again (its
  columns' ``token``, which only a copy of the same rows carries: the scorings' view,
  then the run's encode), takes them with no key worked out or compared.
* **Lent, not copied.** :meth:`KeptNumeric.view` lends the kept rows read-only, never
  rewritten in place while lent, each with a stamp that changes when the row is worked
  out again (a reader keys what it derived from a row by it: ``kept_outputs``).
  :meth:`KeptNumeric.rows` hands the run's encode the kept rows too, as a tensor view
  (at 1,000,000 records a copy of them was 1.35 s of a 1.89 s encode): torch has no
  read-only tensor, so a write into one is found by its version counter before the
  kept pool's next use, and the pool refused, counted (``written``) and read again.
* **Checked where it is used.** The file is opened without following a link or
  blocking on a FIFO, no larger than the current pool can make it
  (:func:`~.kept_numeric_columns.size_bound`), each frame by a CRC-32 on every read,
  every row in range. A file that fails is a logged miss, counted (``unreadable``): the
  rows are worked out and the file written again.

What the file's columns are and how a read checks them is :mod:`.kept_numeric_columns`;
which records changed, :mod:`.kept_numeric_change`; the file's frames,
:mod:`.kept_numeric_file`.

    kept = KeptNumeric(folder, data_path, memory)  # memory: a KeptInMemory, or None
    numeric = kept.rows(columns)  # == numeric_rows(columns, columns.labelled), bit for bit
    lent = kept.view(columns)  # the same rows, read-only, and each row's stamp
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import weakref
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np
import torch

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns, ranges
from genesis_fp16_infrastructure.data.pool_splice import labelled_places
from genesis_fp16_infrastructure.data.record_cache import CACHE_VERSION
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory, identity_of
from genesis_fp16_infrastructure.world_model import features
from genesis_fp16_infrastructure.world_model import kept_numeric_state as held
from genesis_fp16_infrastructure.world_model.content_keys import (
    KeyInputs,
    keyed,
    parent_hashes,
    same_bits,
)
from genesis_fp16_infrastructure.world_model.features import ENCODER_VERSION
from genesis_fp16_infrastructure.world_model.kept_numeric_change import (
    extends,
    fresh,
    index_for,
    unchanged,
)
from genesis_fp16_infrastructure.world_model.kept_numeric_columns import (
    DTYPES,
    SPLICE,
    WIDTH,
    Kept,
    applied,
    check,
    size_bound,
    whole,
)
from genesis_fp16_infrastructure.world_model.kept_numeric_file import (
    append_frame,
    read_frames,
    write_whole,
)
from genesis_fp16_infrastructure.world_model.kept_numeric_state import Guard, State
from genesis_fp16_infrastructure.world_model.lineage_columns import rows_index
from genesis_fp16_infrastructure.world_model.sorted_growth import SortedGrowth

logger = logging.getLogger(__name__)

# Bump when a numeric feature, or what it reads of the records around one, changes.
# 3: frames, a whole pool then appends (kept_numeric_file)
NUMERIC_VERSION = f"3.e{ENCODER_VERSION}.{CACHE_VERSION}"
MAX_FRAMES = 32  # appends before the file is written whole again (a cold read applies each)
_MEMORY = "kept_numeric"  # this store's entries' key: (_MEMORY, the file's path)
_LOCK = threading.Lock()


class KeptRows(NamedTuple):
    """A pool's numeric rows as :meth:`KeptNumeric.view` lends them, read-only: the rows
    (``numeric_rows(columns, columns.labelled)``) and each row's stamp (``State``)."""

    numeric: np.ndarray
    stamp: np.ndarray


class KeptNumeric:
    """The numeric rows of the pool read from ``data_path``, kept in ``folder`` (and, with
    ``memory``, a resident run process's store, in this process: checked against the
    file's identity before use); its counts say what each :meth:`rows` did
    (``train --json``'s ``extra.record_cache``)."""

    def __init__(
        self, folder: Path, data_path: Path | str, memory: KeptInMemory | None = None
    ) -> None:
        name = hashlib.blake2b(os.fsencode(str(data_path)), digest_size=8).hexdigest()
        self.path = Path(folder) / f"numeric-{name}.gfnum"
        self.memory = memory
        self.reused = 0  # records whose rows were kept (in the file, or in memory)
        self.computed = 0  # records worked out (new, changed, or beside a change)
        self.unreadable = 0  # files refused (damaged, too large, another version)
        self.write_failures = 0
        self.appended = 0  # frames appended (a pool grown at its end), not written whole
        self.spliced = 0  # of them, records laid among the kept ones (a splice frame)
        self.from_memory = 0  # kept pools taken from this process's memory, no file read
        self.written = 0  # kept pools refused: a caller wrote into the rows handed out
        self.stamp: np.ndarray | None = None  # the last whole rows()' stamps (view's), if kept
        # The view the last whole rows() handed out of the kept store, with its guard
        # (:meth:`stamps_of`); None when it handed out a copy or nothing kept.
        self._handed: tuple[weakref.ref[torch.Tensor], Guard] | None = None

    def forget_others(self) -> int:
        """Delete the kept files of other data paths in this folder (an agent reads one:
        a moved data folder's file is never read again); their count."""
        removed = 0
        for other in self.path.parent.glob("numeric-*.gfnum"):
            if other.name != self.path.name:
                try:
                    other.unlink(missing_ok=True)
                except OSError as exc:  # a folder at its name: the run goes on
                    logger.warning("kept numeric rows: cannot remove %s (%s)", other, exc)
                    continue
                removed += 1
        return removed

    def rows(self, columns: PoolColumns, rows: np.ndarray | None = None) -> torch.Tensor:
        """``numeric_rows(columns, rows)`` (``rows``: the labelled records, by default),
        the kept records' rows read, the rest worked out; with every labelled record
        asked for, the file grows by what the pool added (:meth:`_grown`), or is written
        again whole when anything else was worked out. What is kept in this process's
        memory is handed out as a view of it, no copy: to read only (a write into it is
        found before the next use, and the kept pool refused: ``Guard``), never
        rewritten in place while the view lives; else the caller's own rows."""
        with _LOCK:  # a run's scorings may ask at once: one append at a time
            out, kept, given = self._rows(columns, rows)
            self.stamp = given.stamp if given is not None and rows is None else None
            if (
                not kept
                or given is None
                or given.guard is None
                or given.lent is None
                or given.buffer is None
                or out.ctypes.data != given.buffer.ctypes.data
            ):
                # The caller's own rows (read from the file: a copy), their version
                # counter as handed out beside them (stamps_of)
                own = Guard(out if not kept else np.array(out))
                self._handed = (weakref.ref(own.tensor), own)
                return own.tensor
            lent = given.guard.tensor[: len(out)]  # a view: the guard's version counter
            given.lent[:] = [ref for ref in given.lent if ref() is not None]
            given.lent.append(weakref.ref(lent))
            self._handed = (weakref.ref(lent), given.guard)
            return lent

    def stamps_of(self, numeric: torch.Tensor | None) -> np.ndarray | None:
        """The stamps of ``numeric``'s rows (:attr:`stamp`) when it is the tensor the last
        whole :meth:`rows` handed out (a view of the kept store, or the caller's own
        rows, the kept ones' bits) and nothing was written into it since (its version
        counter, a view's the store's): a row whose stamp is a kept one holds the
        numbers it held then. None otherwise (no stamps, another tensor, a write): a
        caller checks those numbers by value."""
        handed = self._handed
        if numeric is None or handed is None or self.stamp is None:
            return None
        view, guard = handed
        if view() is not numeric or guard.written() or len(self.stamp) != len(numeric):
            return None
        return self.stamp

    def view(self, columns: PoolColumns) -> KeptRows:
        """:meth:`rows` of every labelled record, read-only (a write raises ``ValueError``):
        the kept rows themselves, no copy, never rewritten in place while the view lives;
        each row's stamp beside it: the last view's while the row was kept as it was."""
        with _LOCK:
            out, shared, given = self._rows(columns, None)
            out = out.view()
            out.flags.writeable = False
            stamp = held.stamps(len(out)) if given is None or given.stamp is None else given.stamp
            stamp = stamp.view()
            stamp.flags.writeable = False
            if shared and given is not None and given.lent is not None:
                given.lent[:] = [ref for ref in given.lent if ref() is not None]
                given.lent.append(weakref.ref(out))
            return KeptRows(out, stamp)

    def _rows(
        self, columns: PoolColumns, rows: np.ndarray | None
    ) -> tuple[np.ndarray, bool, State | None]:
        """The rows :meth:`rows` gives (under ``_LOCK``), whether they are what is kept (a
        view of it), and the kept pool whose rows they equal (None: none kept)."""
        whole = rows is None
        asked = columns.labelled if rows is None else rows
        state = self._state(len(columns), len(columns.parent))
        kept = None if state is None else state.kept
        if kept is not None and whole and held.made_of(state, columns):
            # The pool these rows were worked out for, the same columns object (the
            # scorings' view, then the run's encode): the same arrays, which nothing writes
            self.reused += len(asked)
            return kept.numeric, self.memory is not None or not kept.numeric.flags.writeable, state
        kept_keys = held.kept_keys(state)
        slots = parent_hashes(columns, kept_keys)
        keys = keyed(columns, slots, kept_keys)
        if kept is not None and whole and unchanged(columns, keys, kept):
            # The kept pool itself (a scoring, then the run's encode, of the same pool)
            self.reused += len(asked)
            if state is not None and state.made_of is not None:
                state.made_of[:] = [columns.token]
            return kept.numeric, self.memory is not None or not kept.numeric.flags.writeable, state
        if whole and state is not None and extends(columns, slots, keys, state.kept):
            grown = self._grown(columns, slots, keys, state)
            if grown is not None:  # the kept rows, when this process keeps them
                return grown.kept.numeric, self.memory is not None, grown
        old_at = held.splice_of(columns, state) if whole else None
        if state is not None and old_at is not None:
            grown = self._spliced(columns, slots, keys, state, old_at)
            if grown is not None:
                return grown.kept.numeric, self.memory is not None, grown
        kept = None if state is None else held.ordered(state)  # the keys' order, whole
        stamp = None if state is None else state.stamp
        out, written = self._worked_out(columns, slots, keys, asked, whole, kept, stamp)
        return out, False, written

    def _worked_out(
        self,
        columns: PoolColumns,
        slots: np.ndarray,
        keys: np.ndarray,
        asked: np.ndarray,
        whole: bool,
        kept: Kept | None,
        stamp: np.ndarray | None = None,
    ) -> tuple[np.ndarray, State | None]:
        """``asked``'s rows, the kept ones reused where they hold (module docstring);
        with ``whole``, the file written again when anything was worked out, and what is
        kept then (its rows a copy of these). A row reused keeps its stamp (``stamp``:
        the kept rows', by their labelled place), wherever it now lies (a new file
        sorting among the old: its records' rows among the kept ones); a row worked out
        gets a new one."""
        order = np.argsort(keys)  # the file's order column, and fresh's searches
        holds = fresh(columns, slots, keys, order, kept) if kept is not None else None
        out = np.empty((len(asked), WIDTH), dtype=np.float64)
        found = np.zeros(len(asked), np.bool_)
        row = np.zeros(len(asked), np.int64)
        if kept is not None and holds is not None:
            at, usable = holds
            # Each kept record's place among its labelled ones (-1: unlabelled then).
            place = np.full(len(kept.key), -1, np.int64)
            place[kept.labelled] = np.arange(len(kept.labelled))
            row = place[at[asked]]
            found = usable[asked] & (row >= 0)
            if found.any():  # one gather of the pool's rows (the rest overwritten below)
                out = np.take(kept.numeric, np.where(found, row, 0), axis=0)
        need = np.flatnonzero(~found)
        depth = None
        if len(need):
            index = index_for(columns, asked[need], kept, holds)
            out[need] = features.numeric_rows(columns, asked[need], index).numpy()
            depth = None if index.looped else index.depth
        self.reused += len(asked) - len(need)
        self.computed += len(need)
        if whole and (len(need) or kept is None):
            stamps = held.stamps(len(asked))
            if stamp is not None and kept is not None and len(stamp) == len(kept.labelled):
                stamps[found] = stamp[row[found]]  # reused: as they were
            return out, self._write(columns, slots, keys, order, out, depth, stamps)
        return out, None

    def _grown(
        self, columns: PoolColumns, slots: np.ndarray, keys: np.ndarray, state: State
    ) -> State | None:
        """The pool that is the kept one with records added at its end: the new
        records worked out, and the kept ones beside them (their siblings, and every
        descendant of a new record: a kept record may name a new one as its parent), the
        rest copied; the file grows by one frame (:mod:`.kept_numeric_file`). None when
        the new records' depths need the whole pool's index (a loop): worked out as any
        other change."""
        kept = state.kept
        n, n_slots, n_labelled = len(kept.key), len(kept.parent_hash), len(kept.labelled)
        new_slots = slots[n_slots:]
        by_parent = held.sorting(state.by_parent, kept.parent_hash).grown(slots)
        start = columns.parent_start

        reached = _reached(columns, np.arange(n, len(columns)), by_parent, new_slots)
        labelled = columns.labelled
        need = np.flatnonzero(reached[labelled])
        depth = np.full(len(columns), -1, np.int64)
        depth[:n] = np.where(reached[:n], -1, kept.depth)
        index = rows_index(columns, labelled[need], depth)
        if index is None:
            return None
        worked = features.numeric_rows(columns, labelled[need], index).numpy()
        # Kept rows worked out again (a new record's siblings) while a view of them is
        # lent: a store of their own, the view left as it was
        buffer = held.room(
            state, len(labelled), bool((need < n_labelled).any()) and held.lent(state)
        )
        buffer[need] = worked  # what is kept in memory, if it is, changes here: _append
        out = buffer[: len(labelled)]
        self.reused += len(labelled) - len(need)
        self.computed += len(need)
        old = need[need < n_labelled]
        moved = np.flatnonzero(index.depth[:n] != kept.depth)
        frame = {
            "key": keys[n:],
            "id_hash": columns.id_hash[n:],
            "parent_start": start[n:] - n_slots,
            "parent_hash": new_slots,
            "labelled": labelled[n_labelled:],
            "numeric": out[n_labelled:],
            "depth": index.depth[n:],
            "redone": old,
            "redone_numeric": out[old],
            "redepth": moved,
            "redepth_value": index.depth[moved],
        }
        by_key = held.sorting(state.by_key, kept.key, kept.order).grown(keys)
        rows = buffer[: len(labelled)]
        unordered = np.zeros(0, np.int64)  # by_key's, made whole where wanted (ordered)
        grown = Kept(keys, unordered, columns.id_hash, start, slots, labelled, rows, index.depth)
        lent = state.lent if buffer is state.buffer and state.lent is not None else []
        same = buffer is state.buffer and state.guard is not None
        guard = state.guard if same else Guard(buffer)
        kept_stamp = held.stamps(n_labelled) if state.stamp is None else state.stamp
        stamp = np.concatenate((kept_stamp, held.stamps(len(labelled) - n_labelled)))
        stamp[need] = held.stamps(len(need))  # worked out again: new stamps
        after = State(grown, 0, 0, by_parent, buffer, KeyInputs.of(columns), lent, stamp,
                       guard, [columns.token], by_key)  # fmt: skip
        self._append(columns, state, grown, frame, after)
        return after

    def _spliced(
        self,
        columns: PoolColumns,
        slots: np.ndarray,
        keys: np.ndarray,
        state: State,
        old_at: np.ndarray,
    ) -> State | None:
        """The pool that is the kept one with records laid among its own, the kept
        records at ``old_at`` (ascending), in their order: worked out as :meth:`_grown`
        does, the kept rows moved to their places, and a ``splice`` frame appended. None
        when a kept record is not the same at its place (its key, parents or label), the
        kept pool has no depths, or the new records' depths need the whole index."""
        kept = state.kept
        n, n_labelled = len(kept.key), len(kept.labelled)
        labelled = columns.labelled
        start = columns.parent_start
        old_counts = np.diff(kept.parent_start)
        slot_map = ranges(start[old_at], old_counts)  # each kept parent named: its place now
        is_new = np.ones(len(columns), np.bool_)
        is_new[old_at] = False
        new_at = np.flatnonzero(is_new)
        was_labelled = np.zeros(n, np.bool_)
        was_labelled[kept.labelled] = True
        if not (
            len(kept.depth) == n
            and same_bits(keys[old_at], kept.key)
            and same_bits(start[old_at + 1] - start[old_at], old_counts)
            and same_bits(slots[slot_map], kept.parent_hash)
            and same_bits(np.isin(old_at, labelled, assume_unique=True), was_labelled)
        ):
            return None
        new_slot = ranges(start[new_at], start[new_at + 1] - start[new_at])
        by_parent = held.sorting(state.by_parent, kept.parent_hash).spliced(
            slots, slot_map, new_slot
        )
        reached = _reached(columns, new_at, by_parent, slots[new_slot])
        need = np.flatnonzero(reached[labelled])
        depth = np.full(len(columns), -1, np.int64)
        depth[old_at] = np.where(reached[old_at], -1, kept.depth)
        index = rows_index(columns, labelled[need], depth)
        if index is None:
            return None
        worked = features.numeric_rows(columns, labelled[need], index).numpy()
        places = labelled_places(columns, old_at, kept.labelled)  # the kept rows' now
        assert places is not None  # checked above: every kept labelled record is labelled
        buffer = held.laid(state, places, len(labelled))
        buffer[need] = worked
        out = buffer[: len(labelled)]
        self.reused += len(labelled) - len(need)
        self.computed += len(need)
        fresh_rows = is_new[labelled]
        redone = need[~fresh_rows[need]]
        moved = old_at[np.flatnonzero(index.depth[old_at] != kept.depth)]
        frame = {
            "key": keys[new_at],
            "id_hash": columns.id_hash[new_at],
            "parent_start": np.concatenate(([0], np.cumsum(start[new_at + 1] - start[new_at]))),
            "parent_hash": slots[new_slot],
            "labelled": labelled[fresh_rows],
            "numeric": out[fresh_rows],
            "depth": index.depth[new_at],
            "redone": redone,
            "redone_numeric": out[redone],
            "redepth": moved,
            "redepth_value": index.depth[moved],
            "at": new_at,
        }
        by_key = held.sorting(state.by_key, kept.key, kept.order).spliced(keys, old_at, new_at)
        unordered = np.zeros(0, np.int64)  # by_key's, made whole where wanted (ordered)
        grown = Kept(keys, unordered, columns.id_hash, start, slots, labelled, out, index.depth)
        same = buffer is state.buffer
        lent = state.lent if same and state.lent is not None else []
        guard = state.guard if same and state.guard is not None else Guard(buffer)
        stamp = np.empty(len(labelled), np.uint64)
        stamp[places] = held.stamps(n_labelled) if state.stamp is None else state.stamp
        stamp[need] = held.stamps(len(need))  # new, or worked out again: new stamps
        after = State(grown, 0, 0, by_parent, buffer, KeyInputs.of(columns), lent, stamp,
                       guard, [columns.token], by_key)  # fmt: skip
        self._append(columns, state, grown, frame, after, "splice")
        return after

    def _append(
        self,
        columns: PoolColumns,
        state: State,
        grown: Kept,
        frame: dict[str, np.ndarray],
        after: State,
        kind: str = "append",
    ) -> None:
        """Append ``frame`` (the records ``grown`` adds to the kept pool: a frame of
        ``kind``) to the file, or write ``grown`` whole when the file holds many frames or
        would outgrow its bound; ``after`` is kept in memory as what the file then holds."""
        arrays = {k: np.ascontiguousarray(a, SPLICE[k]) for k, a in frame.items()}
        size = sum(a.nbytes for a in arrays.values()) + 4096  # and its header, at most
        # Half the bound a read allows: the pool may shrink by half and still be read.
        bound = size_bound(len(columns), len(columns.parent)) // 2
        if state.frames >= MAX_FRAMES or state.end + size > bound:
            grown = held.ordered(after)
            self._write(columns, grown.parent_hash, grown.key, grown.order, grown.numeric,
                        grown.depth)  # fmt: skip
            return
        try:
            end = append_frame(
                self.path, NUMERIC_VERSION, arrays, state.end, len(state.kept.key),
                len(state.kept.labelled), kind,
            )  # fmt: skip
        except (OSError, ValueError) as exc:  # the run has its rows; the next works them out
            self.write_failures += 1
            logger.warning("cannot append to %s (%s): worked out again next run", self.path, exc)
            self._forget()  # its rows' store holds the grown pool's now: not the file's
            return
        self.appended += 1
        self.spliced += kind == "splice"
        self._keep(after._replace(end=end, frames=state.frames + 1))

    def _state(self, records: int, parents: int) -> State | None:
        """The kept pool: this process's, while the file is the one it wrote or read (its
        identity unchanged), else read from the file; None without one."""
        identity = identity_of(self.path)
        if self.memory is not None and identity is not None:
            state = self.memory.get((_MEMORY, str(self.path)), identity)
            if state is not None and held.written(cast(State, state)):
                self.written += 1
                logger.warning("kept numeric rows of %s written into by a caller: refused, "
                               "read again", self.path.name)  # fmt: skip
                self._forget()
            elif state is not None:
                self.from_memory += 1
                return cast(State, state)
        state = self._read(records, parents)
        if state is not None and self.memory is not None and identity is not None:
            # Stat'ed before the read: a file changed meanwhile is another identity next time.
            self.memory.put((_MEMORY, str(self.path)), identity, state, held.held_bytes(state),
                            f"numeric rows of {self.path.name}")  # fmt: skip
        return state

    def _keep(self, state: State) -> None:
        """Keep ``state`` in memory as what the file now holds (its identity now)."""
        identity = identity_of(self.path)
        if self.memory is None:
            return
        if identity is None:
            self._forget()
            return
        self.memory.put((_MEMORY, str(self.path)), identity, state, held.held_bytes(state),
                        f"numeric rows of {self.path.name}")  # fmt: skip

    def _forget(self) -> None:
        """Nothing kept in memory for the file (a write failed: what it holds is unknown);
        an entry of no identity, which no file's matches, in the store's one door."""
        if self.memory is not None:
            self.memory.put((_MEMORY, str(self.path)), None, None, 0, "nothing")

    def _read(self, records: int, parents: int) -> State | None:
        """The kept pool of the file's frames, checked; None without a file or with a
        refused one. A torn last frame (a crash mid-append) is left out: the pool before it."""
        try:
            frames, end, torn = read_frames(
                self.path, NUMERIC_VERSION, size_bound(records, parents)
            )
            kept = whole(frames[0].arrays)
            for frame in frames[1:]:
                kept = applied(kept, frame)
            if len(frames) > 1:
                kept = kept._replace(order=np.argsort(kept.key))
            check(kept)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, IndexError, KeyError) as exc:
            logger.warning("kept numeric rows %s unreadable (%s): worked out", self.path, exc)
            self.unreadable += 1
            return None
        if torn:
            logger.info("kept numeric rows %s: a torn frame after byte %d left out", self.path, end)
        return State(kept, end, len(frames), stamp=held.stamps(len(kept.labelled)), made_of=[])

    def _write(
        self,
        columns: PoolColumns,
        slots: np.ndarray,
        keys: np.ndarray,
        order: np.ndarray,
        numeric: np.ndarray,
        depth: np.ndarray | None,
        stamp: np.ndarray | None = None,
    ) -> State | None:
        """Write the pool's kept file whole and keep it in memory: what is kept (None: the
        write failed), its rows' stamps ``stamp`` (None: new ones)."""
        arrays = {
            "key": keys,
            "order": order,
            "id_hash": columns.id_hash,
            "parent_start": columns.parent_start,
            "parent_hash": slots,
            "labelled": columns.labelled,
            "numeric": numeric,
            "depth": np.zeros(0, np.int64) if depth is None else depth,
        }
        arrays = {k: np.ascontiguousarray(a, DTYPES[k]) for k, a in arrays.items()}
        try:
            # No fsync: a file torn by a crash fails its CRC-32, and costs one full encode.
            end = write_whole(self.path, NUMERIC_VERSION, arrays)
        except (OSError, ValueError) as exc:  # the run has its rows; the next works them out
            self.write_failures += 1
            logger.warning("cannot write %s (%s): worked out again next run", self.path, exc)
            self._forget()
            return None
        state = held.owned(Kept(**arrays), end, KeyInputs.of(columns), columns, stamp)
        self._keep(state)
        return state


def _reached(
    columns: PoolColumns, new: np.ndarray, by_parent: SortedGrowth, named: np.ndarray
) -> np.ndarray:
    """Per pool record, whether it is worked out again beside the ``new`` records (a
    growth or a splice): a new one, a descendant of one (a kept record may name a new one
    as its parent: the depth), or a sibling (a child of a parent a new one ``named``).
    ``by_parent``: the pool's parents named, sorted."""
    start = columns.parent_start

    def children(ids: np.ndarray) -> np.ndarray:
        slot = by_parent.indices_of(np.sort(ids))
        return np.searchsorted(start, slot, "right") - 1

    reached = np.zeros(len(columns), np.bool_)
    reached[new] = True
    frontier = columns.id_hash[new]
    while len(frontier):  # a new record named as a parent: its descendants (the depth)
        found = np.unique(children(frontier))
        found = found[~reached[found]]
        reached[found] = True
        frontier = columns.id_hash[found]
    reached[children(named)] = True  # the siblings of a new record
    return reached
