"""The read's fast path (msgspec) accepts only what the slow one (json + pydantic) accepts,
with the same values, and a read through it equals a read without it, quarantine included."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import genesis_fp16_infrastructure.data.file_blocks as file_blocks
import genesis_fp16_infrastructure.data.readers as readers
import genesis_fp16_infrastructure.data.sources as sources
from genesis_fp16_infrastructure.data.fast_records import decode_record
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool, generate_replay_records

_BASE = {"trajectory_id": "t", "operator_applied": "revision", "status": "success"}
# Each is one record the slow path reads; the fast path must agree or step aside.
EDGE_RECORDS: list[dict[str, Any]] = [
    {**_BASE, "success_score": 0.9},
    {**_BASE, "success_score": 1},  # an int where a float is declared
    {**_BASE, "generation": 3.0},  # pydantic takes a whole float for an int
    {**_BASE, "generation": True},
    {**_BASE, "generation": -1},
    {**_BASE, "success_score": 1.5},
    {**_BASE, "operator_applied": "mutation"},
    {**_BASE, "operator_applied": None},
    {**_BASE, "trajectory_id": ""},
    {"operator_applied": "revision", "status": "failure"},  # no id: the pool's key
    {**_BASE, "parent_trajectories": ["t", "p"], "created_at": "2025-01-06T09:00:00"},
    {**_BASE, "created_at": 1736154000},
    {**_BASE, "created_at": "yesterday"},
    {**_BASE, "tools_used": "grep"},
    {**_BASE, "key_insights": 5},  # validated though never a feature
    {**_BASE, "test_results": {"tasks_total": -1}},
    {**_BASE, "metrics": {"accuracy": "high"}},
    {**_BASE, "status": "pruned"},
    {**_BASE, "status": "executing", "success_score": 0.2},
    {**_BASE, "reward": "lots"},  # a trajectory: reward is an unknown field there
    {**_BASE, "unknown_field": {"deep": [1, 2]}},
    {"trajectory_id": "r", "final_outcome": "success", "steps": [{"tool_name": "a"}]},
    {"trajectory_id": "r", "reward": None, "final_outcome": "unknown"},
    {"trajectory_id": "r", "reward": 0.5, "agent_id": "x", "metadata": {"generation": 4}},
    {"trajectory_id": "r", "agent_id": "x", "metadata": {"generation": "4", "operator": 1}},
    {
        "trajectory_id": "r",
        "task_description": "fix",
        "steps": [{"tool_name": "b"}, {"tool_name": "a"}, {"tool_name": "b"}],
        "metadata": {"operator_applied": "refinement", "parent_trajectories": ["r", "q"]},
    },
    {"trajectory_id": "r", "steps": [{"tool_args": 3}]},
    {"trajectory_id": "r", "final_outcome": "maybe"},
    {"final_outcome": "success", "agent_id": "x"},  # a replay record named by its key
]


def _slow(raw: dict[str, Any], key: str | None) -> Any:
    source = readers.Source(Path("x.json"), "item")
    if key is not None and "trajectory_id" not in raw:
        raw = {**raw, "trajectory_id": key}
    sink = QuarantineSink(None)
    return file_blocks._validate(source, raw, (0.7, 0.3), sink)


@pytest.mark.parametrize("raw", EDGE_RECORDS, ids=range(len(EDGE_RECORDS)))
def test_the_fast_path_accepts_only_what_the_slow_path_accepts_with_its_values(
    raw: dict[str, Any],
) -> None:
    """For each edge record: the fast path steps aside (None), or its record is exactly
    the slow path's; never a record the slow path quarantines."""
    fast = decode_record(json.dumps(raw).encode(), (0.7, 0.3), key="k")
    slow = _slow(raw, "k")
    if fast is not None:
        assert slow is not None, f"the fast path accepted what pydantic refuses: {raw}"
        assert (fast.trajectory_id, fast.attempt, fast.label, fast.score) == (
            slow.trajectory_id,
            slow.attempt,
            slow.label,
            slow.score,
        )


def test_the_fast_path_reads_generated_records_itself() -> None:
    """Generated trajectories and replay lines all take the fast path (else it is no path)."""
    records = [*generate_pool(200, seed=1)["trajectories"].values()]
    records += generate_replay_records(100, seed=2)
    for raw in records:
        fast = decode_record(json.dumps(raw).encode(), (0.7, 0.3))
        assert fast is not None, raw
        slow = _slow(raw, None)
        assert slow is not None
        assert (fast.attempt, fast.label, fast.score) == (slow.attempt, slow.label, slow.score)


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    pool = generate_pool(300, seed=5)
    items = list(pool["trajectories"].values())
    for i, bad in enumerate(EDGE_RECORDS):
        pool["trajectories"][f"edge{i}"] = bad
    (folder / "pool.json").write_text(json.dumps(pool))
    (folder / "list.json").write_text(json.dumps([*items[:20], 7, "x"]))
    lines = [json.dumps(r) for r in generate_replay_records(50, seed=6)]
    lines += ['{"trajectory_id": "nan", "reward": NaN}', "not json", "[1]"]
    (folder / "buffer.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "z.jsonl").write_bytes(b'{"trajectory_id": "\xff"}\n' + lines[0].encode() + b"\n")
    with gzip.open(folder / "g.jsonl.gz", "wt") as handle:
        handle.write("\n".join(lines[10:20]) + "\n")
    (folder / "one.json").write_text(json.dumps({**_BASE, "trajectory_id": "solo"}))
    (folder / "broken.json").write_text('{"trajectories": {"a": ')
    (folder / "header.json").write_text(json.dumps(_pool_with_bad_header()))
    return folder


def _pool_with_bad_header() -> dict[str, Any]:
    return {"success_threshold": 2.0, "trajectories": {"h": _BASE}}


def _summary(result: ReadResult, quarantine: Path) -> Any:
    return (
        [(e.trajectory_id, e.attempt, e.label) for e in result.examples],
        result.pool.scores,
        result.pool.entries,
        (result.quarantined, result.duplicates, result.unlabelled, result.files),
        quarantine.read_text(),
    )


def _unsplit(data: bytes) -> None:
    raise ValueError("the slow path only")


def test_a_read_with_the_fast_path_equals_a_read_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every shape of file, good and bad records mixed: examples, scores, lineage, counts
    and the quarantine file word for word, with the fast path and with the slow one only."""
    folder = _folder(tmp_path)
    fast = _summary(read_trajectories(folder, tmp_path / "q1.jsonl"), tmp_path / "q1.jsonl")
    monkeypatch.setattr(file_blocks, "_vouched", lambda *args, **kwargs: None)
    monkeypatch.setattr(sources, "_split", _unsplit)
    slow = _summary(read_trajectories(folder, tmp_path / "q2.jsonl"), tmp_path / "q2.jsonl")
    assert fast[3][0] >= 10  # the bad records were there to be quarantined
    assert fast == slow
