"""A batch of decoded records written into a :class:`RecordBlock` a column at a time.

:class:`~genesis_fp16_infrastructure.data.file_records.BlockWriter` writes a record at a
time: an ``AttemptInput`` and a ``Label`` object each, its own numbers a tuple, its hash
text the dataclass's repr. For a batch of records msgspec decoded (``data.readers``'
fast structs, every one valid), :func:`batch_block` writes the same block from the
structs' fields, one column at a time: no object per record beyond the decoded struct,
each number column one comprehension, the fingerprint texts hashed together. Written a
record at a time, 25,000 generated records cost several times msgspec's decode of their
bytes (issue 90, ``benchmarks/read_floor.py``). The block is the same, byte for byte
(``tests/infrastructure/data/test_batch_block.py`` holds the two to it).

>>> batch = Batch(["t1"], [""], [None], ["baseline"], [0], [()], ["+a"], [()], [""], [""],
...               [()], [""], ["success"], [0.9])
>>> block = batch_block(batch, (0.7, 0.3), keep_text=False)
>>> len(block), block.code_changes, block.success
(1, [''], b'\\x01')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from genesis_fp16_infrastructure.data.file_records import (
    _OTHER_BREAKS,
    NO_TEXT,
    OWN_FEATURES,
    TEXT_FIELDS,
    RecordBlock,
    _int64s,
    _kind,
    _optional,
    change_shape,
)
from genesis_fp16_infrastructure.data.schema import (
    OUTCOMES,
    derive_label,
    id_digest,
    judged_id,
    record_id_hashes,
)

_OUTCOME = {name: i for i, name in enumerate(OUTCOMES)}
_KINDS = ("test", "config", "docs", "code")
_log1p = math.log1p


class Batch(NamedTuple):
    """A batch's records as columns of ``AttemptInput``'s fields (parents already without
    the record's own id), and each record's label word (a status or a final outcome) and
    score, as ``schema.derive_label`` reads them."""

    trajectory_id: list[str]
    agent: list[str]
    created: list[float | None]
    operator: list[str]
    generation: list[int]
    parent_ids: list[tuple[str, ...]]
    code_changes: list[str]
    modified_files: list[tuple[str, ...]]
    proposed_strategy: list[str]
    problem_diagnosis: list[str]
    tools_used: list[tuple[str, ...]]
    reasoning_pattern: list[str]
    word: list[str]
    score: list[float | None]


def batch_block(batch: Batch, thresholds: tuple[float, float], keep_text: bool) -> RecordBlock:
    """The block ``BlockWriter`` writes for these records, with no quarantined entry."""
    n = len(batch.trajectory_id)
    labels = [derive_label(w, s, *thresholds) for w, s in zip(batch.word, batch.score, strict=True)]
    success, outcome, label_score, key, judged = _label_columns(batch, labels)
    columns: dict[str, Any] = {}
    if keep_text:
        text = (batch.code_changes, batch.modified_files, batch.proposed_strategy,
                batch.problem_diagnosis)  # fmt: skip
        columns.update(zip(TEXT_FIELDS, (list(t) for t in text), strict=True))
    else:
        columns.update(
            {name: [empty] * n for name, empty in zip(TEXT_FIELDS, NO_TEXT, strict=True)}
        )
    coded = (
        ("agent", "agents", batch.agent), ("operator", "operators", batch.operator),
        ("tools_used", "tool_lists", batch.tools_used),
        ("reasoning_pattern", "patterns", batch.reasoning_pattern),
    )  # fmt: skip
    for name, values, column in coded:
        index: dict[Any, int] = {}
        codes = [index.setdefault(value, len(index)) for value in column]
        columns[name] = np.array(codes, "<i4").reshape(n).tobytes()
        columns[values] = list(index)
    columns["created"], columns["timed"] = _optional(batch.created)
    columns["score"], columns["scored"] = _optional(batch.score)
    columns["label_score"], columns["label_scored"] = _optional(label_score)
    parent_ids = list(chain.from_iterable(batch.parent_ids))
    id_key = record_id_hashes(batch.trajectory_id)
    return RecordBlock(
        trajectory_id=list(batch.trajectory_id),
        generation=_int64s(batch.generation),
        parent_ids=parent_ids,
        parent_hash=_int64s(_parent_hashes(parent_ids, batch.trajectory_id, id_key)),
        parent_counts=np.array([len(p) for p in batch.parent_ids], "<i4").reshape(n).tobytes(),
        own=_own_columns(batch).tobytes(),
        success=np.array(success, np.int8).reshape(n).tobytes(),
        outcome=np.array(outcome, np.int8).reshape(n).tobytes(),
        key=_int64s(key),
        id_key=_int64s(id_key),
        judged=b"".join(judged),
        rejected=[],
        **columns,
    )


def _parent_hashes(parent_ids: list[str], ids: list[str], id_key: np.ndarray) -> list[int]:
    """``schema.record_id_hash`` of each parent id. A parent is mostly a record of the
    same file: its hash is looked up among the records' own (``id_key``), and only the
    others are worked out (a blake2b each)."""
    known: dict[str, int] = dict(zip(ids, id_key.tolist(), strict=True))
    hashes = [known.get(p) for p in parent_ids]
    missing = [p for p, h in zip(parent_ids, hashes, strict=True) if h is None]
    found = iter(record_id_hashes(missing).tolist())
    return [next(found) if h is None else h for h in hashes]


def _label_columns(
    batch: Batch, labels: Sequence[Any]
) -> tuple[list[int], list[int], list[float | None], list[int], list[bytes]]:
    """success, outcome, label score, ``schema.labelled_hash`` and judged digest of each
    record (-1, -1, None, 0 and 8 zero bytes without a label)."""
    n = len(labels)
    success, outcome, keys = [-1] * n, [-1] * n, [0] * n
    label_score: list[float | None] = [None] * n
    judged = [bytes(8)] * n
    rows = [row for row, label in enumerate(labels) if label is not None]
    hashed = record_id_hashes(_hash_texts(batch, labels)).tolist()
    for row, key in zip(rows, hashed, strict=True):
        label, trajectory_id = labels[row], batch.trajectory_id[row]
        success[row], outcome[row] = int(label.success), _OUTCOME[label.outcome]
        label_score[row], keys[row] = label.score, key
        judged[row] = id_digest(judged_id(trajectory_id, key))
    return success, outcome, label_score, keys, judged


def _hash_texts(batch: Batch, labels: Sequence[Any]) -> list[str]:
    """The text ``schema.labelled_hash`` hashes, of each labelled record: its id, its
    label and ``repr(AttemptInput(...))``, written from the columns without making the
    object (``test_batch_block.py`` holds the hashes to the per-record ones)."""
    return [
        f"{tid}\x00{label.success}\x00{label.score!r}\x00{label.outcome}\x00"
        f"AttemptInput(trajectory_id={tid!r}, agent={agent!r}, created={created!r}, "
        f"operator={operator!r}, generation={generation!r}, parent_ids={parents!r}, "
        f"code_changes={change!r}, modified_files={files!r}, proposed_strategy={strategy!r}, "
        f"problem_diagnosis={diagnosis!r}, tools_used={tools!r}, reasoning_pattern={pattern!r})"
        for (
            tid,
            agent,
            created,
            operator,
            generation,
            parents,
            change,
            files,
            strategy,
            diagnosis,
            tools,
            pattern,
            label,
        ) in zip(*batch[:12], labels, strict=True)
        if label is not None
    ]


def _own_columns(batch: Batch) -> np.ndarray:
    """``file_records.own_numbers`` of every record, as an (n, 15) little-endian float64
    array, a feature at a time (the same ``math`` calls, so the same bits)."""
    diffs, files = batch.code_changes, batch.modified_files
    shares, hunks = _change_shapes(diffs)
    kinds = [{_kind(name) for name in names} for names in files]
    tools = {t: float(len(set(t))) for t in dict.fromkeys(batch.tools_used)}  # coded: few
    columns = (
        [_log1p(g) for g in batch.generation],
        [float(len(p)) for p in batch.parent_ids],
        [_log1p(d.count("\n") + 1 if d else 0) for d in diffs],
        [_log1p(len(d)) for d in diffs],
        [_log1p(len(f)) for f in files],
        [_log1p(len(s.split())) for s in batch.proposed_strategy],
        [_log1p(len(s.split())) for s in batch.problem_diagnosis],
        [tools[t] for t in batch.tools_used],
        shares,
        [_log1p(h) for h in hunks],
        [_log1p(len(set(f))) for f in files],
        *([float(kind in found) for found in kinds] for kind in _KINDS),
    )
    assert len(columns) == len(OWN_FEATURES)
    own = np.empty((len(diffs), len(OWN_FEATURES)), "<f8")
    for at, column in enumerate(columns):
        own[:, at] = column
    return own


def _change_shapes(diffs: list[str]) -> tuple[list[float], list[float]]:
    """``file_records.change_shape`` of every diff: the share of added lines, and the
    hunks. When every diff is ASCII with ``\\n`` its only line break (nearly always),
    their line starts are found at once in ``"\\n" + "\\n".join(diffs)`` with numpy:
    each diff's text there starts with its own ``\\n``, so no pattern of one runs into
    the next; else a diff at a time."""
    joined = "\n" + "\n".join(diffs)
    if not joined.isascii() or any(mark in joined for mark in _OTHER_BREAKS):
        shapes = [change_shape(diff) for diff in diffs]
        return [s[0] for s in shapes], [s[1] for s in shapes]
    text = np.frombuffer(joined.encode("ascii") + b"\0\0\0", np.uint8)
    starts = np.flatnonzero(text == 10)  # every line start of every diff, \n first
    after = [text[starts + step] for step in (1, 2, 3)]
    plus, minus, at = (after[0] == ord(c) for c in "+-@")
    added = plus & ~((after[1] == ord("+")) & (after[2] == ord("+")))
    removed = minus & ~((after[1] == ord("-")) & (after[2] == ord("-")))
    hunk = at & (after[1] == ord("@"))
    # the diff of each line start: diff i's text begins at its own \n
    first = np.cumsum([0] + [len(diff) + 1 for diff in diffs[:-1]])
    owner = np.searchsorted(first, starts, side="right") - 1
    count = len(diffs)
    plus_n, minus_n, hunk_n = (
        np.bincount(owner[flags], minlength=count).tolist() for flags in (added, removed, hunk)
    )
    shares = [a / (a + r) if a + r else 0.5 for a, r in zip(plus_n, minus_n, strict=True)]
    return shares, [float(h) for h in hunk_n]
