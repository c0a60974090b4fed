"""A model's outputs on the records it scored, kept from one run to the next in a resident
run process: a later scoring runs the model over what it has not seen alone (issue 90,
item 4).

Each judged run scores the served model on the held-out fifth and the records it did not
know (``judging.served``). Between two runs the served model is the same file and most of
those records are the same records, so its forward over them gives what it gave before.
This module keeps, per checkpoint, each record's P(success) logit in the process's
bounded store (:mod:`~genesis_fp16_infrastructure.kept_in_memory`, on only while a
resident process serves the run: ``TrainRequest.keep_in_memory_bytes``), and
``scoring.score_records`` takes from it what it holds:

* **Keyed by the model's bytes.** An entry is the SHA-256 of the checkpoint file scored
  (the copy the judged run hands the plugin has the original's bytes): another model
  (a promotion, a rollback, a pin, a resumed candidate) is another entry, never this one.
* **Keyed by the model's inputs.** A logit is kept under a 128-bit hash of what the
  encoder reads of its record (:func:`input_keys`: the four categorical values and the
  bits of every numeric feature, lineage numbers included), not under the record's id: a
  record edited in place, or one whose parents or siblings changed its lineage numbers,
  has other inputs, so it is scored again; two records of the same inputs share one.
  The keys themselves are kept from run to run of a data path (:class:`RowKeys`): a
  row's key is taken while the kept numeric rows say the row is the one hashed (its
  stamp, ``KeptNumeric.view``), and hashed again otherwise.
* **Never a loss.** What is kept is the logit, which no label enters: each scoring works
  the losses out from the records' current labels (a relabelled record is scored
  against its new label from the same logit).
* **Found at its row first.** An entry keeps its logits by the labelled rows its first
  scoring gave too (:class:`RowLogits`; a candidate's: the gate's): the next scoring of
  the same model asks mostly the same rows (its held-out ones), each taken at its row
  where that row's key is the very key asked (both halves compared); the rest are
  searched among the sorted keys. What either way finds is the same logit, so no sort
  of the ~20,000 keys asked at 100,000 records.
* **Kept where it was computed.** The gate's scoring of a candidate keeps its logits too
  (those its run's evaluation computed, ``evaluated.py``, or its own forward): once
  promoted, the candidate is the next run's served model, and its held-out logits are
  there.

A kept logit is the one an earlier forward of the same weights on the same inputs
computed, in the chunks that forward ran in; a forward of other chunks (another set of
rows) may differ from it in a last bit, as the CPU's matrix products sum a row in an
order that depends on the batch. A scoring that takes some logits from here is therefore
equal to one that computes them all to within that last bit, not bit for bit (what
``evaluated.py`` says of the gate's); every record scored in one run is scored from one
set of logits.

    pool_keys = PoolKeys(columns, stamp, kept_pool_keys(budget, path))  # last run's kept
    keys = pool_keys.of(asked, numeric_of)  # each record's input key, the new ones hashed
    kept = kept_logits(request.keep_in_memory_bytes, digest)  # None: nothing kept for it
    hit, logit = kept.find(keys, asked)  # per record: whether kept (at its row first), its logit
    keep_logits(request.keep_in_memory_bytes, digest, kept, keys.take(~hit), computed, what,
                asked[~hit])  # kept by key (and by row, where nothing was kept)
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import torch

from genesis_fp16_infrastructure.contract.split import splitmix64
from genesis_fp16_infrastructure.data.pool_columns import Coded, PoolColumns
from genesis_fp16_infrastructure.kept_in_memory import estimate_bytes, process_memory
from genesis_fp16_infrastructure.world_model.features import Categorical

logger = logging.getLogger(__name__)

KIND = "model outputs"  # the store's key: (KIND, the checkpoint's SHA-256)
KEYS = "input keys"  # the store's key: (KEYS, the data path), PoolKeys of its last run
# KeptLogits.joined's: kept logits the new ones were merged into ("merged"), and those
# found out of order, sorted again with them ("sorted whole").
JOINED: Counter[str] = Counter()
# Two independent 64-bit hashes of a record's inputs (a 128-bit key): the odds that two
# different inputs share one, among a million records, are ~1e-27.
_SEEDS = (np.uint64(0x6A09E667F3BCC908), np.uint64(0xBB67AE8584CAA73B))


class InputKeys(NamedTuple):
    """Each record's 128-bit input key, as two uint64 columns (:func:`input_keys`)."""

    first: np.ndarray
    second: np.ndarray

    def take(self, rows: np.ndarray) -> InputKeys:
        return InputKeys(self.first[rows], self.second[rows])


def input_keys(
    parts: Categorical, numeric: torch.Tensor, values: Sequence[np.ndarray] | None = None
) -> InputKeys:
    """A 128-bit key of each record's encoder inputs: its categorical values (operator,
    tools, pattern, agent: each distinct value's text hashed once; ``values``: those
    hashes, per field, for the values ``parts`` codes into, when worked out already) and
    the float64 bits of each of its numeric features (``numeric``, its rows in ``parts``'
    order). A few passes of numpy over the rows: 20,000 records in a few milliseconds."""
    bits = np.ascontiguousarray(numeric.numpy(), dtype=np.float64).view(np.uint64)
    columns = [bits[:, k] for k in range(bits.shape[1])]
    for k, coded in enumerate(parts):  # Categorical: one Coded column per field
        hashed = value_hashes(coded.values) if values is None else values[k]
        columns.append(hashed[coded.codes] if len(hashed) else np.zeros(0, np.uint64))
    keys = []
    for seed in _SEEDS:
        h = np.full(len(parts), seed, dtype=np.uint64)
        for column in columns:  # a chain: each column mixed into what came before
            h = splitmix64(h ^ column, seed)
        keys.append(h)
    return InputKeys(*keys)


def value_hashes(values: Sequence[object]) -> np.ndarray:
    """Each distinct categorical value's text, hashed (uint64)."""
    return np.array([_text_hash(v) for v in values], dtype=np.uint64)


@dataclass
class RowKeys:
    """A pool's labelled rows' input keys as far as worked out (``done``), each row's
    stamp (``KeptNumeric.view``) and the categorical values hashed (``hashed``, for
    ``values``, each field's): what :class:`PoolKeys` keeps for the next run, no column
    of its pool held."""

    stamp: np.ndarray | None
    first: np.ndarray
    second: np.ndarray
    done: np.ndarray
    values: list[list[object]]
    hashed: list[np.ndarray] | None = None

    def nbytes(self) -> int:
        """What it holds, for a store's budget (the values' lists are the pool's)."""
        held = self.first.nbytes + self.second.nbytes + self.done.nbytes
        return held + (0 if self.stamp is None else self.stamp.nbytes)


class PoolKeys:
    """The input keys of a pool's labelled records, each worked out once, when first
    asked for (the served model's scoring, then the gate's on the same records).

    With ``stamp`` (each labelled row's stamp: ``KeptNumeric.view``, which gives a row a
    new one whenever it is worked out again) and ``before`` (the previous run's keys of
    the same data path), a row whose stamp is the one it had then keeps its key: its
    numeric row is the one hashed then, and its record (whose categorical values its
    content key holds) the same. Only the new and worked-out rows are hashed."""

    def __init__(
        self,
        columns: PoolColumns,
        stamp: np.ndarray | None = None,
        before: RowKeys | None = None,
    ) -> None:
        self.columns = columns
        count = len(columns.labelled)
        zero = np.zeros(count, np.uint64)
        values = [list(c.values) for c in _fields(columns)]  # the pool may grow its own
        self.rows = RowKeys(stamp, zero, zero.copy(), np.zeros(count, bool), values)
        self.reused = 0  # rows whose key ``before`` had
        if stamp is not None and before is not None and before.stamp is not None:
            self._take(before)

    def _take(self, before: RowKeys) -> None:
        """``before``'s keys of the rows whose stamps are still theirs: at the same
        positions first (a pool's labelled rows keep theirs while the kept rows do,
        ``KeptNumeric``), then, for a row whose position held another stamp, wherever
        ``before`` has its stamp (a new file sorting among the old moved the rows after
        its records: ``KeptNumeric`` keeps their stamps)."""
        rows = self.rows
        assert rows.stamp is not None and before.stamp is not None
        parts = (rows.stamp, rows.done, before.stamp, before.done, before.first, before.second)
        m = min(map(len, parts))  # the rows both runs have, each part of them
        same = before.done[:m] & (rows.stamp[:m] == before.stamp[:m])
        # Masked copies of the rows' first stretch, no index of each row taken: at 100,000
        # rows a gather and scatter of the ~20,000 taken cost ~3 ms, these under 1.
        np.copyto(rows.first[:m], before.first[:m], where=same)
        np.copyto(rows.second[:m], before.second[:m], where=same)
        rows.done[:m] = same
        self.reused = int(np.count_nonzero(same))
        n = min(len(before.stamp), len(before.done), len(before.first), len(before.second))
        if not n:
            return
        # A stamp given since (a row worked out again, or new) is above every one before:
        # only a row of an older stamp can have moved
        older = rows.stamp <= before.stamp[:n].max()
        moved = np.flatnonzero(~rows.done[: len(rows.stamp)] & older)
        if len(moved):
            self._take_moved(before, moved, n)

    def _take_moved(self, before: RowKeys, moved: np.ndarray, n: int) -> None:
        """``before``'s keys of the rows ``moved`` (not found at their position), found
        by their stamps among ``before``'s first ``n`` rows (stamps are distinct)."""
        rows = self.rows
        assert rows.stamp is not None and before.stamp is not None
        order = np.argsort(before.stamp[:n], kind="stable")
        ranked = before.stamp[:n][order]
        at = np.minimum(np.searchsorted(ranked, rows.stamp[moved]), n - 1)
        source = order[at]
        hit = (ranked[at] == rows.stamp[moved]) & before.done[:n][source]
        moved, source = moved[hit], source[hit]
        rows.first[moved], rows.second[moved] = before.first[source], before.second[source]
        rows.done[moved] = True
        self.reused += len(moved)
        if before.hashed is not None:  # each field's values hashed, the old ones kept
            rows.hashed = _grown_hashes(rows.values, before.values, before.hashed)

    def of(self, asked: np.ndarray, numeric_of: Callable[[np.ndarray], torch.Tensor]) -> InputKeys:
        """The keys of the labelled records ``asked``; ``numeric_of``: their numeric rows."""
        rows = self.rows
        todo = np.unique(asked[~rows.done[asked]])
        if len(todo):
            columns = self.columns
            if rows.hashed is None:
                rows.hashed = [value_hashes(values) for values in rows.values]
            parts = Categorical.of_rows(columns, columns.labelled[todo])
            keys = input_keys(parts, numeric_of(todo), rows.hashed)
            rows.first[todo], rows.second[todo], rows.done[todo] = keys.first, keys.second, True
        return InputKeys(rows.first[asked], rows.second[asked])


def _fields(columns: PoolColumns) -> tuple[Coded, ...]:
    """The categorical columns :func:`input_keys` reads, in ``Categorical``'s order."""
    return (columns.operator, columns.tools, columns.pattern, columns.agent)


def _grown_hashes(
    values: list[list[object]], old: list[list[object]], hashed: list[np.ndarray]
) -> list[np.ndarray]:
    """:func:`value_hashes` of each field's ``values``, those of ``old`` (``hashed``)
    taken where they come first, in order (a grown pool keeps its old codes), the rest
    hashed now."""
    out = []
    for now, then, known in zip(values, old, hashed, strict=True):
        start = len(then)
        if len(known) == start and now[:start] == then:
            out.append(np.concatenate((known, value_hashes(now[start:]))))
        else:
            out.append(value_hashes(now))
    return out


def kept_pool_keys(budget: int | None, data_path: str) -> RowKeys | None:
    """The previous run's keys of ``data_path``'s rows in this process's store
    (``budget``: the request's ``keep_in_memory_bytes``; None or 0: none kept). Believed
    only where the kept rows' stamps say so (:class:`PoolKeys`)."""
    memory = process_memory(budget or 0)
    if memory is None:
        return None
    found = memory.get((KEYS, data_path), KEYS)
    return found if isinstance(found, RowKeys) else None


def keep_pool_keys(budget: int | None, data_path: str, keys: PoolKeys) -> None:
    """Keep ``keys`` (filled in as its run asks) for the next run of ``data_path``."""
    memory = process_memory(budget or 0)
    rows = keys.rows
    if memory is not None and rows.stamp is not None:
        memory.put((KEYS, data_path), KEYS, rows, rows.nbytes(), f"input keys of {data_path}")


def _text_hash(value: object) -> int:
    return int.from_bytes(hashlib.blake2b(repr(value).encode(), digest_size=8).digest(), "big")


class RowLogits(NamedTuple):
    """A model's kept logits by the labelled row of the pool it scored: per row, where its
    entry is (``at``: -1 for a row not given), and per entry the row's input key and the
    logit kept for that key. The next scoring of the same model on the same data asks
    mostly the same rows (the next run's watch: the held-out rows the gate scored; a
    pool grown at its end keeps its rows' places), each found at its row and compared by
    both halves of its key: no sort or search of the keys asked (~1.5 ms at 100,000
    records). Four bytes a pool row, and the entries given."""

    at: np.ndarray  # int32 per labelled row up to the last given, -1: not given
    first: np.ndarray  # uint64 per entry
    second: np.ndarray  # uint64
    logit: np.ndarray

    @classmethod
    def of(cls, rows: np.ndarray, keys: InputKeys, logit: np.ndarray) -> RowLogits:
        """``keys`` with ``logit`` at ``rows`` (a row given twice: its first), copies of
        their own (the caller's arrays may change)."""
        rows = np.asarray(rows, np.int64)
        if len(rows) and int(rows.min()) < 0:
            raise ValueError(f"a labelled row of {int(rows.min())}: rows are 0 or more")
        at = np.full(int(rows.max()) + 1 if len(rows) else 0, -1, np.int32)
        at[rows[::-1]] = np.arange(len(rows) - 1, -1, -1, dtype=np.int32)  # the first wins
        return cls(at, keys.first.copy(), keys.second.copy(), logit.copy())

    def find(self, keys: InputKeys, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per key (of the labelled row ``rows``), whether that row is given here with
        that very key (both halves), and its logit (0 where not)."""
        if not len(self.at) or not len(self.first):
            return np.zeros(len(rows), bool), np.zeros(len(rows), self.logit.dtype)
        inside = (rows >= 0) & (rows < len(self.at))
        at = self.at[np.where(inside, rows, 0)]
        given = inside & (at >= 0)
        at = np.where(given, at, 0)
        hit = given & (self.first[at] == keys.first) & (self.second[at] == keys.second)
        return hit, np.where(hit, self.logit[at], self.logit.dtype.type(0))


@dataclass(frozen=True)
class KeptLogits:
    """One model's success logits on the inputs it ran on, by input key (sorted by
    ``first``, then ``second``); what the store keeps under the model's digest. With
    ``by_row``, the same logits by the labelled rows they were given for too
    (:class:`RowLogits`): a key asked with its row is compared there first."""

    first: np.ndarray  # uint64, sorted
    second: np.ndarray  # uint64
    logit: np.ndarray  # float32
    by_row: RowLogits | None = None

    @classmethod
    def of(cls, keys: InputKeys, logit: np.ndarray, rows: np.ndarray | None = None) -> KeptLogits:
        """``logit`` by ``keys``, each key once (records of the same inputs: the first);
        with ``rows`` (each key's labelled row), by row too."""
        order = _key_order(keys)
        first, second = keys.first[order], keys.second[order]
        distinct = np.ones(len(order), dtype=bool)
        distinct[1:] = (first[1:] != first[:-1]) | (second[1:] != second[:-1])
        kept = cls(first[distinct], second[distinct], logit[order][distinct])
        if rows is None:
            return kept
        at = np.empty(len(order), np.intp)
        at[order] = np.cumsum(distinct) - 1  # a repeated input: its first's logit
        return replace(kept, by_row=RowLogits.of(rows, keys, kept.logit[at]))

    def find(
        self, keys: InputKeys, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per key, whether it is kept, and its logit (0 where not): with ``rows`` (each
        key's labelled row), compared at its row first (``by_row``), the rest searched."""
        count = len(keys.first)
        if not len(self.first) or not count:
            return np.zeros(count, bool), np.zeros(count, np.float32)
        if rows is None or self.by_row is None:
            at, hit = self._search(keys)
            return hit, np.where(hit, self.logit[at], np.float32(0))
        hit, taken = self.by_row.find(keys, rows)
        logit = taken.astype(np.result_type(self.logit, np.float32), copy=False)
        rest = np.flatnonzero(~hit)
        if len(rest):
            at, found = self._search(keys.take(rest))
            hit[rest] = found
            logit[rest] = np.where(found, self.logit[at], np.float32(0))
        return hit, logit

    def _search(self, keys: InputKeys) -> tuple[np.ndarray, np.ndarray]:
        """Per key, the index of the kept key it is (0 where none), and whether it is one."""
        # Searched in sorted order: each search starts where the last ended, cache-friendly
        # (20,000 keys in 20,000 kept: ~1 ms, against ~4 ms a search in the keys' order).
        query = keys.first
        order = None if _rising(query) else np.argsort(query)
        if order is not None:
            query = query[order]
        at = np.minimum(np.searchsorted(self.first, query), len(self.first) - 1)
        second = keys.second if order is None else keys.second[order]
        same_first = self.first[at] == query
        hit = same_first & (self.second[at] == second)
        # Two kept inputs sharing a first hash (~1e-9 among a million): the second decides.
        for row in np.flatnonzero(same_first & ~hit).tolist():
            low = int(at[row])
            high = int(np.searchsorted(self.first, query[row], "right"))
            match = np.flatnonzero(self.second[low:high] == second[row])
            if len(match):
                at[row], hit[row] = low + match[0], True
        at = np.where(hit, at, 0)
        if order is None:
            return at, hit
        found, where = np.empty_like(hit), np.empty_like(at)
        found[order], where[order] = hit, at
        return where, found

    def joined(self, keys: InputKeys, logit: np.ndarray) -> KeptLogits:
        """These and ``logit`` of ``keys`` (inputs not kept yet), as one: what
        :meth:`of` gives for both, these first (a key of both keeps its kept logit). The
        new keys are sorted alone and merged in (a copy of these, no sort of them: at
        100,000 kept, a sort of all was ~25 ms a scoring); kept columns that are not
        sorted and distinct, as :meth:`of` leaves them, are sorted with them, counted.
        The rows kept (``by_row``) stay as they are, their keys' logits unchanged: the
        new ones are found by a search of their keys (a few thousand, not a row store
        of the pool copied each scoring)."""
        if not self._ordered():
            JOINED["sorted whole"] += 1
            first = np.concatenate([self.first, keys.first])
            both = InputKeys(first, np.concatenate([self.second, keys.second]))
            joined = KeptLogits.of(both, np.concatenate([self.logit, logit]))
            return replace(joined, by_row=self.by_row)
        JOINED["merged"] += 1
        new = KeptLogits.of(keys, logit)
        fresh = ~self.find(InputKeys(new.first, new.second))[0]
        first, second = new.first[fresh], new.second[fresh]
        place = np.searchsorted(self.first, first, "left")
        high = np.searchsorted(self.first, first, "right")
        # A kept key sharing a new one's first hash (~1e-9 among a million): its second
        # decides which goes first.
        for row in np.flatnonzero(high > place).tolist():
            place[row] += int(np.count_nonzero(self.second[place[row] : high[row]] < second[row]))
        merged = KeptLogits(
            np.insert(self.first, place, first),
            np.insert(self.second, place, second),
            # the dtype a concatenation gives (float32 both, as scorings keep them)
            np.insert(self.logit.astype(np.result_type(self.logit, logit), copy=False),
                      place, new.logit[fresh]),
        )  # fmt: skip
        return replace(merged, by_row=self.by_row)

    def _ordered(self) -> bool:
        """Whether the keys are sorted by ``first``, then ``second``, each once (one pass)."""
        first, second = self.first, self.second
        if len(first) != len(second) or len(first) != len(self.logit):
            return False
        rises = first[1:] > first[:-1]
        ties = first[1:] == first[:-1]
        return bool(np.all(rises | (ties & (second[1:] > second[:-1]))))


def _key_order(keys: InputKeys) -> np.ndarray:
    """The order that sorts ``keys`` by ``first``, then ``second``, keys of both halves
    alike in their given order (what ``np.lexsort`` gives): one sort of the first halves
    (~0.3 ms at 20,000, a lexsort of both ~5 ms); where first halves repeat (records of the
    same inputs, or ~1e-9 among a million: two sharing a first hash) the keys of those
    runs alone sorted again by run, second half and given place. A key of a first half
    of its own stands where any sort puts it; a run's keys take its places in lexsort's
    order. (A lexsort of every key for a few repeats cost ~26 ms of a 1,000,000-record
    run's gate, the candidate's ~210,000 scored inputs.)"""
    order = np.argsort(keys.first)
    first = keys.first[order]
    if len(first) < 2:
        return order
    repeats = first[1:] == first[:-1]  # the key at i + 1 has the first half of the one at i
    if not repeats.any():
        return order
    in_run = np.zeros(len(first), dtype=bool)
    in_run[1:] |= repeats
    in_run[:-1] |= repeats
    places = np.flatnonzero(in_run)
    run = np.cumsum(~np.concatenate(([False], repeats)))[places]  # each place's run
    given = order[places]
    order[places] = given[np.lexsort((given, keys.second[given], run))]
    return order


def _rising(values: np.ndarray) -> bool:
    """Whether ``values`` never fall (one pass)."""
    return len(values) < 2 or bool((values[1:] >= values[:-1]).all())


def _key(digest: str) -> Hashable:
    return (KIND, digest)


def kept_logits(budget: int | None, digest: str) -> KeptLogits | None:
    """The logits kept for the checkpoint of SHA-256 ``digest`` in this process's store
    (``budget``: the request's ``keep_in_memory_bytes``; None or 0: none kept)."""
    memory = process_memory(budget or 0)
    if memory is None:
        return None
    found = memory.get(_key(digest), digest)
    return found if isinstance(found, KeptLogits) else None


def keep_logits(
    budget: int | None,
    digest: str,
    kept: KeptLogits | None,
    keys: InputKeys,
    logit: np.ndarray,
    what: str,
    rows: np.ndarray | None = None,
) -> None:
    """Keep ``logit`` of the inputs ``keys`` (those ``kept`` did not hold) beside ``kept``,
    for the checkpoint of SHA-256 ``digest``; nothing with a budget of 0. An entry grows
    with the inputs its model is asked about while it is kept (its held-out records and
    those new since it was judged), and goes, least recently used first, past the
    budget. ``rows``: each key's labelled row, an entry's first scoring's (``by_row``)."""
    memory = process_memory(budget or 0)
    if memory is None or (kept is not None and not len(keys.first)):
        return
    entry = KeptLogits.of(keys, logit, rows) if kept is None else kept.joined(keys, logit)
    memory.put(_key(digest), digest, entry, estimate_bytes(entry), what)


def logged_reuse(what: str, reused: int, asked: int) -> None:
    """The run's log line for a scoring that took logits from memory."""
    if reused:
        logger.info(
            "reused from memory: %s's outputs on %s of %s records (%s scored by its forward)",
            what,
            f"{reused:,}",
            f"{asked:,}",
            f"{asked - reused:,}",
        )
