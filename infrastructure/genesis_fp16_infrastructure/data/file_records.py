"""What a read makes of a file's records, and how a read's records become its pool.

:class:`FileRecord` is one valid record as the rest of a read needs it, :class:`Rejected`
one quarantined entry, :class:`Head` what an appended ``.jsonl`` file's stored records
hold, and :class:`FileCache` where a read finds a file's records from an earlier read
(``data.record_cache`` is one). :func:`collect` turns the records a read kept into its
labelled examples and its pool (``data.readers.read_trajectories`` calls it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

from genesis_fp16_infrastructure.data.lineage import Pool, PoolEntry
from genesis_fp16_infrastructure.data.schema import AttemptInput, Example, Label
from genesis_fp16_infrastructure.data.slot_objects import objects


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One valid record of a file, as the rest of a read needs it: its pre-attempt input,
    its label (None: unfinished or unlabelled) and its recorded score."""

    trajectory_id: str
    attempt: AttemptInput
    label: Label | None
    score: float | None
    # data.record_key.record_hash of the labelled record, worked out while its text was
    # there (None: unlabelled, in no fingerprint)
    key: int | None = None
    id_key: int | None = None  # data.record_key.record_id_hash of trajectory_id


@dataclass(frozen=True, slots=True)
class Rejected:
    """One quarantined entry of a file, as written to the quarantine file."""

    where: str
    reason: str
    text: str


class Head(NamedTuple):
    """What an appended file's stored head holds, and where its new lines begin."""

    records: list[FileRecord]
    rejected: list[Rejected]
    offset: int  # bytes of the head: the new lines start here
    lines: int  # lines of the head: the first new line is number lines + 1


class FileCache(Protocol):
    """Where a read finds a file's records from an earlier read of the same bytes."""

    def load(self, file: Path, slim: bool) -> tuple[list[FileRecord], list[Rejected]] | None: ...

    def load_head(self, file: Path, slim: bool) -> Head | None:
        """An appended file's earlier records and where its new lines begin, or None."""

    def store(
        self, file: Path, records: list[FileRecord], rejected: list[Rejected], slim: bool
    ) -> None: ...


def collect(kept: dict[str, FileRecord]) -> tuple[list[Example], Pool, int]:
    """A read's labelled examples, its pool and how many records had no label, from its
    records (first of each id, in file order), built a field at a time
    (``data.slot_objects``): the same objects as one record at a time, at a third of
    the cost on a million records. A parent named by its id is that record's id object
    (a million records name two million parents: ~150 MB of strings held once)."""
    ids = list(kept)
    records = list(kept.values())
    attempts = [r.attempt for r in records]
    _share_parent_ids(ids, attempts)
    scores = [r.score for r in records]
    entries = objects(
        PoolEntry,
        ("score", "parents", "operator", "created"),
        (
            scores,
            [a.parent_ids for a in attempts],
            [a.operator for a in attempts],
            [a.created for a in attempts],
        ),
    )
    labelled = [r for r in records if r.label is not None]
    examples = objects(
        Example,
        ("trajectory_id", "attempt", "label", "key", "id_key"),
        (
            [r.trajectory_id for r in labelled],
            [r.attempt for r in labelled],
            [r.label for r in labelled],
            [r.key for r in labelled],
            [r.id_key for r in labelled],
        ),
    )
    known = {i: s for i, s in zip(ids, scores, strict=True) if s is not None}
    pool = Pool.adopt(dict(zip(ids, entries, strict=True)), known)
    return examples, pool, len(records) - len(labelled)


def _share_parent_ids(ids: list[str], attempts: list[AttemptInput]) -> None:
    """Each attempt's parent ids replaced by the equal id objects of the records they
    name (a parent outside the read keeps its own string); the same tuple values."""
    same = dict(zip(ids, ids, strict=True))
    put = vars(AttemptInput)["parent_ids"].__set__  # the slot's setter
    for attempt in attempts:
        parents = attempt.parent_ids
        if parents:
            put(attempt, tuple(map(same.get, parents, parents)))
