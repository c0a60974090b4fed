"""Today's record hashes, pinned: a fixed set of records hashes to the very bits it did
at 8cf75976, whichever path of the read makes them (a batch a column at a time, a record
at a time, ``schema.labelled_hash`` of one record's objects).

Which records are held out, which validation draws and which drift samples a run takes
follow these hashes (``recipes.retrain``), and a checkpoint's fingerprint and the judged
ids hold them: a change of a single bit re-deals every pool. A faster way of working
them out must keep every one; a new hash is a new fingerprint version, and these pins
then move with it, on purpose.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from genesis_fp16_infrastructure.data import fast_records, readers
from genesis_fp16_infrastructure.data.file_records import BlockWriter, RecordBlock
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink, Recorder
from genesis_fp16_infrastructure.data.schema import labelled_hash
from genesis_fp16_infrastructure.data.sources import raw_records
from genesis_fp16_infrastructure.data.synthetic import generate_pool, generate_replay_records

# Records chosen for what a hash's text must write exactly: quotes of each kind, escapes,
# text that is not ASCII, times in every layout, no score, no label, both shapes.
_RECORDS: list[dict[str, Any]] = [
    {"trajectory_id": "plain", "agent_name": "se_darwin", "status": "success",
     "success_score": 0.9, "generation": 3, "parent_trajectories": ["p1", "plain", "p2"],
     "operator_applied": "revision", "code_changes": "@@ -1 +1 @@\n+ a\n- b",
     "modified_files": ["a.py", "tests/test_a.py", "a.py"], "proposed_strategy": "split it",
     "problem_diagnosis": "slow", "tools_used": ["grep", "sed", "grep"],
     "reasoning_pattern": "chain_of_thought", "created_at": "2025-01-06T09:00:00+00:00"},
    {"trajectory_id": "quotes'", "status": "failure", "success_score": 0.1,
     "code_changes": "it's", "proposed_strategy": 'say "x"', "problem_diagnosis": "both ' \"",
     "created_at": "2025-01-06T09:00:00Z"},
    {"trajectory_id": "escapes", "status": "partial_success", "success_score": None,
     "code_changes": "back\\slash\ttab\r\nline\x00nul\x7fdel\x1besc",
     "modified_files": ["dir\\file.py", "new\nline.md"], "created_at": "2025-01-06T09:00:00"},
    {"trajectory_id": "unicode é", "status": "success", "success_score": 0.75,
     "agent_name": "agent ✓", "code_changes": "+ naïve 漢字 😀\u2028\x85\xa0",
     "tools_used": ["ü"], "reasoning_pattern": "\u200b", "created_at": "2025-01-06T10:00:00-05:30"},
    {"trajectory_id": "times-1", "status": "success", "success_score": 1.0,
     "created_at": "2025-01-06T09:00:00.123456+01:00"},
    {"trajectory_id": "times-2", "status": "failure", "success_score": 0.0,
     "created_at": 1736154000.25},
    {"trajectory_id": "times-3", "status": "failure", "success_score": 0.29999, "created_at": 17},
    {"trajectory_id": "times-4", "status": "success", "success_score": 0.7,
     "created_at": "not a time"},
    {"trajectory_id": "times-5", "status": "success", "success_score": 0.5, "created_at": None},
    {"trajectory_id": "times-6", "status": "success", "created_at": "2024-02-29T23:59:59+14:00"},
    {"trajectory_id": "no-label", "status": "pending", "generation": 1000000000},
    {"trajectory_id": "pruned", "status": "pruned"},
    {"trajectory_id": "word-only", "status": "success", "generation": 7,
     "parent_trajectories": ["plain", "elsewhere"]},
]  # fmt: skip
_REPLAYS: list[dict[str, Any]] = [
    {"trajectory_id": "r1", "final_outcome": "success", "reward": 0.8, "agent_id": "bot",
     "task_description": "fix 'it'", "steps": [{"tool_name": "grep"}, {"tool_name": "ed"}],
     "metadata": {"generation": 2, "operator_applied": "refinement",
                  "parent_trajectories": ["plain"]}},
    {"trajectory_id": "r2", "final_outcome": "unknown"},
    {"trajectory_id": "r3", "final_outcome": "failure", "reward": None},
]  # fmt: skip

# Each labelled record's hash at 8cf75976 (int64 as 16 hex digits, two's complement)
_PINNED = {
    "plain": "8d25f34eed6e63e4",
    "quotes'": "62b4efa8ee6c7e40",
    "escapes": "6f885a8b13e2b853",
    "unicode é": "1b5e66bb01d5245d",
    "times-1": "f101f01d8a87dba1",
    "times-2": "a3f05a33ec00eca2",
    "times-3": "483e20893fd2068e",
    "times-4": "dd3ff21bbe41d433",
    "times-5": "62333ac7dd9985f4",
    "times-6": "f2fea85f3c2f8727",
    "word-only": "66d9b75a328f1002",
    "r1": "49375a2ded35c98f",
    "r3": "6a29572b63360cd3",
}
# sha256 of the read's key, id_key, judged and parent_hash bytes of 2,000 generated
# records (a pool of seed 31) and 300 replay lines (seed 32), and of their file's bytes
_GENERATED_FILE = "c5166dd8fa5863cbaf73f8df16b8cb63dd21a137caa687175ce16de7e1473204"
_GENERATED_HASHES = "075496ab5956692350954b9d9c4a071d9ee1487c7926acd67657a46425224fd4"


def _hex(key: int) -> str:
    return f"{key & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def _per_record(file: Path) -> tuple[RecordBlock, list[int]]:
    """The block a record at a time, and ``schema.labelled_hash`` of each labelled one."""
    writer = BlockWriter(keep_text=False)
    direct = []
    for _, raw, thresholds, key in raw_records(file, Recorder(QuarantineSink(None))):
        record = fast_records.decode_record(raw, thresholds, key)
        assert record is not None, raw
        writer.add(record)
        if record.label is not None:
            direct.append(labelled_hash(record.trajectory_id, record.attempt, record.label))
    return writer.block([]), direct


def _keys(block: RecordBlock) -> dict[str, str]:
    keys = np.frombuffer(block.key, "<i8").tolist()
    return {tid: _hex(k) for tid, k in zip(block.trajectory_id, keys, strict=True) if k}


@pytest.mark.parametrize("layout", ["pool.json", "list.json", "lines.jsonl"])
def test_hand_written_records_hash_as_they_did(tmp_path: Path, layout: str) -> None:
    """Every hand-written labelled record's hash is its pinned one, by the batch read, a
    record at a time and ``schema.labelled_hash``; a record without a label has none."""
    records = _RECORDS + _REPLAYS
    file = tmp_path / layout
    if layout == "pool.json":
        file.write_text(json.dumps({"trajectories": {r["trajectory_id"]: r for r in _RECORDS}}))
        records = _RECORDS
    elif layout == "list.json":
        file.write_text(json.dumps(records))
    else:
        file.write_text("".join(json.dumps(r) + "\n" for r in records))
    sink = QuarantineSink(None)
    block = readers._file_records(file, sink, None, keep_text=False)
    assert sink.count == 0
    one_by_one, direct = _per_record(file)
    pinned = {r["trajectory_id"]: _PINNED[r["trajectory_id"]] for r in records
              if r["trajectory_id"] in _PINNED}  # fmt: skip
    assert _keys(block) == pinned
    assert _keys(one_by_one) == pinned
    assert [_hex(k) for k in direct] == list(pinned.values())
    assert "no-label" not in pinned and "r2" not in pinned


def test_generated_records_hash_as_they_did(tmp_path: Path) -> None:
    """2,000 generated trajectories and 300 replay lines: the same file as at 8cf75976
    (else the generator moved, not the hash), and the same ids, hashes, judged digests
    and parents' hashes, by the batch read and a record at a time."""
    pool = generate_pool(2000, seed=31)
    lines = [*pool["trajectories"].values(), *generate_replay_records(300, seed=32)]
    file = tmp_path / "mixed.jsonl"
    file.write_bytes("".join(json.dumps(r) + "\n" for r in lines).encode())
    assert hashlib.sha256(file.read_bytes()).hexdigest() == _GENERATED_FILE
    block = readers._file_records(file, QuarantineSink(None), None, keep_text=False)
    one_by_one, _ = _per_record(file)
    for made in (block, one_by_one):
        digest = hashlib.sha256()
        for name in ("key", "id_key", "judged", "parent_hash"):
            digest.update(getattr(made, name))
        assert digest.hexdigest() == _GENERATED_HASHES
