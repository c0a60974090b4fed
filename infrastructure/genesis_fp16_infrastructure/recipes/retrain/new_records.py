"""Which of a read's records the served model never trained on as they are now: the
drift report's split of the pool into new records and its reference (issue 90 item 3).

A record is new when its record hash (the reader's ``PoolColumns.key``: id, label and
attempt) is not among the served model's (``DataFingerprint.labelled``). The served
model's hashes are sorted for the lookup (:func:`sorted_labelled`) and each record's
place among them is found by a binary search (:func:`new_records`).

In a resident process (a budget past 0: ``kept_in_memory``) both are kept from one run
to the next, keyed by the served model, and neither is believed before it is checked
against what it was made of:

* the sort is kept as its order (an argsort of the served model's hashes): the hashes
  gathered in that order must ascend strictly, which holds only when the order is a
  permutation that sorts them (a repeated or lost position repeats a hash); one gather
  and one comparison, no sort. A kept order that fails is sorted again (``SORTS``);
* each record's place is kept (its index among the sorted hashes, -1 for a new record):
  a kept place is taken only where the sorted hash there is this record's own, every
  record compared; a record whose place fails (a relabel, an edit of its attempt, a
  removal that shifted the pool, a planted value), a record kept as new and a record the
  last run did not read are searched for. So what is searched grows with what is new,
  and whatever is kept, the answer is the one a search of every record gives
  (``PLACES`` counts the places taken and searched). When most of the pool is searched
  (a served model's first report: after a promotion, a rollback), it is searched in the
  order of its hashes that ``judging.id_lookups.ranked`` keeps from any earlier report,
  grown by the hashes new since and checked before it is believed.

A 100,000-record pool with 1,000 new: 3.4 ms of CPU through a kept order of the pool's
hashes and a lookup of every one (at 82eca65c), against about 0.6 ms here.

Most often none of that is needed: a daemon's pool grows at its end (new files sort
after the old, ``data.pool_extend``), so the served model's records are the pool's first
labelled ones and the new records the rest. :func:`new_at_end` says so when the pool's
first ``len(served.labelled)`` record hashes are the served model's, in any order,
checked by two sums of the hashes (a wrapping sum, and one of each hash mixed:
splitmix64's finaliser) over both sides: two passes over the hashes, no sort, search or
set, whatever was kept (nothing is). Past them every record is new: its id is no other
record's (a pool holds an id once), so neither is its hash (the id is hashed into it).
A relabel, an edit or a removal among the first records, or a pool whose new records
came first, changes a sum: it is refused (``AT_END``) and the search above answers.
A pool whose new records a read laid among the served model's (a new data file sorting
among the old: ``data.pool_splice``'s note of where the old pool's records now lie) is
answered by :func:`new_among` the same way: the records the note does not place are the
new ones, when the others' hashes are the served model's by the same two sums.

>>> is_new = new_records(columns, sorted_labelled(served, key, 0), key, 0)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Hashable

import numpy as np

from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint
from genesis_fp16_infrastructure.data.pool_columns import SPLICED_FROM, PoolColumns
from genesis_fp16_infrastructure.data.schema import find_ids
from genesis_fp16_infrastructure.judging import id_lookups
from genesis_fp16_infrastructure.kept_in_memory import process_memory

ORDER_KIND = "drift: served record hashes' order"
PLACES_KIND = "drift: records' places among the served hashes"
RANKED_NAME = "record hashes"  # id_lookups.ranked's name of the pool's record hashes' order
# The served model's hashes: "sorted" (nothing kept, or a kept order that does not sort
# them: counted "refused" too) or "kept" (a kept order that sorts them).
SORTS: Counter[str] = Counter()
# Records whose kept place was "taken" (checked), and those "searched" for (new, kept
# as new, never kept, or whose kept place failed its check: counted "refused" too).
PLACES: Counter[str] = Counter()
# Reports whose new records were the pool's last ("at end"), and those whose first
# records were not the served model's ("refused"); of these, those whose new records a
# read laid among the served model's ("laid among"), the rest searched for.
AT_END: Counter[str] = Counter()
# splitmix64's finaliser's constants: each hash mixed before the second sum
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
logger = logging.getLogger(__name__)


def new_at_end(columns: PoolColumns, served: DataFingerprint) -> np.ndarray | None:
    """Which labelled records of ``columns`` are new (:func:`new_records`'s answer) when
    its first ``len(served.labelled)`` record hashes are the served model's (their sums
    equal: module docstring): the rest. None otherwise (counted refused)."""
    labelled = served.labelled.numpy()
    first, hashes = len(labelled), columns.key
    if first > len(hashes) or _sums(hashes[:first]) != _sums(labelled):
        AT_END["refused"] += 1
        return None
    AT_END["at end"] += 1
    is_new = np.zeros(len(hashes), dtype=np.bool_)
    is_new[first:] = True
    return is_new


def new_among(columns: PoolColumns, served: DataFingerprint) -> np.ndarray | None:
    """Which labelled records of ``columns`` are new when the read laid new records among
    an old pool's (its ``SPLICED_FROM`` note) and the old pool's labelled records are the
    served model's (their sums equal: module docstring): the others. None otherwise."""
    note = vars(columns).get(SPLICED_FROM)
    if note is None:
        return None
    new_row = np.ones(len(columns), dtype=np.bool_)
    new_row[note[1]] = False
    is_new = new_row[columns.labelled]
    labelled = served.labelled.numpy()
    old = columns.key[~is_new]
    if len(old) != len(labelled) or _sums(old) != _sums(labelled):
        return None
    AT_END["laid among"] += 1
    return is_new


def _sums(hashes: np.ndarray) -> tuple[int, int]:
    """Two sums of ``hashes`` (int64), wrapping: the hashes', and each mixed by
    splitmix64's finaliser (so that two sets of one plain sum still differ)."""
    h = np.ascontiguousarray(hashes).view(np.uint64)
    return int(h.sum(dtype=np.uint64)), int(mixed(h).sum(dtype=np.uint64))


def mixed(hashes: np.ndarray) -> np.ndarray:
    """Each of ``hashes`` (64-bit) mixed by splitmix64's finaliser, as uint64: every bit
    of the result depends on every bit of the hash."""
    h = np.ascontiguousarray(hashes).view(np.uint64)
    out = (h ^ (h >> np.uint64(30))) * _MIX[0]
    out = (out ^ (out >> np.uint64(27))) * _MIX[1]
    out ^= out >> np.uint64(31)
    return out


def sorted_labelled(served: DataFingerprint, key: Hashable, budget: int | None) -> np.ndarray:
    """The served model's record hashes, sorted: one numpy sort without a budget; in a
    resident process through the order kept under ``key``, checked (module docstring),
    else an argsort kept for the next run."""
    labelled = np.ascontiguousarray(served.labelled.numpy())
    memory = process_memory(budget or 0)
    if memory is None:
        return np.sort(labelled)
    kept = memory.get((ORDER_KIND, key), key, given=False)
    if isinstance(kept, np.ndarray) and kept.dtype == np.int64 and len(kept) == len(labelled):
        ordered = np.take(labelled, kept, mode="clip")  # a position out of range: a repeat
        if bool((ordered[1:] > ordered[:-1]).all()):
            SORTS["kept"] += 1
            return ordered
        SORTS["refused"] += 1
        logger.info("drift: the kept order of the served record hashes does not sort them")
    SORTS["sorted"] += 1
    order = np.argsort(labelled)  # numpy's default: 1.2 ms at 100,000, its stable one 6
    order.flags.writeable = False  # kept: checked at each use, never changed
    memory.put((ORDER_KIND, key), key, order, order.nbytes, "the served record hashes' order")
    return labelled[order]


def new_records(
    columns: PoolColumns, ordered: np.ndarray, key: Hashable, budget: int | None
) -> np.ndarray:
    """Which labelled records of ``columns`` (a boolean each, in their order) have a
    record hash not in ``ordered`` (:func:`sorted_labelled`'s): the kept places checked
    and taken, the rest searched for (module docstring)."""
    hashes = columns.key
    memory = process_memory(budget or 0)
    kept = None if memory is None else memory.get((PLACES_KIND, key), key, given=False)
    places = np.full(len(hashes), -1, dtype=np.int64)
    if isinstance(kept, np.ndarray) and kept.dtype == np.int64 and kept.ndim == 1 and len(ordered):
        n = min(len(kept), len(hashes))
        # Every kept place checked, over the whole prefix (a gather each, no index of the
        # places held); one out of range is clipped into it, and checked there
        at = np.clip(kept[:n], 0, len(ordered) - 1)
        held = kept[:n] >= 0
        right = held & (ordered[at] == hashes[:n])
        places[:n] = np.where(right, at, -1)
        wrong = int(np.count_nonzero(held)) - int(np.count_nonzero(right))
        if wrong:
            PLACES["refused"] += wrong
            logger.info("drift: %d kept place(s) of records were not theirs: searched", wrong)
    search = np.flatnonzero(places < 0)
    if 2 * len(search) > len(places):  # most of the pool (a served model's first report)
        search = np.arange(len(places))
        # through the order of the pool's hashes kept from any earlier report, grown by
        # what is new since and checked before it is believed (id_lookups.ranked, find_ids)
        at, found = find_ids(ordered, hashes, id_lookups.ranked(RANKED_NAME, hashes, budget))
        places = np.where(found, at, -1).astype(np.int64, copy=False)
    else:
        places[search] = _places(ordered, hashes[search])
    PLACES["taken"] += len(places) - len(search)
    PLACES["searched"] += len(search)
    places.flags.writeable = False  # kept: checked at each use, never changed
    if memory is not None:
        memory.put((PLACES_KIND, key), key, places, places.nbytes, "the records' places")
    return places < 0


def _places(ordered: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """Each of ``hashes``' index in ``ordered`` (sorted), -1 where it is not there. The
    hashes are searched for in their sorted order (100,000 of them: 2 ms of CPU with
    their sort, against 10 in the pool's order: the searches then walk the array)."""
    out = np.full(len(hashes), -1, dtype=np.int64)
    if not len(ordered) or not len(hashes):
        return out
    order = np.argsort(hashes)
    asked = hashes[order]
    at = np.searchsorted(ordered, asked)
    found = ordered[np.minimum(at, len(ordered) - 1)] == asked
    out[order[found]] = at[found]
    return out
