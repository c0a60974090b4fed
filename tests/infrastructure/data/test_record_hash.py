"""A labelled record's hash (``data.record_hash``, the fingerprint's version 3): the
documented chain, worked out here from the definition with Python ints; a batch's
columns give each record's own hash; any one field changed changes it."""

from __future__ import annotations

import dataclasses
import hashlib

import msgspec
import numpy as np
import pytest

from genesis_fp16_infrastructure.data import fingerprint, record_hash
from genesis_fp16_infrastructure.data.batch_block import Batch
from genesis_fp16_infrastructure.data.record_hash import labelled_hash, labelled_hashes
from genesis_fp16_infrastructure.data.schema import (
    OUTCOMES,
    AttemptInput,
    Label,
    record_id_hash,
    record_id_hashes,
)

_M = 2**64 - 1
_ATTEMPT = AttemptInput(
    "t1", agent="se_darwin", created=1736154000.5, operator="mutation", generation=3,
    parent_ids=("p1", "p2"), code_changes="@@ -1 +1 @@\n+ a", modified_files=("a.py", "b.md"),
    proposed_strategy="split it", problem_diagnosis="slow", tools_used=("grep",),
    reasoning_pattern="chain_of_thought",
)  # fmt: skip


def _fmix(h: int) -> int:
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & _M
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & _M
    return h ^ (h >> 31)


def _bits(value: float) -> int:
    return int.from_bytes(np.float64(value).tobytes(), "little")


def _text(value: object) -> int:
    digest = hashlib.blake2b(msgspec.msgpack.encode(value), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _by_definition(tid: str, attempt: AttemptInput, label: Label) -> int:
    """The module docstring's chain, a part at a time, in Python ints."""
    scored, timed = label.score is not None, attempt.created is not None
    parents = 0
    for place, parent in enumerate(attempt.parent_ids):
        mixed = (record_id_hash(parent) & _M) ^ ((place * 0x9E3779B97F4A7C15) & _M)
        parents = (parents + _fmix(mixed)) & _M
    parts = [
        OUTCOMES.index(label.outcome), int(scored), _bits(label.score) if scored else 0,
        int(timed), _bits(attempt.created) if timed else 0, attempt.generation,
        len(attempt.parent_ids), parents,
        *(_text(getattr(attempt, name)) for name in record_hash._VALUE_FIELDS),
    ]  # fmt: skip
    h = _fmix((record_id_hash(tid) & _M) ^ 0x6A09E667F3BCC908)
    for part in parts:
        h = _fmix(h ^ part)
    return h - 2**64 if h >= 2**63 else h


@pytest.mark.parametrize(
    "label",
    [Label(True, 0.75, "success"), Label(False, None, "partial"), Label(False, 0.0, "failure")],
)
def test_a_records_hash_is_the_documented_chain(label: Label) -> None:
    """The hash checkpoints, judged ids and kept rows hold: the chain of the docstring,
    bit for bit (a change of these bits is a new fingerprint version)."""
    assert labelled_hash("t1", _ATTEMPT, label) == _by_definition("t1", _ATTEMPT, label)
    untimed = dataclasses.replace(_ATTEMPT, created=None, parent_ids=())
    assert labelled_hash("t1", untimed, label) == _by_definition("t1", untimed, label)


def test_a_batch_gives_each_record_its_own_hash_and_none_to_the_unlabelled() -> None:
    """Columns of several records (repeated values, none labelled among them): each
    labelled one's hash is its one-record hash, an unlabelled one's 0."""
    attempts = [
        dataclasses.replace(_ATTEMPT, trajectory_id=f"t{i}", code_changes=f"+{i % 3}",
                            parent_ids=("p1",) * (i % 3), created=None if i % 4 else 5.0)
        for i in range(12)
    ]  # fmt: skip
    labels = [
        None if i % 5 == 0 else Label(i % 2 == 0, 0.25 * (i % 4), "partial") for i in range(12)
    ]
    columns = Batch(
        *([getattr(a, f) for a in attempts] for f in Batch._fields[:-2]), [""] * 12, [None] * 12
    )
    outcome = np.array([-1 if b is None else OUTCOMES.index(b.outcome) for b in labels], np.int8)
    score = np.array([np.nan if b is None or b.score is None else b.score for b in labels])
    got = labelled_hashes(
        columns, record_id_hashes(a.trajectory_id for a in attempts), outcome, score
    )
    want = [
        0 if b is None else labelled_hash(a.trajectory_id, a, b)
        for a, b in zip(attempts, labels, strict=True)
    ]
    assert got.tolist() == want


@pytest.mark.parametrize(
    "change",
    [
        {"agent": "other"},
        {"created": 1736154000.0},
        {"created": None},
        {"operator": "crossover"},
        {"generation": 4},
        {"parent_ids": ("p2", "p1")},
        {"parent_ids": ("p1",)},
        {"code_changes": "@@ -1 +1 @@\n+ b"},
        {"modified_files": ("a.py",)},
        {"modified_files": ("a.py\x00b.md",)},
        {"proposed_strategy": "slow"},
        {"problem_diagnosis": "split it"},
        {"tools_used": ()},
        {"reasoning_pattern": ""},
    ],
)
def test_any_one_field_changed_changes_the_hash(change: dict[str, object]) -> None:
    """Every field the encoder reads (a swap of two fields' values too) is in the hash."""
    label = Label(True, 0.75, "success")
    changed = dataclasses.replace(_ATTEMPT, **change)  # type: ignore[arg-type]
    assert labelled_hash("t1", changed, label) != labelled_hash("t1", _ATTEMPT, label)


def test_the_id_and_the_label_are_in_the_hash() -> None:
    """Another id, outcome or score: another hash."""
    base = labelled_hash("t1", _ATTEMPT, Label(True, 0.75, "success"))
    assert labelled_hash("t2", _ATTEMPT, Label(True, 0.75, "success")) != base
    assert labelled_hash("t1", _ATTEMPT, Label(True, 0.8, "success")) != base
    assert labelled_hash("t1", _ATTEMPT, Label(True, None, "success")) != base
    assert labelled_hash("t1", _ATTEMPT, Label(False, 0.75, "partial")) != base


def test_the_fingerprint_version_is_the_hashes() -> None:
    """A checkpoint's fingerprint names the hash its records were worked out with."""
    assert fingerprint.STATE_VERSION == record_hash.HASH_VERSION
