"""A record's identity for the data fingerprint: one 64-bit hash of its id, and one of
its id, label and every field the encoder reads (torch-free: the reader works the second
out once per record, when the record's text is still there, and the cache keeps it).

>>> record_id_hash("t1") == record_id_hash("t1")
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from genesis_fp16_infrastructure.data.schema import AttemptInput, Example, Label


def record_id_hash(trajectory_id: str) -> int:
    """A record's id hash as the fingerprint keeps it in ``ids``: whether a model's pool
    held a record; the retrain recipe's folds and validation draw
    (genesis_fp16_infrastructure.recipes.retrain.split)."""
    return _hash(trajectory_id)


def record_id_hashes(trajectory_ids: Iterable[str]) -> list[int]:
    """``record_id_hash`` of each id, in one loop (a million ids: one pass of blake2b)."""
    blake, to_int = hashlib.blake2b, int.from_bytes
    return [
        to_int(blake(t.encode(), digest_size=8).digest(), "big", signed=True)
        for t in trajectory_ids
    ]


def example_id_hashes(examples: Iterable[Example]) -> list[int]:
    """``record_id_hash`` of each example's id: the reader's (``Example.id_key``) where it
    kept one, else worked out here."""
    examples = list(examples)
    hashes = [e.id_key for e in examples]
    if None in hashes:
        return record_id_hashes(e.trajectory_id for e in examples)
    return hashes  # type: ignore[return-value]  # no None, checked above


def record_hash(example: Example) -> int:
    """A record's (id, label, attempt) hash as the fingerprint keeps it in ``labelled``:
    whether a model trained on this very record (drift, the gate). The reader's, worked
    out before it let go of the record's text, when it kept one (``Example.key``)."""
    if example.key is not None:
        return example.key
    return labelled_hash(example.trajectory_id, example.attempt, example.label)


def labelled_hash(trajectory_id: str, attempt: AttemptInput, label: Label) -> int:
    """:func:`record_hash` of the example these make, without making it (the reader
    works it out once per record)."""
    # The attempt's repr names every field with its value (a frozen dataclass of strings,
    # numbers and tuples of strings): what the encoder reads, in a stable text.
    attempt_text = _ATTEMPT_REPR(attempt)
    return _hash(
        f"{trajectory_id}\x00{label.success}\x00{label.score!r}\x00{label.outcome}\x00{attempt_text}"
    )


# The dataclass's own __repr__ without the recursion guard dataclasses wraps it in (an
# attempt holds no attempt): the same text, a quarter faster, once per record read.
_ATTEMPT_REPR = getattr(AttemptInput.__repr__, "__wrapped__", AttemptInput.__repr__)


def _hash(text: str) -> int:
    """The signed 64-bit blake2b of ``text`` (one record's: no list is built)."""
    return int.from_bytes(
        hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True
    )
