"""A pool's held-out split, kept from one run to the next in a resident run process: a
record is drawn once (issue 90, item 2).

Every record's side (``split.split_examples``) is a hash of its own ids: held out by its
judged id's hash (``split.judged_held_out``), and, out of the rest, a point in [0, 1)
drawn from (seed, its record hash) that puts it in validation below the validation
share. Neither depends on the other records, so the draws of a pool's records are the
draws made the run before for the records it had: :class:`KeptSplit` keeps them, in this
process's bounded store (``KeptNumeric.memory``: on only in a resident run process), and
draws the new records alone. What follows from the draws is worked out again each run,
as ``split_examples`` does: the held-out share, the validation share it leaves, and which
of the rest fall under it (the share shrinks as the pool grows: a record moves from
validation to training with no draw).

Beside the draws it keeps what the task sorts: the distinct judged-id hashes and record
hashes of the records outside the held-out part (``trained_ids`` and the early-stopping
record's ``data_key``; the task's training and validation parts are those records,
whatever the validation share). The new records' are merged into them, not sorted again.

* **Checked against what it was drawn from.** An entry holds the arrays it was drawn
  from: the labelled records' places, their judged-id hashes and the pool's record hashes
  (the pool's own arrays, which the record cache hands each read and nothing writes). It
  is used only when this pool begins with them, bit for bit (``same_bits``: one
  comparison of the bytes each) and under the same seed, split hash and held-out draw
  (``HELD_OUT``'s salt and fraction: the entry's identity in the store). A relabelled,
  edited, removed or reordered record, or any other draw, draws every record again.
* **Refused when it is not this module's.** An entry of another type or of inconsistent
  lengths is refused and counted (``refused``); every record is drawn.

    kept = KeptSplit(memory, name)  # memory: a KeptInMemory, or None (nothing kept)
    split = kept.split(data, seed)  # == split_examples(data, seed), bit for bit
    trained, distinct = kept.known(split)  # the sorted hashes; None for another split
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from genesis_fp16_infrastructure.contract.split import HELD_OUT, sorted_unique
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import ReadResult
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.recipes.retrain.split import (
    SPLIT_HASH,
    VALIDATION_SALT,
    Draw,
    Split,
    parts_of,
)
from genesis_fp16_infrastructure.world_model.content_keys import same_bits

KIND = "kept split"  # the store's key: (KIND, the kept numeric rows' file)


@dataclass
class _Drawn:
    """A pool's draws and what they were drawn from (module docstring). ``held`` and
    ``rest``: the places (among the labelled records) held out and not, ascending;
    ``points``: each of ``rest``'s validation point; ``trained`` and ``distinct``: the
    sorted distinct judged-id hashes (uint64) and record hashes (int64) of ``rest``."""

    labelled: np.ndarray
    judged: np.ndarray
    id_hash: np.ndarray
    held: np.ndarray
    rest: np.ndarray
    points: np.ndarray
    trained: np.ndarray
    distinct: np.ndarray

    def nbytes(self) -> int:
        made = (self.held, self.rest, self.points, self.trained, self.distinct)
        return int(sum(a.nbytes for a in made))

    def sound(self) -> bool:
        """Whether this is an entry as :meth:`KeptSplit.split` keeps them: arrays of the
        dtypes it makes, of consistent lengths."""
        arrays = (self.labelled, self.judged, self.id_hash, self.held, self.rest, self.points)
        dtypes = (np.int64, np.uint64, np.int64, np.int64, np.int64, np.float64)
        return (
            all(isinstance(a, np.ndarray) and a.ndim == 1 for a in arrays)
            and all(a.dtype == d for a, d in zip(arrays, dtypes, strict=True))
            and isinstance(self.trained, np.ndarray)
            and self.trained.dtype == np.uint64
            and isinstance(self.distinct, np.ndarray)
            and self.distinct.dtype == np.int64
            and len(self.labelled) == len(self.judged) == len(self.held) + len(self.rest)
            and len(self.rest) == len(self.points)
            and (not len(self.labelled) or int(self.labelled[-1]) < len(self.id_hash))
        )


class KeptSplit:
    """The draws of one pool's held-out split, kept in ``memory`` under ``name`` (the kept
    numeric rows' file); its counts say what :meth:`split` did."""

    def __init__(self, memory: KeptInMemory | None, name: str) -> None:
        self.memory = memory
        self.name = name
        self.reused = 0  # records whose draws were kept
        self.drawn = 0  # records drawn (new, or every one)
        self.refused = 0  # kept entries that were not this module's
        self._made: tuple[Split, np.ndarray, np.ndarray] | None = None

    def split(self, data: ReadResult, seed: int) -> Split:
        """``split_examples(data, seed)`` (no ``eval_fraction``, this split hash), the
        kept records' draws taken, the new records' drawn; kept for the next run."""
        columns = data.columns
        key, identity = (KIND, self.name), (seed, SPLIT_HASH, HELD_OUT.salt, HELD_OUT.fraction)
        found = None if self.memory is None else self.memory.get(key, identity)
        if found is not None and not (isinstance(found, _Drawn) and found.sound()):
            self.refused += 1
            found = None
        start = 0 if found is None or not _begins(columns, found) else len(found.labelled)
        drawn = _grown(columns, seed, found if start else None, start)
        self.reused += start
        self.drawn += len(columns.labelled) - start
        # The parts are the caller's own arrays (held a copy): what it does with them must
        # not reach what is kept.
        split = parts_of(len(columns.labelled), drawn.held.copy(), drawn.rest, drawn.points)
        self._made = split, drawn.trained, drawn.distinct
        if self.memory is not None:
            what = f"{KIND} of {len(columns.labelled):,}"
            self.memory.put(key, identity, drawn, drawn.nbytes(), what)
        return split

    def known(self, split: Split) -> tuple[np.ndarray, np.ndarray] | None:
        """The sorted distinct judged-id hashes (uint64) and record hashes (int64) of the
        records ``split`` trains and validates on, when it is the last :meth:`split`'s;
        else None (the caller sorts them)."""
        if self._made is None or self._made[0] is not split:
            return None
        return self._made[1].copy(), self._made[2].copy()  # the caller's: see split()


def _begins(columns: PoolColumns, kept: _Drawn) -> bool:
    """Whether the pool begins with the records ``kept`` was drawn from, bit for bit."""
    k, m = len(kept.labelled), len(kept.id_hash)
    return (
        0 < k <= len(columns.labelled)
        and m <= len(columns.id_hash)
        and same_bits(columns.labelled[:k], kept.labelled)
        and same_bits(columns.judged[:k], kept.judged)
        and same_bits(columns.id_hash[:m], kept.id_hash)
    )


def _grown(columns: PoolColumns, seed: int, kept: _Drawn | None, start: int) -> _Drawn:
    """The draws of the pool's labelled records: ``kept``'s for the first ``start``, the
    rest drawn; the sorted hashes merged."""
    places = np.arange(start, len(columns.labelled))
    out = HELD_OUT.of_hashes(columns.judged[start:])
    held, rest = places[out], places[~out]
    points = Draw.of_rows(columns, rest).points(seed, VALIDATION_SALT, SPLIT_HASH)
    trained = sorted_unique(columns.judged[rest])
    distinct = sorted_unique(columns.id_hash[columns.labelled[rest]])
    if kept is not None:
        held, rest = np.concatenate((kept.held, held)), np.concatenate((kept.rest, rest))
        points = np.concatenate((kept.points, points))
        trained, distinct = merged(kept.trained, trained), merged(kept.distinct, distinct)
    return _Drawn(
        columns.labelled, columns.judged, columns.id_hash, held, rest, points, trained, distinct
    )


def merged(kept: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The distinct values of two sorted arrays of distinct values, sorted: ``new``'s
    spliced into ``kept`` (what ``sorted_unique`` of both gives, in time of a copy).

    >>> merged(np.array([1, 4, 9]), np.array([0, 4, 5, 10])).tolist()
    [0, 1, 4, 5, 9, 10]
    """
    if len(kept):  # the new values not kept already
        at = np.minimum(np.searchsorted(kept, new), len(kept) - 1)
        new = new[kept[at] != new]
    out = np.concatenate((kept, new))
    out.sort(kind="stable")  # two sorted runs: timsort merges them in one pass
    return out
