"""A batch of decoded records written into a :class:`RecordBlock` a column at a time.

:class:`~genesis_fp16_infrastructure.data.file_records.BlockWriter` writes a record at a
time: an ``AttemptInput`` and a ``Label`` object each, its own numbers a tuple, its hash
text the dataclass's repr. For a batch of records msgspec decoded (``data.readers``'
fast structs, every one valid), :func:`batch_block` writes the same block from the
structs' fields, one column at a time: no object per record beyond the decoded struct,
the labels compared a column at a time (``schema.derive_outcomes``), a repeated value
(agent, tools, a file's name, a count) coded, repr'd, counted or ``log1p``'d once, the
fingerprint texts hashed together. Written a
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

import hashlib
import math
from collections.abc import Hashable, Sequence
from itertools import chain, compress
from typing import Any, NamedTuple, TypeVar

import numpy as np

from genesis_fp16_infrastructure.data.file_records import (
    _OTHER_BREAKS,
    NO_TEXT,
    OWN_FEATURES,
    TEXT_FIELDS,
    RecordBlock,
    _int64s,
    _kind,
    change_shape,
)
from genesis_fp16_infrastructure.data.schema import (
    OUTCOMES,
    derive_outcomes,
    judged_ids_of,
    record_id_hashes,
)

_OUTCOME = {name: i for i, name in enumerate(OUTCOMES)}
_KINDS = ("test", "config", "docs", "code")
_log1p = math.log1p
_H = TypeVar("_H", bound=Hashable)


class Batch(NamedTuple):
    """A batch's records as columns of ``AttemptInput``'s fields (parents already without
    the record's own id), and each record's label word (a status or a final outcome) and
    score, as ``schema.derive_label`` reads them."""

    trajectory_id: list[str]
    agent: list[str]
    created: Sequence[float | None] | np.ndarray  # an array: float64, nan where None
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
    score = np.array(batch.score, "<f8").reshape(n)  # numpy reads None as nan
    outcome = derive_outcomes(batch.word, score, *thresholds)
    labelled = outcome >= 0
    scored = ~np.isnan(score)
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
    codes = {name: _coded(column) for name, _, column in coded}
    # The files coded too (not kept so): their counts, kinds and repr once a distinct list
    codes["modified_files"] = _coded(batch.modified_files)
    for name, values, _ in coded:
        columns[name], columns[values] = codes[name][0].astype("<i4").tobytes(), codes[name][1]
    tool_lists = codes["tools_used"]
    tools = np.array([float(len(set(t))) for t in tool_lists[1]])[tool_lists[0]]
    # numpy reads None as nan; a time is never nan (JSON has none, a text's is whole seconds)
    created = np.array(batch.created, "<f8").reshape(n)
    key, judged = _label_hashes(batch, created, outcome, score, codes)
    columns["created"], columns["timed"] = created.tobytes(), (~np.isnan(created)).tobytes()
    columns["score"], columns["scored"] = score.tobytes(), scored.tobytes()
    # a label's score: the record's where a score decided it (nan and 0 elsewhere)
    with_score = labelled & scored
    columns["label_score"] = np.where(with_score, score, np.nan).astype("<f8").tobytes()
    columns["label_scored"] = with_score.tobytes()
    success = np.where(labelled, outcome == _OUTCOME["success"], -1).astype(np.int8)
    parent_ids = list(chain.from_iterable(batch.parent_ids))
    id_key = record_id_hashes(batch.trajectory_id)
    return RecordBlock(
        trajectory_id=list(batch.trajectory_id),
        generation=_int64s(batch.generation),
        parent_ids=parent_ids,
        parent_hash=_int64s(_parent_hashes(parent_ids, batch.trajectory_id, id_key)),
        parent_counts=np.fromiter(map(len, batch.parent_ids), "<i4", n).tobytes(),
        own=_own_columns(batch, tools, codes["modified_files"]).tobytes(),
        success=success.tobytes(),
        outcome=outcome.tobytes(),
        key=key.astype("<i8").tobytes(),
        id_key=_int64s(id_key),
        judged=judged,
        rejected=[],
        **columns,
    )


def _coded(column: Sequence[_H]) -> tuple[np.ndarray, list[_H]]:
    """Each value's code (intp) into the column's distinct values, in first-seen order:
    ``BlockWriter``'s ``index.setdefault(value, len(index))``, a distinct value at a time."""
    index = {value: code for code, value in enumerate(dict.fromkeys(column))}
    return np.fromiter(map(index.__getitem__, column), np.intp, len(column)), list(index)


def _parent_hashes(parent_ids: list[str], ids: list[str], id_key: np.ndarray) -> list[int]:
    """``schema.record_id_hash`` of each parent id. A parent is mostly a record of the
    same file: its hash is looked up among the records' own (``id_key``), and only the
    others are worked out (a blake2b each)."""
    known: dict[str, int] = dict(zip(ids, id_key.tolist(), strict=True))
    hashes = [known.get(p) for p in parent_ids]
    missing = [p for p, h in zip(parent_ids, hashes, strict=True) if h is None]
    found = iter(record_id_hashes(missing).tolist())
    return [next(found) if h is None else h for h in hashes]


def _label_hashes(
    batch: Batch,
    created: np.ndarray,
    outcome: np.ndarray,
    score: np.ndarray,
    coded: dict[str, _Coded],
) -> tuple[np.ndarray, bytes]:
    """``schema.labelled_hash`` (int64, 0 without a label) and the judged digest (8 zero
    bytes without a label) of each record, ``created`` its time (float64, nan: None),
    ``outcome`` its label's (-1: none)."""
    n = len(outcome)
    labelled = outcome >= 0
    rows = np.flatnonzero(labelled)
    key = np.zeros(n, np.int64)
    judged = np.zeros((n, 8), np.uint8)
    if not len(rows):
        return key, judged.tobytes()
    keep = labelled.tolist()
    every = len(rows) == n
    texts = _hash_texts(batch, created, outcome, score, coded)
    b2 = _blake2b  # schema.record_id_hash of each text, with no call of it each
    digests = [b2(text.encode(), digest_size=8).digest()
               for text in (texts if every else compress(texts, keep))]  # fmt: skip
    key[rows] = np.frombuffer(b"".join(digests), ">i8")
    ids = batch.trajectory_id if every else list(compress(batch.trajectory_id, keep))
    # schema.judged_id of each, every key's hex written at once (judged_ids_of)
    digests = [b2(text.encode(), digest_size=8).digest()
               for text in judged_ids_of(ids, key[rows])]  # fmt: skip
    judged[rows] = np.frombuffer(b"".join(digests), np.uint8).reshape(-1, 8)
    return key, judged.tobytes()


def _hash_texts(
    batch: Batch,
    created: np.ndarray,
    outcome: np.ndarray,
    score: np.ndarray,
    coded: dict[str, _Coded],
) -> list[str]:
    """The text ``schema.labelled_hash`` hashes, of each record: its id, its label and
    ``repr(AttemptInput(...))``, written from the columns without making the object
    (``test_batch_block.py`` holds the hashes to the per-record ones, and
    ``test_record_hash_pinned.py`` to 8cf75976's). A record without a label (outcome -1)
    gets a text too, never hashed: writing every record's costs less than picking the
    labelled ones out of eight columns first. A change's repr is :func:`text_repr`'s; a
    coded column's values (``coded``: codes and distinct values: agents, operators,
    tools, patterns, files) have their reprs made once a distinct value. (Coding the
    strategies and diagnoses too cost more than their reprs: a dict hashes each text.)"""

    def reprs(name: str) -> list[str]:
        codes, distinct = coded[name]
        text = [repr(value) for value in distinct]
        return list(map(text.__getitem__, codes.tolist()))

    # derive_label's Label: success, score (the record's where it decided, else None),
    # outcome; -1 (no label) takes the last, a placeholder
    heads = list(map(_LABEL_HEADS.__getitem__, outcome.tolist()))
    # Each float's own repr (tolist's Python floats; nan stands for None in both): not
    # coded, as 0.0 and -0.0 are one key of a dict and two reprs
    scores = [repr(s) if s == s else "None" for s in score.tolist()]
    times = [repr(t) if t == t else "None" for t in created.tolist()]
    # text_repr inlined for the changes (nearly every one distinct and long; no call each)
    escape = "unicode_escape"
    changes = [
        f"'{c.encode(escape).decode('ascii')}'" if c.isascii() and "'" not in c
        else text_repr(c) for c in batch.code_changes
    ]  # fmt: skip
    return [
        f"{tid}\x00{head[0]}\x00{score_text}\x00{head[1]}\x00"
        f"AttemptInput(trajectory_id={tid!r}, agent={agent}, created={time}, "
        f"operator={operator}, generation={generation!r}, parent_ids={parents!r}, "
        f"code_changes={change}, modified_files={files}, "
        f"proposed_strategy={strategy!r}, problem_diagnosis={diagnosis!r}, "
        f"tools_used={tools}, reasoning_pattern={pattern})"
        for (
            tid, generation, parents, change, strategy, diagnosis, time, head, score_text,
            agent, operator, tools, pattern, files,
        ) in zip(
            batch.trajectory_id, batch.generation, batch.parent_ids, changes,
            batch.proposed_strategy, batch.problem_diagnosis, times, heads, scores,
            *map(reprs, _CODED_NAMES), strict=True,
        )
    ]  # fmt: skip


def text_repr(text: str) -> str:
    """``repr(text)``, the same characters. An ASCII text's repr is its ``unicode_escape``
    encoding between quotes (both escape \\, \\t, \\n, \\r as such and every other
    control character as \\xNN, and leave the quotes alone; one C pass, no check of
    what is printable: 25,000 generated diffs in 38 ms against repr's 48): repr's single
    quotes where the text has none, its double quotes where it has single ones and no
    double; anything else (both quotes, a character that is not ASCII, which repr keeps
    or escapes by whether it is printable) is repr's own.

    >>> text_repr("it's\\n") == repr("it's\\n"), text_repr("a\\tb")
    (True, "'a\\\\tb'")
    """
    if text.isascii():
        if "'" not in text:
            return f"'{text.encode('unicode_escape').decode('ascii')}'"
        if '"' not in text:
            return f'"{text.encode("unicode_escape").decode("ascii")}"'
    return repr(text)


_Coded = tuple[np.ndarray, list[Any]]  # a column's codes (intp), and its distinct values
_CODED_NAMES = ("agent", "operator", "tools_used", "reasoning_pattern", "modified_files")
# Label's success and outcome words in a hash text, by outcome index
_LABEL_HEADS = [*((str(name == "success"), name) for name in OUTCOMES), ("", "")]
_blake2b = hashlib.blake2b


def _own_columns(batch: Batch, tools: np.ndarray, files: _Coded) -> np.ndarray:
    """``file_records.own_numbers`` of every record, as an (n, 15) little-endian float64
    array, a feature at a time (``tools``: each one's distinct tools, as a float;
    ``files``: the files column's codes and distinct lists): each ``math.log1p`` of a
    count made once a distinct count (the same calls, so the same bits), word counts once
    a distinct text, a file list's counts and kinds once a distinct list."""
    diffs = batch.code_changes
    n = len(diffs)
    listed, lists = files  # each record's code, and each distinct list
    kinds = [kind[listed] for kind in _file_kinds(lists)]
    shares, hunks, breaks = _change_counts(diffs)
    sizes = _lengths(diffs)
    columns = (
        _log1p_of(np.array(batch.generation, np.int64).reshape(n)),
        _lengths(batch.parent_ids).astype(np.float64),
        _log1p_of(np.where(sizes > 0, breaks + 1, 0)),
        _log1p_of(sizes),
        _log1p_of(_lengths(lists)[listed]),
        _log1p_of(_word_counts(batch.proposed_strategy)),
        _log1p_of(_word_counts(batch.problem_diagnosis)),
        tools,
        shares,
        _log1p_of(hunks),
        _log1p_of(np.fromiter(map(len, map(set, lists)), np.int64, len(lists))[listed]),
        *kinds,
    )
    assert len(columns) == len(OWN_FEATURES)
    own = np.empty((n, len(OWN_FEATURES)), "<f8")
    for at, column in enumerate(columns):
        own[:, at] = column
    return own


def _lengths(column: Sequence[Any]) -> np.ndarray:
    return np.fromiter(map(len, column), np.int64, len(column))


def _word_counts(texts: list[str]) -> np.ndarray:
    """``len(text.split())`` of each text, split once a distinct text (they repeat)."""
    words = {text: len(text.split()) for text in dict.fromkeys(texts)}
    return np.fromiter(map(words.__getitem__, texts), np.int64, len(texts))


def _file_kinds(files: list[tuple[str, ...]]) -> list[np.ndarray]:
    """Of each record's files, whether one is a test, configuration, docs, other code
    (1.0 or 0.0 each, in ``_KINDS``' order): ``file_records._kind`` once a distinct name."""
    names = list(chain.from_iterable(files))
    kind = {name: _KINDS.index(_kind(name)) for name in dict.fromkeys(names)}
    kinds = np.fromiter(map(kind.__getitem__, names), np.int64, len(names))
    owner = np.repeat(np.arange(len(files)), _lengths(files))
    return [
        (np.bincount(owner[kinds == at], minlength=len(files)) > 0).astype(np.float64)
        for at in range(len(_KINDS))
    ]


def _log1p_of(counts: np.ndarray) -> np.ndarray:
    """``math.log1p`` of each count (whole numbers), called once a distinct count: the
    same function on the same values as a record at a time, so the same bits."""
    if not len(counts):
        return np.zeros(0)
    low, top = int(counts.min()), int(counts.max())
    if low >= 0 and top <= 4 * len(counts) + 1024:  # a table up to the largest, no sort
        seen = np.zeros(top + 1, np.bool_)
        seen[counts] = True
        table = np.zeros(top + 1)
        present = np.flatnonzero(seen)
        table[present] = [_log1p(c) for c in present.tolist()]
        return table[counts]
    distinct, at = np.unique(counts, return_inverse=True)
    return np.array([_log1p(c) for c in distinct.tolist()], np.float64)[at.reshape(-1)]


def _change_shapes(diffs: list[str]) -> tuple[list[float], list[float]]:
    """``file_records.change_shape`` of every diff: the share of added lines, and the
    hunks (:func:`_change_counts`)."""
    shares, hunks, _ = _change_counts(diffs)
    return shares.tolist(), hunks.astype(np.float64).tolist()


def _change_counts(diffs: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of every diff: ``file_records.change_shape``'s share of added lines (float64) and
    hunks, and its count of ``\n`` (int64). When every diff is ASCII with ``\n`` its only
    line break (nearly always), their line starts are found at once in
    ``"\n" + "\n".join(diffs)`` with numpy: each diff's text there starts with its own
    ``\n``, so no pattern of one runs into the next; else a diff at a time."""
    count = len(diffs)
    joined = "\n" + "\n".join(diffs)
    if not joined.isascii() or any(mark in joined for mark in _OTHER_BREAKS):
        shapes = [change_shape(diff) for diff in diffs]
        breaks = np.fromiter((diff.count("\n") for diff in diffs), np.int64, count)
        shares = np.array([s[0] for s in shapes], np.float64).reshape(count)
        return shares, np.array([s[1] for s in shapes], np.int64).reshape(count), breaks
    text = np.frombuffer(joined.encode("ascii") + b"\0\0\0", np.uint8)
    starts = np.flatnonzero(text == 10)  # every line start of every diff, \n first
    after = [text[starts + step] for step in (1, 2, 3)]
    plus, minus, at = (after[0] == ord(c) for c in "+-@")
    added = plus & ~((after[1] == ord("+")) & (after[2] == ord("+")))
    removed = minus & ~((after[1] == ord("-")) & (after[2] == ord("-")))
    hunk = at & (after[1] == ord("@"))
    # Diff i's line starts run from its own \n (at first[i]) to the next diff's: each
    # diff's count is a sum over its run of starts, found by a search a diff.
    first = np.zeros(count, np.int64)
    np.cumsum(_lengths(diffs[:-1]) + 1, out=first[1:])
    runs = np.searchsorted(starts, first)
    plus_n, minus_n, hunk_n = (
        np.add.reduceat(flags, runs, dtype=np.int64) for flags in (added, removed, hunk)
    )
    starts_n = np.diff(runs, append=len(starts))
    total = plus_n + minus_n
    # int / int as Python divides it: both exact as doubles, one rounding
    shares = np.divide(plus_n, total, out=np.full(count, 0.5), where=total > 0)
    return shares, hunk_n, starts_n - 1  # a diff's first start is its own \n
