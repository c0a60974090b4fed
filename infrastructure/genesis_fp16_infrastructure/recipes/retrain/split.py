"""How an SE-Darwin pool is split: held-out, validation and training parts, or folds.

Every part is chosen by a stable hash of (seed, trajectory id), never by file order, so a
record stays where it was as the pool grows (``recipes.retrain.task`` has
how each part is used). The held-out part is first of all the judged run's
(:data:`~genesis_fp16_infrastructure.contract.split.HELD_OUT`, by the record's id: the
records the gate judges on, which no model trains on; :func:`judged_held_out`), and
``eval_fraction``, when given, holds out that share more.

>>> split_fractions(5000)
(0.2, 0.2)
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.split import HELD_OUT, splitmix64
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import ReadResult
from genesis_fp16_infrastructure.data.schema import judged_ids_of
from genesis_fp16_infrastructure.kept_in_memory import estimate_bytes, process_memory
from genesis_fp16_infrastructure.recipes.retrain.options import (
    EVAL_BOUNDS,
    EVAL_TARGET,
    TaskOptions,
)

logger = logging.getLogger(__name__)

VALIDATION_MAX = 0.2
# The most validation records (issue 36, then issue 90): early stopping's yardstick is the
# success log-loss of one set of weights against the next on the same records, and each
# validation runs the ensemble over all of them every `validate_every` steps. At 20,000
# (issue 36) a 100,000-record pool validated on 10% of its rest, 7,900 records: 4 x 5 x
# 7,900 = 158,000 rows forwarded in a 200-step run, against 37,000 at 10,000 records
# (1,054 validation records) and 99,000 for the held-out evaluation, the one forward that
# must grow with the pool (benchmarks/results/validation_cap_90_cpu-2-cores.md). At 2,000
# the validation costs what a 10,000-record pool's does, twice its records (the success
# log-loss' standard error about 0.6 / sqrt(n): 0.013), and the records it gives up train;
# the held-out AUC and fresh AUC at 100,000 records are in the same results file. Pools
# under 25,000 records (a held-out fifth and a rest under 20,000) are split as before.
VALIDATION_CAP = 2_000


# How a record's place in the split and its fold are drawn; a checkpoint keeps its own
# (``split.hash`` in its world-model state) and a model is judged by it (gate.py).
# 1: blake2b of "seed:salt" followed by the id, an id at a time (~1 s a pass over a
#    million ids, twice per split, and again in the gate);
# 2 (issue 36): the id's record hash (``schema.record_id_hash``, which the read
#    keeps), xor blake2b of "seed:salt", through splitmix64's finalizer, in numpy
#    (~20 ms a pass). A record still keeps its part as the pool grows or reorders.
SPLIT_HASH = 2
SPLIT_HASHES = (1, 2)
VALIDATION_SALT = "validation:"  # the validation draw's salt (Draw.points)


class Draw(NamedTuple):
    """The records a split or a fold assignment draws for: their ids (version 1 hashes
    them) and their ids' record hashes (version 2 mixes them), in the same order."""

    ids: Sequence[str]
    hashes: np.ndarray  # int64

    @classmethod
    def of_rows(cls, columns: PoolColumns, rows: np.ndarray) -> Draw:
        """A read's examples ``rows`` (places among its labelled records, as a
        :class:`Split` holds them; ``data.pool_columns``): their ids and id hashes."""
        records = columns.labelled[rows]
        return cls(RowIds(columns.ids, records), columns.id_hash[records])

    def points(self, seed: int, salt: str, version: int) -> np.ndarray:
        """Each record's place in [0, 1) (held out below the fraction), float64."""
        if _known(version) == 1:  # where each id falls in [0, 1) for the seed and salt
            hashes = _id_hashes(self.ids, seed, salt)
            return np.array([h / 2**64 for h in hashes], dtype=np.float64).reshape(-1)
        return (self._mixed(seed, salt) >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def folds(self, seed: int, folds: int, version: int) -> np.ndarray:
        """Each record's fold in ``range(folds)``, int64, from a hash of (seed, id) alone:
        independent of file order, and a record keeps its fold as the pool grows (a
        resumed member never trains on a record it was scored on). Fold sizes vary as a
        draw does (500 records: 100 +- 9)."""
        if _known(version) == 1:
            hashes = _id_hashes(self.ids, seed, "fold:")
            return np.array([h % folds for h in hashes], dtype=np.int64).reshape(-1)
        return (self._mixed(seed, "fold:") % np.uint64(folds)).astype(np.int64)

    def _mixed(self, seed: int, salt: str) -> np.ndarray:
        key = hashlib.blake2b(f"{seed}:{salt}".encode(), digest_size=8).digest()
        return splitmix64(self.hashes.reshape(-1), np.uint64(int.from_bytes(key, "big")))


class RowIds(Sequence[str]):
    """The ids of a read's ``records``, looked up as they are read: version 2 draws from
    the hashes alone, and a list of every id cost ~40 ms a draw at 100,000 records."""

    def __init__(self, ids: Sequence[str], records: np.ndarray) -> None:
        self._ids, self._records = ids, records

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, at: Any) -> Any:
        if isinstance(at, slice):
            return [self._ids[r] for r in self._records[at].tolist()]
        return self._ids[int(self._records[at])]

    def __iter__(self) -> Iterator[str]:
        return map(self._ids.__getitem__, self._records.tolist())


def _known(version: int) -> int:
    if version not in SPLIT_HASHES:
        raise TrainRequestError(
            f"split hash version {version} is not one this build draws ({SPLIT_HASHES}): "
            "train into a fresh checkpoint folder"
        )
    return version


def _id_hashes(ids: Sequence[str], seed: int, salt: str) -> list[int]:
    """A stable 64-bit hash of (seed, salt, id) for each id, the held-out split's and the
    folds', in one loop (a million ids: one pass of blake2b)."""
    prefix = f"{seed}:{salt}"
    blake, to_int = hashlib.blake2b, int.from_bytes
    return [to_int(blake((prefix + i).encode(), digest_size=8).digest(), "big") for i in ids]


def split_fractions(examples: int, eval_fraction: float | None = None) -> tuple[float, float]:
    """(held-out share of the pool, validation share of the rest) for a pool this size.

    >>> split_fractions(500), split_fractions(5000), split_fractions(20000)
    ((0.3, 0.2), (0.2, 0.2), (0.1, 0.1))
    >>> split_fractions(100_000), split_fractions(1_000_000)  # at most VALIDATION_CAP
    ((0.1, 0.0222), (0.1, 0.0022))

    Below the cap the shares are rounded to 4 places; at it the validation share is
    rounded down, so that the share of the rest is never more than VALIDATION_CAP records.
    """
    low, high = EVAL_BOUNDS
    if eval_fraction is None:
        eval_fraction = min(high, max(low, EVAL_TARGET / max(examples, 1)))
    rest = examples * (1 - eval_fraction)
    validation = min(VALIDATION_MAX, max(low, EVAL_TARGET / max(rest, 1)))
    # Past VALIDATION_CAP records a larger sample only costs: each validation runs the
    # model over all of it, every `validate_every` steps. The rest trains.
    capped = math.floor(VALIDATION_CAP / max(rest, 1) * 10_000) / 10_000
    return round(eval_fraction, 4), min(round(validation, 4), capped)


class Split(NamedTuple):
    """Each part as its records' places in the data's examples (the read's labelled
    records): the task takes their columns and feature rows by them (issue 36: no object
    per record). A whole-pool split's three parts are one array."""

    train: np.ndarray
    validation: np.ndarray
    held_out: np.ndarray
    eval_fraction: float
    validation_fraction: float
    folds: tuple[int, ...] = ()  # cross-validated: each record's fold, in train's order
    fold_count: int = 0
    hash: int = SPLIT_HASH  # how records were drawn into parts or folds (SPLIT_HASH)


JUDGED_KIND = "judged ids"  # the store's key: (JUDGED_KIND,), the last pool's judged ids
# Judged ids this process took from the last pool's ("taken") and named ("named"), and
# the kept pools that were not a prefix of the next ("stale": every id named again).
JUDGED: Counter[str] = Counter()


@dataclass(frozen=True)
class _KeptJudged:
    """A pool's labelled records' trajectory ids, record hashes and judged ids, in order."""

    trajectory_ids: tuple[str, ...]
    keys: np.ndarray  # int64
    judged: tuple[str, ...]


def judged_ids(columns: PoolColumns, budget: int | None = None) -> tuple[str, ...]:
    """Each labelled record's id as the judged run knows it (``schema.judged_id``, all
    named at once: ``schema.judged_ids_of``), in
    the read's order (``score_records``, ``trained_ids``), as a tuple. ``budget``: the
    request's ``keep_in_memory_bytes``; past 0 the ids are kept in this process, and the
    next pool that begins with the same records (the same trajectory ids and record
    hashes, in order: a pool grown at its end) names its new records alone; any other
    pool (a relabel, an edit or a removal among them) names every record again, logged.
    (A resident process's judged run lists a pool the record cache grew from the
    listing it kept instead: ``scoring._RunPool.listing``.)"""
    ids, keys = columns.example_ids, columns.key
    memory = process_memory(budget or 0)
    kept = None if memory is None else memory.get((JUDGED_KIND,), JUDGED_KIND, given=False)
    start = 0
    if isinstance(kept, _KeptJudged):
        start = len(kept.judged)
        prefix = start <= len(ids) and np.array_equal(keys[:start], kept.keys)
        if not (prefix and tuple(ids[:start]) == kept.trajectory_ids):
            JUDGED["stale"] += 1
            logger.info(
                "judged ids: the %s kept are not the first of these %s records: all named again",
                f"{start:,}",
                f"{len(ids):,}",
            )
            start = 0
    named = judged_ids_of(ids[start:], keys[start:])
    JUDGED["taken"] += start
    JUDGED["named"] += len(named)
    taken = kept.judged[:start] if start and isinstance(kept, _KeptJudged) else ()
    out = taken + tuple(named)
    if memory is not None and (len(named) or not start):
        entry = _KeptJudged(tuple(ids), keys.copy(), out)
        memory.put((JUDGED_KIND,), JUDGED_KIND, entry, estimate_bytes(entry), "judged ids")
    if start:
        memory.note_given(f"judged ids of {start:,} records")  # type: ignore[union-attr]
    return out


def judged_held_out(data: ReadResult) -> np.ndarray:
    """Per labelled example (the read's examples, in order), whether the judged run holds
    it out (``contract.judging``): no part a model trains on holds it."""
    return HELD_OUT.of_hashes(data.columns.judged)  # judged_ids' hashes, kept by the read


def split_examples(
    data: ReadResult, seed: int, eval_fraction: float | None = None, version: int = SPLIT_HASH
) -> Split:
    """Held-out, validation and training parts: held out, the judged run's records (and
    ``eval_fraction`` more, by a hash of (seed, id), when given); validation, by a hash
    of (seed, id) out of the rest (:func:`parts_of`). A resident run process keeps the
    draws from run to run (``kept_split``)."""
    count = data.labelled
    everywhere = np.arange(count)
    out = judged_held_out(data)
    if eval_fraction is not None:
        out |= Draw.of_rows(data.columns, everywhere).points(seed, "", version) < eval_fraction
    held_rows, rest_rows = everywhere[out], everywhere[~out]
    drawn = Draw.of_rows(data.columns, rest_rows).points(seed, VALIDATION_SALT, version)
    return parts_of(count, held_rows, rest_rows, drawn, version)


def parts_of(
    count: int,
    held_rows: np.ndarray,
    rest_rows: np.ndarray,
    drawn: np.ndarray,
    version: int = SPLIT_HASH,
) -> Split:
    """The split of ``count`` examples whose ``held_rows`` are held out: ``rest_rows``
    (ascending) whose point ``drawn`` is under the validation share that the held-out
    share leaves validate, the others train."""
    fraction = round(len(held_rows) / count, 4) if count else 0.0  # the held-out mean
    validation = split_fractions(count, fraction)[1]
    in_validation = drawn < validation
    val_rows, train_rows = rest_rows[in_validation], rest_rows[~in_validation]
    if not len(train_rows) or not len(held_rows) or not len(val_rows):
        raise TrainRequestError(
            f"{count} labelled example(s) cannot be split into train, "
            f"validation and held-out parts (eval_fraction={fraction}); add data"
        )
    return Split(train_rows, val_rows, held_rows, fraction, validation, hash=version)


class Drawing(Protocol):
    """Draws a held-out split as :func:`split_examples` does, keeping the draws
    (``kept_split.KeptSplit``)."""

    def split(self, data: ReadResult, seed: int) -> Split: ...


def choose_split(
    data: ReadResult,
    options: TaskOptions,
    seed: int,
    saved: Mapping[str, Any] | None = None,
    kept: Drawing | None = None,
) -> Split:
    """Cross-validated folds or the held-out split, by the options and the pool's size;
    a resumed run keeps its checkpoint's choice (a pool that grew past the threshold goes
    on as it began), unless ``cross_validation`` explicitly asks for the other. A held-out
    split of this split hash and no ``eval_fraction`` is ``kept``'s, when given."""
    cross = options.cross_validated(data.labelled)
    folds = options.folds
    version = SPLIT_HASH  # a fresh run's; a checkpoint's own below (1 before it was kept)
    if saved is not None:
        version = int((saved.get("split") or {}).get("hash", 1))
        members = int(saved["model"].get("members", 1))
        # Its folds (0: held-out); a checkpoint from before held-out ensembles may not say,
        # and then more than one network means one per fold.
        saved_folds = int((saved.get("split") or {}).get("folds", members if members > 1 else 0))
        folded = saved_folds > 0
        asked = options.cross_validation
        if asked is not None and asked != folded:
            kinds = ("held-out", "cross-validated")
            raise TrainRequestError(
                f"cannot resume this checkpoint: it is {kinds[folded]} ({members} network(s)), "
                f"and cross_validation={str(asked).lower()} asks for {kinds[asked]}; "
                "start a fresh checkpoint folder"
            )
        if folded and folds != saved_folds:
            raise TrainRequestError(
                f"cannot resume this checkpoint: it holds {members} networks, one per fold, "
                f"and this run asks for folds={folds}; start a fresh checkpoint folder"
            )
        if cross != folded:
            kinds = ("held-out", "cross-validated")
            logger.info(
                "resuming a %s checkpoint: the run stays %s (this pool alone would be %s)",
                kinds[folded],
                kinds[folded],
                kinds[cross],
            )
        cross = folded
    if cross:
        return fold_split(data, seed, folds, version)
    if kept is not None and options.eval_fraction is None and version == SPLIT_HASH:
        return kept.split(data, seed)
    return split_examples(data, seed, options.eval_fraction, version)


def fold_split(data: ReadResult, seed: int, folds: int, version: int = SPLIT_HASH) -> Split:
    """Every record the judged run does not hold out (:func:`judged_held_out`) in each
    part, dealt into ``folds`` folds (see ``Draw.folds``)."""
    rows = np.flatnonzero(~judged_held_out(data))
    count = len(rows)
    if count < folds:
        raise TrainRequestError(
            f"{count} labelled example(s) cannot be dealt into {folds} folds; add data"
        )
    dealt = Draw.of_rows(data.columns, rows).folds(seed, folds, version)
    return Split(rows, rows, rows, 0.0, 0.0, tuple(dealt.tolist()), folds, version)
