"""Readers for trajectory pools and replay buffers: shapes, gzip, quarantine, duplicates."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from genesis_fp16_infrastructure.data import sources
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink, new_quarantine_file
from genesis_fp16_infrastructure.data.readers import (
    DataTooLarge,
    list_data_files,
    read_trajectories,
)
from genesis_fp16_infrastructure.data.schema import derive_label
from genesis_fp16_infrastructure.data.sources import Source
from genesis_fp16_infrastructure.data.synthetic import (
    generate_pool,
    write_pool,
    write_replay_buffer,
)
from genesis_fp16_infrastructure.errors import DataError


def _pool(records: dict[str, dict[str, Any]], **header: Any) -> dict[str, Any]:
    return {
        "agent_name": "se_darwin",
        "max_trajectories": 100,
        "success_threshold": 0.7,
        "failure_threshold": 0.3,
        "total_added": len(records),
        "total_pruned": 0,
        "saved_at": "2025-01-01T00:00:00",
        "trajectories": records,
        **header,
    }


def _write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def _record(trajectory_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "trajectory_id": trajectory_id,
        "operator_applied": "revision",
        "status": "success",
        "success_score": 0.9,
        **fields,
    }


def test_reads_a_generated_pool_with_every_finished_record(tmp_path: Path) -> None:
    """A pool file gives one example per finished record, none for pending or executing."""
    pool = generate_pool(300, seed=3)
    path = write_pool(tmp_path, 300, seed=3)
    result = read_trajectories(path)
    records = pool["trajectories"].values()
    unfinished = sum(1 for r in records if r["status"] in ("pending", "executing"))
    assert unfinished > 0
    assert len(result.examples) == 300 - unfinished
    assert result.unlabelled == unfinished
    assert result.quarantined == 0 and result.duplicates == 0
    ids = {e.trajectory_id for e in result.examples}
    assert not any(r["trajectory_id"] in ids for r in records if r["status"] == "pending")


def test_score_decides_over_a_disagreeing_status(tmp_path: Path) -> None:
    """status=failure with score 0.68 is partial; the status word decides only without a score."""
    path = _write(
        tmp_path / "pool.json",
        _pool(
            {
                "a": _record("a", status="failure", success_score=0.68),
                "b": _record("b", status="success", success_score=0.1),
                "c": _record("c", status="partial_success", success_score=None),
                "d": _record("d", status="pruned", success_score=None),
                "e": _record("e", status="pruned", success_score=0.05),
            }
        ),
    )
    labels = {e.trajectory_id: e.label for e in read_trajectories(path).examples}
    assert labels["a"].outcome == "partial" and not labels["a"].success
    assert labels["b"].outcome == "failure" and labels["b"].score == 0.1
    assert labels["c"].outcome == "partial" and labels["c"].score is None
    assert "d" not in labels
    assert labels["e"].outcome == "failure"


def test_pool_thresholds_come_from_the_file(tmp_path: Path) -> None:
    """A pool with success_threshold 0.6 labels a 0.65 score a success."""
    path = _write(
        tmp_path / "pool.json",
        _pool({"a": _record("a", success_score=0.65)}, success_threshold=0.6),
    )
    assert read_trajectories(path).examples[0].label.success
    assert derive_label("success", 0.65) is not None
    assert not derive_label("success", 0.65).success  # type: ignore[union-attr]


def test_reads_replay_buffer_lines(tmp_path: Path) -> None:
    """Replay-buffer JSONL records become examples labelled by reward, tools from steps."""
    path = write_replay_buffer(tmp_path / "replay.jsonl", 120, seed=1)
    pool = generate_pool(120, seed=1)["trajectories"]
    result = read_trajectories(path)
    scored = [r for r in pool.values() if r.get("success_score") is not None]
    assert len(result.examples) == len(scored)
    first = next(e for e in result.examples if e.trajectory_id == scored[0]["trajectory_id"])
    assert first.label.score == scored[0]["success_score"]
    assert first.attempt.tools_used == tuple(scored[0]["tools_used"])
    assert first.attempt.operator == scored[0]["operator_applied"]


def test_gzip_of_both_shapes_reads_like_plain(tmp_path: Path) -> None:
    """.json.gz and .jsonl.gz give the same examples as the plain files."""
    plain_pool = write_pool(tmp_path / "plain", 80, seed=2)
    plain_replay = write_replay_buffer(tmp_path / "plain" / "r.jsonl", 80, seed=4)
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    for source, name in ((plain_pool, "pool.json.gz"), (plain_replay, "r.jsonl.gz")):
        with gzip.open(zipped / name, "wb") as handle:
            handle.write(source.read_bytes())
    plain = read_trajectories(tmp_path / "plain")
    packed = read_trajectories(zipped)
    assert sorted(e.trajectory_id for e in plain.examples) == sorted(
        e.trajectory_id for e in packed.examples
    )
    assert len(packed.examples) > 80  # both shapes were read


def test_malformed_records_are_quarantined_with_reasons(tmp_path: Path) -> None:
    """Bad records, lines and files are skipped, counted and written with a reason."""
    _write(
        tmp_path / "data" / "pool.json",
        _pool(
            {
                "good": _record("good"),
                "score": _record("score", success_score=1.5),
                "op": _record("op", operator_applied="mutation"),
                "list": [1, 2, 3],  # type: ignore[dict-item]
            }
        ),
    )
    bad_generation = json.dumps(_record("g2", generation=-1))
    lines = [json.dumps(_record("line-good")), "{not json", bad_generation]
    (tmp_path / "data" / "more.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "data" / "broken.json.gz").write_bytes(b"this is not gzip")
    (tmp_path / "data" / "latin.json").write_bytes(b'{"trajectory_id": "\xff"}')
    quarantine = tmp_path / "out" / "quarantine.jsonl"
    result = read_trajectories(tmp_path / "data", quarantine=quarantine)
    assert sorted(e.trajectory_id for e in result.examples) == ["good", "line-good"]
    assert result.quarantined == 7
    entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert len(entries) == 7
    reasons = " | ".join(e["reason"] for e in entries)
    for fragment in ("success_score", "operator_applied", "not an object", "invalid JSON"):
        assert fragment in reasons
    assert all(e["source"] and e["where"] for e in entries)


def test_duplicate_ids_are_read_once(tmp_path: Path) -> None:
    """The same trajectory_id in two files is read once, the first file in sorted order."""
    _write(tmp_path / "a.json", _pool({"x": _record("x", success_score=0.9)}))
    _write(tmp_path / "b.json", [_record("x", success_score=0.1), _record("y")])
    result = read_trajectories(tmp_path)
    assert [e.trajectory_id for e in result.examples] == ["x", "y"]
    assert result.examples[0].label.score == 0.9
    assert result.duplicates == 1


def test_pending_parents_resolve_but_are_not_labels(tmp_path: Path) -> None:
    """A pending record gives no example; its children still read their other parents' scores."""
    records = {
        "p": _record("p", status="pending", success_score=None),
        "q": _record("q", success_score=0.8),
        "child": _record("child", parent_trajectories=["p", "q"]),
    }
    result = read_trajectories(_write(tmp_path / "pool.json", _pool(records)))
    assert {e.trajectory_id for e in result.examples} == {"q", "child"}
    assert result.pool.scores == {"q": 0.8, "child": 0.9}
    assert result.unlabelled == 1


def test_missing_path_and_nothing_labelled_are_errors(tmp_path: Path) -> None:
    """A missing path, an empty folder or only pending records raise DataError naming the path."""
    with pytest.raises(DataError, match="does not exist"):
        read_trajectories(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no data files"):
        read_trajectories(tmp_path / "empty")
    only_pending = _pool({"p": _record("p", status="pending", success_score=None)})
    with pytest.raises(DataError, match="no labelled records"):
        read_trajectories(_write(tmp_path / "pending.json", only_pending))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc/self/mem")
def test_unreadable_file_is_an_error() -> None:
    """A file the process cannot read raises DataError, not a quarantine entry."""
    with pytest.raises(DataError, match="cannot read data file"):
        read_trajectories(Path("/proc/self/mem"))


def test_hostile_inputs_are_quarantined_not_crashes(tmp_path: Path) -> None:
    """A 10**400 generation, a 5,000-digit integer and 100k levels of nesting: each is one
    quarantined record or file with its reason, and the good records still train."""
    folder = tmp_path / "data"
    _write(folder / "good.json", _pool({"ok": _record("ok")}))
    _write(folder / "huge_generation.json", _pool({"big": _record("big", generation=10**400)}))
    (folder / "long_int.jsonl").write_text(
        json.dumps(_record("fine"))
        + "\n"
        + '{"trajectory_id": "x", "generation": '
        + "9" * 5000
        + "}\n"
    )
    (folder / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    quarantine = tmp_path / "q.jsonl"
    result = read_trajectories(folder, quarantine=quarantine)
    assert sorted(e.trajectory_id for e in result.examples) == ["fine", "ok"]
    reasons = [json.loads(line)["reason"] for line in quarantine.read_text().splitlines()]
    assert result.quarantined == 3 and len(reasons) == 3
    assert any("generation" in r for r in reasons)
    assert any("digits" in r for r in reasons)
    assert any("nested too deeply" in r for r in reasons)


def test_a_gzip_bomb_is_quarantined_without_inflating_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A .json.gz that inflates past the limit is quarantined; the limit bounds the memory."""
    import genesis_fp16_infrastructure.data.sources as sources

    monkeypatch.setattr(sources, "MAX_DECOMPRESSED_BYTES", 2**20)
    folder = tmp_path / "data"
    _write(folder / "good.json", _pool({"ok": _record("ok")}))
    with gzip.open(folder / "bomb.json.gz", "wb") as handle:
        handle.write(b" " * (8 * 2**20))  # 8 MiB of blanks: a few KiB compressed
    assert (folder / "bomb.json.gz").stat().st_size < 64 * 1024
    quarantine = tmp_path / "q.jsonl"
    result = read_trajectories(folder, quarantine=quarantine)
    assert [e.trajectory_id for e in result.examples] == ["ok"]
    assert result.quarantined == 1
    assert "decompresses to more than 1 MiB" in quarantine.read_text()


def test_a_file_that_vanishes_mid_read_is_quarantined_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer removes a file after the folder was listed: that file is one quarantine
    entry saying so, and every other file is still read (it used to abort the read)."""
    import genesis_fp16_infrastructure.data.readers as readers

    folder = tmp_path / "data"
    _write(folder / "a.json", _pool({"a": _record("a")}))
    (folder / "b.jsonl").write_text(json.dumps(_record("b")) + "\n")
    _write(folder / "c.json", _pool({"c": _record("c")}))
    listed = readers.list_data_files

    def listed_then_rotated(path: Path) -> list[Path]:
        files = listed(path)
        (folder / "b.jsonl").unlink()
        (folder / "c.json").unlink()
        return files

    monkeypatch.setattr(readers, "list_data_files", listed_then_rotated)
    quarantine = tmp_path / "q.jsonl"
    result = read_trajectories(folder, quarantine=quarantine)
    assert [e.trajectory_id for e in result.examples] == ["a"]
    entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert [Path(e["source"]).name for e in entries] == ["b.jsonl", "c.json"]
    assert all("vanished" in e["reason"] for e in entries)


def test_a_jsonl_line_that_is_not_utf8_is_quarantined_alone(tmp_path: Path) -> None:
    """Read a line at a time, a .jsonl file with one line of bad bytes keeps every other
    record (the whole file used to be quarantined)."""
    path = tmp_path / "pool.jsonl"
    line = [json.dumps(_record(f"r{i}")).encode() + b"\n" for i in range(4)]
    path.write_bytes(line[0] + line[1] + b'{"trajectory_id": "\xff\xfe"}\n' + line[2] + line[3])
    quarantine = tmp_path / "q.jsonl"
    result = read_trajectories(path, quarantine=quarantine)
    assert sorted(e.trajectory_id for e in result.examples) == ["r0", "r1", "r2", "r3"]
    (entry,) = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert entry["where"] == "line 3" and "not UTF-8 text (byte 0xff at" in entry["reason"]


@pytest.mark.parametrize("shape", ["jsonl", "streamed pool"])
def test_a_record_whose_key_name_is_not_utf8_is_quarantined_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    """Bytes that are not UTF-8 in a key the schema does not name (or in its value):
    msgspec skips such a field unread, so the record was kept and trained on; it is
    quarantined alone, as a line that is not UTF-8 is, and every other record kept."""
    records = [json.dumps(_record(f"r{i}")).encode() for i in range(4)]
    records[1] = records[1][:-1] + b', "note\xff\xfe": 1}'
    records[2] = records[2][:-1] + b', "extra": "\xc3("}'
    if shape == "jsonl":
        path = tmp_path / "pool.jsonl"
        path.write_bytes(b"\n".join(records) + b"\n")
        places = ["line 2", "line 3"]
    else:  # a pool large enough to be split a window at a time (sources.STREAM_ABOVE)
        monkeypatch.setattr(sources, "STREAM_ABOVE", 0)
        entries = b", ".join(b'"r%d": ' % i + raw for i, raw in enumerate(records))
        path = tmp_path / "pool.json"
        path.write_bytes(b'{"trajectories": {' + entries + b"}}")
        places = ["trajectories['r1']", "trajectories['r2']"]
    quarantine = tmp_path / "q.jsonl"
    result = read_trajectories(path, quarantine=quarantine)
    assert sorted(e.trajectory_id for e in result.examples) == ["r0", "r3"]
    entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert [e["where"] for e in entries] == places and result.quarantined == 2
    assert all("not UTF-8 text (byte 0x" in e["reason"] for e in entries)


def test_data_over_the_size_limit_is_refused_before_a_record_is_read(tmp_path: Path) -> None:
    """max_bytes: a pool larger than the limit raises DataTooLarge naming its size and the
    limit, and reads nothing (not even the malformed record it holds is quarantined)."""
    pool = generate_pool(50, seed=1)
    pool["trajectories"][next(iter(pool["trajectories"]))]["success_score"] = 7.0
    path = _write(tmp_path / "pool.json", pool)
    size = path.stat().st_size
    quarantine = tmp_path / "q.jsonl"
    with pytest.raises(
        DataTooLarge,
        match=rf"\({size:,} bytes\) in 1 file\(s\), over the limit of .*\({size - 1:,} bytes\)",
    ) as caught:
        read_trajectories(path, quarantine=quarantine, max_bytes=size - 1)
    assert (caught.value.size, caught.value.limit) == (size, size - 1)
    assert not quarantine.exists()
    assert read_trajectories(path, max_bytes=size).quarantined == 1  # at the limit: read


@pytest.mark.parametrize(
    ("name", "content", "cause"),
    [
        ("pool.json", b"x", "1 quarantined): invalid JSON at line 1 column 1: Expecting value"),
        ("pool.json", b"\x89PNG\r\n\x1a\n\0", "): binary file, not UTF-8 text (byte 0x89 at"),
        ("pool.json", b"", "1 quarantined): empty file"),
        ("pool.jsonl", b"", "0 quarantined): empty file"),
        ("pool.json", b'{"trajectories": {"a": {"trajectory_id"', "): truncated: the JSON ends"),
        ("pool.jsonl", b'{"trajectory_id": "a", "st', "): line 1: truncated: the JSON ends"),
        ("pool.json", b"[]", "0 quarantined): the data holds no record"),
    ],
)
def test_nothing_to_train_on_names_the_cause_and_the_quarantine_file(
    tmp_path: Path, name: str, content: bytes, cause: str
) -> None:
    """Invalid JSON, a binary, empty or truncated file: the error says which, and names
    the quarantine file when a record went there (no file when none did)."""
    (tmp_path / name).write_bytes(content)
    quarantine = tmp_path / "q" / "run.jsonl"
    with pytest.raises(DataError) as raised:
        read_trajectories(tmp_path / name, quarantine)
    message = str(raised.value)
    assert cause in message
    assert message.endswith(f"; every reason in {quarantine}") == quarantine.exists()
    assert "\n" not in message


def test_a_folder_names_the_file_of_each_reason(tmp_path: Path) -> None:
    """In a folder, the first two reasons name their files, and how many more there are."""
    for name in ("a.json", "b.json", "c.json"):
        (tmp_path / name).write_text("{")
    with pytest.raises(DataError) as raised:
        read_trajectories(tmp_path)
    assert "a.json: truncated" in str(raised.value) and "b.json: truncated" in str(raised.value)
    assert str(raised.value).endswith("(+1 more)")


def test_the_quarantine_folder_keeps_the_newest_runs_within_its_bounds(tmp_path: Path) -> None:
    """Each run gets a new file; the oldest go past the count or the bytes, never the newest."""
    folder = tmp_path / "quarantine"
    names = []
    for run in range(6):
        path = new_quarantine_file(folder, keep_files=4, keep_bytes=10_000)
        assert not path.exists() and path not in names
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * (3000 if run == 4 else 100))
        names.append(path)
    assert sorted(folder.iterdir()) == names[2:]
    new_quarantine_file(folder, keep_files=20, keep_bytes=3_150)  # 5 and 4 hold 3,100
    assert sorted(folder.iterdir()) == names[4:]


def test_a_quarantine_file_past_its_bytes_counts_the_rest(tmp_path: Path) -> None:
    """Past max_bytes, entries are counted, not written, and one closing entry says how many."""
    sink = QuarantineSink(tmp_path / "q.jsonl", max_bytes=1000)
    for index in range(50):
        sink.add(Source(tmp_path / "x.jsonl", f"line {index}"), "invalid JSON", "{" * 100)
    sink.close()
    entries = [json.loads(line) for line in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert sink.count == 50 and 1 < len(entries) < 50
    assert entries[-1]["reason"].startswith(f"{51 - len(entries)} more quarantined records")


def test_a_folder_lists_data_files_and_leaves_partial_writes_and_dot_folders_alone(
    tmp_path: Path,
) -> None:
    """Every .json, .jsonl, .json.gz and .jsonl.gz at any depth is a data file; a dotfile,
    anything under a dot-folder and a partial write's name (.tmp, .part, ~) are not."""
    names = ["a.json", "b.jsonl", "c.json.gz", "sub/d.jsonl.gz", "sub/deeper/e.json"]
    ignored = [".generated", ".f.json", ".staging/g.json", "sub/.hidden/h.jsonl"]
    ignored += ["i.json.tmp", "j.jsonl.part", "k.json~", "notes.txt"]
    for name in names + ignored:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    listed = [p.relative_to(tmp_path).as_posix() for p in list_data_files(tmp_path)]
    assert listed == sorted(names)
