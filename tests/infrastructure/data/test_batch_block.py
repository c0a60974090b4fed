"""A batch of decoded records written a column at a time (``data.batch_block``, the
read's path since issue 90) makes the very block the per-record writer makes; and a file
read through it reads as before, its bad records quarantined where they lie."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import genesis_fp16_infrastructure.data.batch_block as batch_block
import genesis_fp16_infrastructure.data.fast_records as fast_records
import genesis_fp16_infrastructure.data.readers as readers
from genesis_fp16_infrastructure.data.file_records import BlockWriter, RecordBlock, change_shape
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink, Recorder
from genesis_fp16_infrastructure.data.sources import raw_records
from genesis_fp16_infrastructure.data.synthetic import generate_pool, generate_replay_records

_TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from("'\"\\\n\r\t\x00\x7f"), max_size=12)
_NAMES = st.lists(_TEXT, max_size=3)
# Each field a record may carry, with values of every kind the fast path vouches for.
_FIELD = {
    "agent_name": _TEXT,
    "generation": st.integers(0, 10**9),
    # a record among its own parents (dropped), a parent in the batch or not, an empty one
    "parent_trajectories": st.lists(st.sampled_from(["t0", "t1", "t2", "p", ""]), max_size=3)
    | st.lists(_TEXT, max_size=2),
    "operator_applied": st.sampled_from(["baseline", "revision", "recombination", "refinement"]),
    "code_changes": _TEXT | st.sampled_from(["@@ -1 +1 @@\n+ a\n- b", "+++ x\n--- y\n+z"]),
    "problem_diagnosis": _TEXT,
    "proposed_strategy": _TEXT,
    "status": st.sampled_from(
        ["pending", "executing", "success", "partial_success", "failure", "pruned"]
    ),
    "success_score": st.none() | st.floats(0.0, 1.0),
    "tools_used": _NAMES,
    "reasoning_pattern": _TEXT,
    "modified_files": st.lists(
        st.sampled_from(["a.py", "tests/test_a.py", "c.yaml", "R.md"]) | _TEXT, max_size=4
    ),
    "created_at": st.none() | st.floats(0, 2e9) | st.sampled_from(["2025-01-06T09:00:00", "x"]),
}  # fmt: skip
_TRAJECTORY = st.fixed_dictionaries(
    {"trajectory_id": st.sampled_from(["t0", "t1", "t2"]) | _TEXT.filter(bool)},
    optional=_FIELD,
)
_METADATA = st.fixed_dictionaries(
    {},
    optional={
        "generation": st.integers(-1, 5),
        "operator_applied": _TEXT | st.just("refinement"),
        "parent_trajectories": st.lists(_TEXT, max_size=2),
    },
)
_REPLAY = st.fixed_dictionaries(
    {
        "trajectory_id": _TEXT.filter(bool),
        "final_outcome": st.sampled_from(["success", "failure", "partial", "unknown"]),
    },
    optional={
        "reward": st.none() | st.floats(0.0, 1.0),
        "agent_id": _TEXT,
        "task_description": _TEXT,
        "steps": st.lists(st.fixed_dictionaries({"tool_name": _TEXT}), max_size=3),
        "metadata": _METADATA,
    },
)  # fmt: skip


def _per_record(file: Path, keep_text: bool) -> RecordBlock:
    """The block as the reader wrote it before issue 90: a record at a time."""
    writer = BlockWriter(keep_text)
    for _, raw, thresholds, key in raw_records(file, Recorder(QuarantineSink(None))):
        record = fast_records.decode_record(raw, thresholds, key)
        assert record is not None, raw  # every record here is one the fast path reads
        writer.add(record)
    return writer.block([])


def _same(one: RecordBlock, other: RecordBlock) -> None:
    differ = [f for f in RecordBlock.__struct_fields__ if getattr(one, f) != getattr(other, f)]
    assert not differ, differ


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=st.lists(_TRAJECTORY, min_size=1, max_size=8)
    | st.lists(_TRAJECTORY | _REPLAY, min_size=1, max_size=8),
    layout=st.sampled_from(["pool", "list", "jsonl"]),
    keep_text=st.booleans(),
)
def test_a_batch_writes_the_block_a_record_at_a_time_writes(
    tmp_path: Path, records: list[dict[str, Any]], layout: str, keep_text: bool
) -> None:
    """Any mix of field values, both shapes, every layout: byte for byte the same block
    (codes, own numbers, label hashes, judged digests, parents' hashes)."""
    file = tmp_path / ("pool.jsonl" if layout == "jsonl" else "pool.json")
    if layout == "pool":
        pool = {f"k{i}": r for i, r in enumerate(records)}
        file.write_text(json.dumps({"success_threshold": 0.6, "trajectories": pool}))
    elif layout == "list":
        file.write_text(json.dumps(records))
    else:
        file.write_text("".join(json.dumps(r) + "\n" for r in records))
    sink = QuarantineSink(None)
    _same(readers._file_records(file, sink, None, keep_text), _per_record(file, keep_text))
    assert sink.count == 0


def test_generated_pools_and_replay_buffers_read_as_a_record_at_a_time(tmp_path: Path) -> None:
    """2,000 generated se_darwin records (a pool, and the same as lines) and 300 replay
    lines: the same block as the per-record writer, with and without their text."""
    pool = generate_pool(2000, seed=4)
    (tmp_path / "pool.json").write_text(json.dumps(pool))
    lines = [*pool["trajectories"].values(), *generate_replay_records(300, seed=5)]
    (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    for name in ("pool.json", "mixed.jsonl"):
        for keep_text in (False, True):
            block = readers._file_records(tmp_path / name, QuarantineSink(None), None, keep_text)
            _same(block, _per_record(tmp_path / name, keep_text))


def test_a_pool_with_bad_records_keeps_its_order_and_quarantines_each_where_it_lies(
    tmp_path: Path,
) -> None:
    """Bad records among good ones: the good ones in file order (fast and slow paths
    interleaved), each bad one quarantined with its place and pydantic's reason."""
    good = list(generate_pool(6, seed=1)["trajectories"].values())
    trajectories = {
        "a": good[0],
        "b": {**good[1], "generation": -1},  # refused by both paths
        "c": {**good[2], "generation": 3.0},  # refused by msgspec, read by pydantic
        "d": good[3],
        "e": "not a record",
        "f": good[4],
    }
    file = tmp_path / "pool.json"
    file.write_text(json.dumps({"trajectories": trajectories}))
    quarantine = tmp_path / "q.jsonl"
    sink = QuarantineSink(quarantine)
    block = readers._file_records(file, sink, None, keep_text=True)
    sink.close()
    assert block.trajectory_id == [good[i]["trajectory_id"] for i in (0, 2, 3, 4)]
    reasons = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert [(r["where"], r["reason"]) for r in reasons] == [
        ("trajectories['b']", "generation: Input should be greater than or equal to 0"),
        ("trajectories['e']", "record is a JSON str, not an object"),
    ]


_PIECES = ["\n", "+", "-", "@", " ", "a", "+++", "---", "@@", "\n@@", "\n+++", "\r", "é"]
_DIFF = st.lists(st.sampled_from(_PIECES), max_size=12).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(_DIFF, max_size=6))
def test_a_batch_of_diffs_has_the_change_shapes_of_each_diff(diffs: list[str]) -> None:
    """The shapes found at once in the joined diffs are ``change_shape``'s, diff by diff
    (added share and hunks; a line start never runs into the next diff; no diff, none)."""
    shares, hunks = batch_block._change_shapes(diffs)
    assert list(zip(shares, hunks, strict=True)) == [change_shape(diff) for diff in diffs]


def test_lines_that_are_not_json_alone_are_never_read_together(tmp_path: Path) -> None:
    """Two .jsonl lines that would join into two valid records in a list ("[" + lines
    joined by "," + "]", as many values as lines) are each quarantined, as a line at a
    time reads them."""
    good = json.dumps({"trajectory_id": "g", "status": "success", "success_score": 0.9})
    file = tmp_path / "pool.jsonl"
    halves = '{"trajectory_id": "a", "tools_used": ["x"\n"y"]}, {"trajectory_id": "b"}'
    file.write_text(f"{good}\n{halves}\n{good}\n")
    sink = QuarantineSink(tmp_path / "q.jsonl")
    block = readers._file_records(file, sink, None, keep_text=True)
    sink.close()
    assert block.trajectory_id == ["g", "g"] and sink.count == 2


def test_a_record_without_an_id_under_an_empty_key_is_read_alone(tmp_path: Path) -> None:
    """A pool's batch holding a record with no id under the key "" is read a record at a
    time: the others kept in order, that one quarantined with pydantic's reason."""
    records = list(generate_pool(3, seed=2)["trajectories"].values())
    pool = {"x": records[0], "": {"status": "success"}, "y": records[1]}
    file = tmp_path / "pool.json"
    file.write_text(json.dumps({"trajectories": pool}))
    sink = QuarantineSink(tmp_path / "q.jsonl")
    block = readers._file_records(file, sink, None, keep_text=True)
    sink.close()
    assert block.trajectory_id == [records[0]["trajectory_id"], records[1]["trajectory_id"]]
    (entry,) = [json.loads(line) for line in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert entry["where"] == "trajectories['']" and entry["reason"].startswith("trajectory_id:")


@settings(max_examples=500, deadline=None)
@given(
    st.text(st.characters(codec="utf-8") | st.sampled_from("'\"\\\n\r\t\x00\x1b\x7f"))
    | st.text(st.characters(max_codepoint=127))
)
def test_a_texts_repr_is_reprs_own(text: str) -> None:
    """``text_repr`` (an ASCII text's unicode_escape between quotes) writes exactly
    ``repr``: every ASCII character, either quote or both, text that is not ASCII."""
    assert batch_block.text_repr(text) == repr(text)


def test_every_ascii_character_and_quote_mix_reprs_as_repr() -> None:
    """Each of the 128 ASCII characters alone and beside each kind of quote."""
    for code in range(128):
        for around in ("", "'", '"', "'\""):
            text = f"a{chr(code)}{around}"
            assert batch_block.text_repr(text) == repr(text), text
