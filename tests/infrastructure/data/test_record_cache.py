"""The per-file record cache: what a read makes of a file, kept by its bytes' digest."""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import torch

from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.contract.split import id_hashes
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data import record_cache
from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.pool_columns import Coded
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.schema import record_id_hash
from genesis_fp16_infrastructure.data.synthetic import generate_pool, write_replay_buffer
from genesis_fp16_infrastructure.judging.run import run_plugin
from genesis_fp16_infrastructure.recipes.retrain.split import judged_ids
from genesis_fp16_infrastructure.world_model.features import FeatureEncoder


def _age(folder: Path) -> None:
    """Files written a minute ago: older than RACY_NS before any scan, so cacheable."""
    for file in folder.rglob("*"):
        if file.is_file():
            past = file.stat().st_mtime_ns - 60 * 10**9
            os.utime(file, ns=(past, past))


def _pool(tmp_path: Path) -> Path:
    """A pool file, a replay buffer with a malformed line, a duplicate id across files."""
    folder = tmp_path / "pool"
    folder.mkdir()
    pool = generate_pool(400, seed=8)
    (folder / "a.json").write_text(json.dumps(pool))
    replay = write_replay_buffer(folder / "b.jsonl", 150, seed=9, agent="qa")
    first = next(iter(pool["trajectories"].values()))
    with replay.open("a") as handle:
        handle.write("{not json\n")
        handle.write(json.dumps({**first, "success_score": 0.01}) + "\n")  # a duplicate id
        handle.write(json.dumps({"trajectory_id": "", "status": "success"}) + "\n")
    _age(folder)
    return folder


def _read(folder: Path, tmp_path: Path, name: str) -> tuple[ReadResult, RecordCache, str]:
    manifest, _ = scan_files(folder)
    cache = RecordCache(tmp_path / "cache", manifest)
    quarantine = tmp_path / f"{name}.jsonl"
    data = read_trajectories(folder, quarantine, cache=cache)
    return data, cache, quarantine.read_text()


def _same(a: ReadResult, b: ReadResult) -> None:
    assert a.examples == b.examples
    # The own numbers (no part of equality) travel with the cache, worked out once.
    assert all(e.attempt.own for e in a.examples)
    assert [e.attempt.own for e in a.examples] == [e.attempt.own for e in b.examples]
    assert a.columns.key.tolist() == b.columns.key.tolist()
    # So do the id hashes the fingerprint, the split's data key and the gate ask.
    ids = b.columns.id_hash[b.columns.labelled].tolist()
    assert ids == [record_id_hash(e.trajectory_id) for e in a.examples]
    assert a.pool.scores == b.pool.scores and a.pool.entries == b.pool.entries
    counts = ("quarantined", "duplicates", "unlabelled")
    assert [getattr(a, c) for c in counts] == [getattr(b, c) for c in counts]


def test_cached_and_uncached_reads_give_the_same_records_quarantine_and_features(
    tmp_path: Path,
) -> None:
    """The second read takes every file from the cache, and its examples, pool, counts,
    quarantine file and features are the uncached read's, bit for bit."""
    folder = _pool(tmp_path)
    plain = read_trajectories(folder, tmp_path / "plain.jsonl")
    cold, cache, cold_quarantine = _read(folder, tmp_path, "cold")
    assert (cache.hits, cache.misses) == (0, 2)
    warm, cache, warm_quarantine = _read(folder, tmp_path, "warm")
    assert (cache.hits, cache.misses) == (2, 0)
    _same(plain, cold)
    _same(plain, warm)
    assert plain.quarantined == 2 and plain.duplicates == 1
    assert warm_quarantine == cold_quarantine == (tmp_path / "plain.jsonl").read_text()
    attempts = [e.attempt for e in plain.examples]
    encoder = FeatureEncoder.fit(attempts, plain.pool, [e.label.success for e in plain.examples])
    expected = encoder.encode(attempts, plain.pool).view(torch.int32)
    got = encoder.encode([e.attempt for e in warm.examples], warm.pool).view(torch.int32)
    assert torch.equal(got, expected)


def test_a_damaged_entry_is_read_again_from_its_file(tmp_path: Path) -> None:
    """An entry whose columns disagree in length, or that is not msgpack at all, is
    never served: the file is parsed again and gives the records it holds."""
    folder = _pool(tmp_path)
    plain = read_trajectories(folder)
    _read(folder, tmp_path, "cold")
    entries = sorted((tmp_path / "cache").glob("*.msgpack"))
    assert len(entries) == 2
    short = msgspec.msgpack.decode(entries[0].read_bytes()[: -record_cache.CRC_BYTES])
    short["agent"] = short["agent"][:-1]
    blob = msgspec.msgpack.encode(short)  # its CRC-32 its own: only the columns disagree
    entries[0].write_bytes(blob + zlib.crc32(blob).to_bytes(record_cache.CRC_BYTES, "little"))
    entries[1].write_bytes(b"\xc1 not msgpack")
    again, cache, _ = _read(folder, tmp_path, "again")
    assert (cache.hits, cache.misses) == (0, 2)
    _same(plain, again)


def test_a_record_edited_in_place_is_read_again(tmp_path: Path) -> None:
    """Other bytes, other digest: the edited file is parsed, the other one still cached."""
    folder = _pool(tmp_path)
    _read(folder, tmp_path, "cold")
    pool = json.loads((folder / "a.json").read_text())
    record = next(iter(pool["trajectories"].values()))
    record["code_changes"] = "+edited"
    (folder / "a.json").write_text(json.dumps(pool))
    _age(folder)
    data, cache, _ = _read(folder, tmp_path, "again")
    assert (cache.hits, cache.misses) == (1, 1)
    edited = next(e for e in data.examples if e.trajectory_id == record["trajectory_id"])
    assert edited.attempt.code_changes == "+edited"


def test_a_file_rewritten_with_the_same_bytes_stays_cached(tmp_path: Path) -> None:
    """A new mtime, the same bytes: the manifest hashes it to the same digest, a hit."""
    folder = _pool(tmp_path)
    _read(folder, tmp_path, "cold")
    (folder / "a.json").write_text((folder / "a.json").read_text())
    _age(folder)
    _, cache, _ = _read(folder, tmp_path, "again")
    assert (cache.hits, cache.misses) == (2, 0)


def test_a_file_appended_while_read_costs_only_itself(tmp_path: Path) -> None:
    """A .jsonl appended after the scan (as during the read): its lines as read are used,
    it is neither taken from nor stored in the cache, and the other file is a hit; the
    next scan and read see it whole and cache it."""
    folder = _pool(tmp_path)
    _read(folder, tmp_path, "cold")
    manifest, _ = scan_files(folder)
    write_replay_buffer(tmp_path / "more.jsonl", 5, seed=10, agent="late")
    with (folder / "b.jsonl").open("a") as handle:
        handle.write((tmp_path / "more.jsonl").read_text())
    cache = RecordCache(tmp_path / "cache", manifest)
    data = read_trajectories(folder, cache=cache)
    assert (cache.hits, cache.misses) == (1, 1)
    assert sum(e.attempt.agent == "late" for e in data.examples) == 5
    _age(folder)
    again, cache, _ = _read(folder, tmp_path, "next")
    assert (cache.hits, cache.misses) == (1, 1)  # stored only now, under its new digest
    _same(data, again)
    assert _read(folder, tmp_path, "last")[1].hits == 2


def test_entries_of_bytes_no_file_holds_are_pruned(tmp_path: Path) -> None:
    """A removed file's entry, and the head kept for its appends, are deleted by prune()."""
    folder = _pool(tmp_path)
    _read(folder, tmp_path, "cold")
    (folder / "b.jsonl").unlink()
    manifest, _ = scan_files(folder)
    assert RecordCache(tmp_path / "cache", manifest).prune() == 2
    assert len(list((tmp_path / "cache").glob("*.msgpack"))) == 1


def test_a_cache_that_cannot_be_written_is_counted_and_the_read_goes_on(tmp_path: Path) -> None:
    """A cache folder that is a file: the read returns every record, the failures are
    counted, and nothing is taken from the cache next time."""
    folder = _pool(tmp_path)
    (tmp_path / "cache").write_text("not a folder")
    manifest, _ = scan_files(folder)
    cache = RecordCache(tmp_path / "cache", manifest)
    data = read_trajectories(folder, cache=cache)
    assert cache.write_failures == 2
    _same(read_trajectories(folder), data)


def test_a_slim_read_trains_on_what_a_full_read_gives(tmp_path: Path) -> None:
    """keep_text=False, cold and from its cache: the same ids, labels, lineage, quarantine,
    fingerprint and encoded features bit for bit as a full read, with no text kept."""
    folder = _pool(tmp_path)
    full = read_trajectories(folder, tmp_path / "full.jsonl")
    manifest, _ = scan_files(folder)
    slim = []
    for name in ("cold", "warm"):
        cache = RecordCache(tmp_path / "cache", manifest)
        quarantine = tmp_path / f"{name}.jsonl"
        slim.append(read_trajectories(folder, quarantine, cache=cache, keep_text=False))
        assert quarantine.read_text() == (tmp_path / "full.jsonl").read_text()
    assert (cache.hits, cache.misses) == (2, 0)
    attempts = [e.attempt for e in full.examples]
    encoder = FeatureEncoder.fit(attempts, full.pool, [e.label.success for e in full.examples])
    expected = encoder.encode(attempts, full.pool).view(torch.int32)
    for data in slim:
        assert [(e.trajectory_id, e.label) for e in data.examples] == [
            (e.trajectory_id, e.label) for e in full.examples
        ]
        assert data.pool.entries == full.pool.entries
        assert fingerprint_of(data.columns).digest == fingerprint_of(full.columns).digest
        assert not any(e.attempt.code_changes or e.attempt.modified_files for e in data.examples)
        got = encoder.encode([e.attempt for e in data.examples], data.pool).view(torch.int32)
        assert torch.equal(got, expected)


def test_an_appended_jsonl_is_read_from_where_it_ended(tmp_path: Path) -> None:
    """New lines (a bad one among them) after a cached read: only they are parsed, and the
    records, counts and quarantine (line numbers included) are a full read's; a file
    edited before its end is read whole."""
    folder = _pool(tmp_path)
    _read(folder, tmp_path, "cold")
    extra = write_replay_buffer(tmp_path / "more.jsonl", 30, seed=11, agent="qa")
    with (folder / "b.jsonl").open("a") as handle:
        handle.write(extra.read_text() + "{broken\n")
    _age(folder)
    data, cache, quarantine = _read(folder, tmp_path, "appended")
    assert (cache.hits, cache.continued) == (1, 1)
    plain = read_trajectories(folder, tmp_path / "plain.jsonl")
    _same(plain, data)
    assert quarantine == (tmp_path / "plain.jsonl").read_text()
    assert '"where": "line 184"' in quarantine  # 153 lines, 30 new, then the broken one
    assert len(plain.examples) == len(data.examples) > 0
    cache.prune()
    text = (folder / "b.jsonl").read_text()  # now an edit in its first line, and a new line
    (folder / "b.jsonl").write_text(text.replace('"qa"', '"qb"', 1) + extra.read_text())
    _age(folder)
    again, cache, _ = _read(folder, tmp_path, "edited")
    assert cache.continued == 0
    _same(read_trajectories(folder, tmp_path / "plain2.jsonl"), again)


def test_an_appended_jsonl_continues_from_the_scans_own_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scan that knows a .jsonl's previous size works out its old bytes' digest, lines
    and last byte while it hashes the whole file; the cache continues from that, never
    reading those bytes a second time, and the read is a full read's, quarantine too."""
    folder = _pool(tmp_path)
    before, _ = scan_files(folder)
    read_trajectories(folder, tmp_path / "cold.jsonl", cache=RecordCache(tmp_path / "c", before))
    extra = write_replay_buffer(tmp_path / "more.jsonl", 30, seed=11, agent="qa")
    with (folder / "b.jsonl").open("a") as handle:
        handle.write(extra.read_text() + "{broken\n")
    _age(folder)
    manifest, _ = scan_files(folder, before)
    old, new = (next(f for f in m.files if f.path.endswith("b.jsonl")) for m in (before, manifest))
    assert (
        new.prefix is not None and new.prefix.size == old.size and new.prefix.digest == old.digest
    )
    assert scan_files(folder)[0].files == manifest.files  # the same states, prefix aside

    def read_again(file: Path, size: int) -> object:
        raise AssertionError("the head's bytes were read a second time")

    monkeypatch.setattr(record_cache, "prefix_of", read_again)
    cache = RecordCache(tmp_path / "c", manifest)
    data = read_trajectories(folder, tmp_path / "appended.jsonl", cache=cache)
    assert (cache.hits, cache.continued) == (1, 1)
    plain = read_trajectories(folder, tmp_path / "plain.jsonl")
    _same(plain, data)
    assert (tmp_path / "appended.jsonl").read_text() == (tmp_path / "plain.jsonl").read_text()


def test_a_lone_surrogate_is_quarantined_with_its_reason_and_the_file_cached(
    tmp_path: Path,
) -> None:
    """A "\\ud800" escape in tools_used or reasoning_pattern: that record is quarantined
    with where and why, the others are read, and the file is stored and read back."""
    folder = tmp_path / "pool"
    folder.mkdir()
    records = list(generate_pool(20, seed=4)["trajectories"].values())
    records[0]["tools_used"] = ["grep", "\ud800"]
    records[1]["reasoning_pattern"] = "x\udfff"
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    _age(folder)
    cold, cache, quarantine = _read(folder, tmp_path, "cold")
    warm, again, requarantine = _read(folder, tmp_path, "warm")
    assert (cache.write_failures, again.hits) == (0, 1)
    assert cold.quarantined == warm.quarantined == 2
    assert quarantine == requarantine
    reasons = [json.loads(line)["reason"] for line in quarantine.splitlines()]
    assert reasons[0].startswith("tools_used[1]: not Unicode text (a lone surrogate, '\\ud800'")
    assert reasons[1].startswith("reasoning_pattern: not Unicode text")
    _same(cold, warm)


def test_a_block_that_cannot_be_encoded_costs_only_the_next_runs_shortcut(
    tmp_path: Path,
) -> None:
    """store() given text msgpack cannot encode: counted, logged, no entry, no raise."""
    folder = _pool(tmp_path)
    _read(folder, tmp_path, "first")  # stores both files
    entries = sorted((tmp_path / "cache").glob("*.msgpack"))
    stored = record_cache._read_entry(entries[0])
    for entry in entries:
        entry.unlink()
    manifest, _ = scan_files(folder)
    cache = RecordCache(tmp_path / "cache", manifest)
    broken = msgspec.structs.replace(stored, patterns=["\ud800"] * len(stored.patterns))
    cache.store(folder / "a.json", broken, slim=False)
    assert cache.write_failures == 1
    assert not list((tmp_path / "cache").glob("*.msgpack"))


def test_a_truncated_entry_is_a_logged_counted_miss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry cut short (a full disk, a crash under another writer): never served, the
    file parsed again, the reason logged with the file's name and the miss counted."""
    folder = _pool(tmp_path)
    plain = read_trajectories(folder)
    _read(folder, tmp_path, "cold")
    entries = sorted((tmp_path / "cache").glob("*.msgpack"))
    entries[0].write_bytes(entries[0].read_bytes()[: entries[0].stat().st_size // 2])
    with caplog.at_level("WARNING", logger=record_cache.__name__):
        again, cache, _ = _read(folder, tmp_path, "again")
    assert (cache.hits, cache.misses, cache.unreadable) == (1, 1, 1)
    assert "unreadable" in caplog.text and "read again" in caplog.text
    _same(plain, again)


def test_a_file_replaced_under_its_old_size_and_mtime_is_not_served(tmp_path: Path) -> None:
    """Other records of the same byte count put in place with the old mtime (cp -p,
    rsync -t): the scan against the previous manifest hashes it again, the cache misses
    it, and the read gives the new records, as a fresh parse does."""
    folder = _pool(tmp_path)
    first, _ = scan_files(folder)
    cache = RecordCache(tmp_path / "cache", first)
    cold = read_trajectories(folder, cache=cache)
    assert cache.misses == 2
    file = folder / "a.json"
    before = file.stat()
    text = file.read_text()
    at = text.index('"success_score": 0.') + len('"success_score": 0.')
    file.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :])  # one digit
    assert len(file.read_text()) == len(text)
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (file.stat().st_size, file.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    manifest, report = scan_files(folder, first)
    assert report.hashed == 1
    cache = RecordCache(tmp_path / "cache", manifest)
    warm = read_trajectories(folder, cache=cache)
    assert (cache.hits, cache.misses) == (1, 1)
    _same(read_trajectories(folder), warm)
    assert warm.pool.scores != cold.pool.scores


def _slim(folder: Path, tmp_path: Path, name: str) -> tuple[ReadResult, RecordCache, str]:
    """A training run's read (keep_text=False) through the cache; its quarantine text."""
    manifest, _ = scan_files(folder)
    cache = RecordCache(tmp_path / "cache", manifest)
    quarantine = tmp_path / f"{name}.jsonl"
    data = read_trajectories(folder, quarantine, cache=cache, keep_text=False)
    return data, cache, quarantine.read_text() if quarantine.exists() else ""


def _same_columns(a: ReadResult, b: ReadResult) -> None:
    """Every column of two reads' pools equal, value for value and dtype for dtype."""
    for name, value in vars(a.columns).items():
        other = getattr(b.columns, name)
        if isinstance(value, np.ndarray):
            assert value.dtype == other.dtype and np.array_equal(value, other, equal_nan=True)
        elif isinstance(value, Coded):
            assert value.values == other.values and np.array_equal(value.codes, other.codes)
        else:
            assert value == other, name
    counts = ("quarantined", "duplicates", "unlabelled", "files")
    assert [getattr(a, c) for c in counts] == [getattr(b, c) for c in counts]


def _pool_entries(tmp_path: Path) -> int:
    return len(list((tmp_path / "cache").glob("pool-*.gfpool")))


def test_an_unchanged_pool_is_served_whole_as_a_fresh_parse_gives_it(tmp_path: Path) -> None:
    """The first read that finds every file's entry writes the pool's (a read that parsed
    writes none); the next takes the joined pool from it (columns mapped from the file,
    no block decoded): its columns, examples, lineage pool and quarantine file are a
    fresh parse's; a write into a column is refused, and the entry keeps its bytes."""
    folder = _pool(tmp_path)
    fresh, _, fresh_quarantine = _slim(folder, tmp_path / "fresh", "q")
    _, cache, _ = _slim(folder, tmp_path, "cold")
    assert not cache.pool_hit and _pool_entries(tmp_path) == 0
    _, cache, _ = _slim(folder, tmp_path, "second")
    assert not cache.pool_hit and _pool_entries(tmp_path) == 1
    warm, cache, warm_quarantine = _slim(folder, tmp_path, "warm")
    assert cache.pool_hit and (cache.hits, cache.misses) == (2, 0)
    _same_columns(fresh, warm)
    assert warm_quarantine == fresh_quarantine and warm.quarantined == 2
    assert [(e.trajectory_id, e.label) for e in warm.examples] == [
        (e.trajectory_id, e.label) for e in fresh.examples
    ]
    assert warm.columns.key.tolist() == fresh.columns.key.tolist()
    assert warm.pool.entries == fresh.pool.entries
    with pytest.raises(ValueError, match="read-only"):
        warm.columns.score[:] = -1.0
    again, cache, _ = _slim(folder, tmp_path, "again")
    assert cache.pool_hit
    _same_columns(fresh, again)


def test_the_judged_id_hashes_kept_are_the_current_records_after_a_relabel(
    tmp_path: Path,
) -> None:
    """Each labelled record's judged-id hash (``PoolColumns.judged``) comes from the
    cache's file entries and its pool entry as a parse gives it, and a record relabelled
    in place gets its new id's hash in every read after, never the stored one."""
    folder = _pool(tmp_path)

    def judged(data: ReadResult) -> dict[str, int]:
        hashes = id_hashes(judged_ids(data.columns))
        assert np.array_equal(data.columns.judged, hashes)  # the cached column is the ids'
        return dict(zip(data.columns.example_ids, hashes.tolist(), strict=True))

    before = [judged(_slim(folder, tmp_path, name)[0]) for name in ("cold", "second", "warm")]
    assert before[0] == before[1] == before[2]
    pool = json.loads((folder / "a.json").read_text())
    record = [r for r in pool["trajectories"].values() if r["status"] == "success"][-1]
    record.update(status="failure", success_score=0.0)  # relabelled in place: a new judged id
    (folder / "a.json").write_text(json.dumps(pool))
    _age(folder)
    after, cache, _ = _slim(folder, tmp_path, "after")
    assert not cache.pool_hit and (cache.hits, cache.misses) == (1, 1)
    again, cache, _ = _slim(folder, tmp_path, "again")  # writes the new pool entry
    pooled, cache, _ = _slim(folder, tmp_path, "pooled")
    assert cache.pool_hit
    changed = {k for k, v in judged(after).items() if before[0].get(k) != v}
    assert changed == {record["trajectory_id"]} and judged(again) == judged(pooled) == judged(after)


def test_a_changed_or_grown_pool_misses_the_whole_pool_entry(tmp_path: Path) -> None:
    """A record edited in one file, then lines appended to the .jsonl: each read joins
    the per-file entries again (the unchanged file still cached, the appended one read
    from where it ended) and gives a fresh parse's pool; two reads later it is whole
    again, and the entries of the old pools are pruned."""
    folder = _pool(tmp_path)
    _slim(folder, tmp_path, "cold")
    _slim(folder, tmp_path, "second")
    assert _pool_entries(tmp_path) == 1
    pool = json.loads((folder / "a.json").read_text())
    first = next(iter(pool["trajectories"].values()))
    first["success_score"] = 0.999
    (folder / "a.json").write_text(json.dumps(pool))
    _age(folder)
    edited, cache, _ = _slim(folder, tmp_path, "edited")
    assert not cache.pool_hit and (cache.hits, cache.misses) == (1, 1)
    _same_columns(_slim(folder, tmp_path / "fresh1", "q")[0], edited)
    with (folder / "b.jsonl").open("a") as handle:
        handle.write(json.dumps({**first, "trajectory_id": "appended"}) + "\n")
    _age(folder)
    grown, cache, _ = _slim(folder, tmp_path, "grown")
    assert not cache.pool_hit and cache.continued == 1
    assert len(grown.columns) == len(edited.columns) + 1
    _same_columns(_slim(folder, tmp_path / "fresh2", "q")[0], grown)
    _slim(folder, tmp_path, "grown-again")
    manifest, _ = scan_files(folder)
    RecordCache(tmp_path / "cache", manifest).prune()
    assert _pool_entries(tmp_path) == 1
    again, cache, _ = _slim(folder, tmp_path, "again")
    assert cache.pool_hit
    _same_columns(grown, again)


@pytest.mark.parametrize("damage", ["truncated", "header", "grown", "version"])
def test_a_damaged_pool_entry_is_a_logged_counted_miss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """A pool entry cut short, with a garbled header, with bytes past its end, or of
    another cache version is never served: the read joins the files' entries, logs why
    and counts it, and gives a fresh parse's pool."""
    folder = _pool(tmp_path)
    fresh, _, _ = _slim(folder, tmp_path / "fresh", "q")
    _slim(folder, tmp_path, "cold")
    _slim(folder, tmp_path, "second")
    (entry,) = (tmp_path / "cache").glob("pool-*.gfpool")
    raw = entry.read_bytes()
    if damage == "truncated":
        entry.write_bytes(raw[: len(raw) - 100])
    elif damage == "header":
        entry.write_bytes(raw[:20] + b"\xc1" * 40 + raw[60:])
    elif damage == "grown":
        entry.write_bytes(raw + b"\0" * 64)
    else:
        version = record_cache.CACHE_VERSION.encode()
        entry.write_bytes(raw.replace(version, b"0" * len(version), 1))
    with caplog.at_level("WARNING", logger=record_cache.__name__):
        again, cache, _ = _slim(folder, tmp_path, "again")
    assert not cache.pool_hit and cache.unreadable == 1 and cache.hits == 2
    assert "pool entry" in caplog.text and "unreadable" in caplog.text
    _same_columns(fresh, again)


def test_a_pool_without_parents_or_quarantine_round_trips(tmp_path: Path) -> None:
    """Empty columns (no parent anywhere, nothing quarantined) are stored and come back."""
    folder = tmp_path / "pool"
    folder.mkdir()
    pool = generate_pool(30, seed=3)
    for record in pool["trajectories"].values():
        record["parent_trajectories"] = []
    (folder / "a.json").write_text(json.dumps(pool))
    _age(folder)
    fresh, _, _ = _slim(folder, tmp_path / "fresh", "q")
    _slim(folder, tmp_path, "cold")
    _slim(folder, tmp_path, "second")
    warm, cache, _ = _slim(folder, tmp_path, "warm")
    assert cache.pool_hit and len(warm.columns.parent) == 0 and warm.quarantined == 0
    _same_columns(fresh, warm)


# The pool entry attacked (issue 92): each damage below read as a hit before its entry
# was checked; each is now a logged, counted miss whose read gives a fresh parse's pool,
# and the read rewrites the entry, so the next read is a hit again.


def _served_pool(tmp_path: Path) -> tuple[Path, Path, ReadResult]:
    """A pool whose entry is written (the second read), its entry and a fresh parse."""
    folder = _pool(tmp_path)
    fresh, _, _ = _slim(folder, tmp_path / "fresh", "q")
    _slim(folder, tmp_path, "cold")
    _slim(folder, tmp_path, "second")
    (entry,) = (tmp_path / "cache").glob("pool-*.gfpool")
    return folder, entry, fresh


def _miss_then_hit(
    folder: Path, tmp_path: Path, fresh: ReadResult, caplog: pytest.LogCaptureFixture
) -> None:
    """The damaged entry is a logged, counted miss giving a fresh parse's pool (examples
    built, as a run builds them), and it is rewritten: the next read is a hit."""
    with caplog.at_level("WARNING", logger=record_cache.__name__):
        again, cache, _ = _slim(folder, tmp_path, "again")
    assert not cache.pool_hit and cache.unreadable == 1 and cache.hits == 2
    assert "pool entry" in caplog.text and "unreadable" in caplog.text
    _same_columns(fresh, again)
    assert [e.trajectory_id for e in again.examples] == [e.trajectory_id for e in fresh.examples]
    healed, cache, _ = _slim(folder, tmp_path, "healed")
    assert cache.pool_hit and cache.unreadable == 0
    _same_columns(fresh, healed)


def _column_at(raw: bytes, column: np.ndarray) -> int:
    """Where a column's bytes lie in an entry, found by its values (the one place)."""
    pattern = np.ascontiguousarray(column).tobytes()
    assert raw.count(pattern) == 1
    return raw.index(pattern)


def test_a_flipped_byte_in_every_score_of_a_pool_entry_is_a_counted_miss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One bit of each record's score flipped in the entry (a bad disk, a torn copy):
    every score would differ from a parse's, so it is never served."""
    folder, entry, fresh = _served_pool(tmp_path)
    raw = bytearray(entry.read_bytes())
    at = _column_at(bytes(raw), fresh.columns.score)
    for k in range(len(fresh.columns)):
        raw[at + 8 * k] ^= 1  # the lowest mantissa byte: a slightly other score
    entry.write_bytes(bytes(raw))
    _miss_then_hit(folder, tmp_path, fresh, caplog)


@pytest.mark.parametrize("column", ["agent", "labelled"])
def test_out_of_range_codes_or_rows_in_a_pool_entry_are_a_counted_miss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, column: str
) -> None:
    """An agent code naming no agent, or a labelled row past the pool, in the entry's
    bytes: served, every read's examples raised IndexError; now a miss."""
    folder, entry, fresh = _served_pool(tmp_path)
    raw = bytearray(entry.read_bytes())
    if column == "agent":
        codes = fresh.columns.agent.codes
        at, bad = _column_at(bytes(raw), codes), len(fresh.columns.agent.values) + 5
    else:
        codes = fresh.columns.labelled
        at, bad = _column_at(bytes(raw), codes), len(fresh.columns) + 7
    raw[at : at + 8] = np.int64(bad).tobytes()
    entry.write_bytes(bytes(raw))
    _miss_then_hit(folder, tmp_path, fresh, caplog)


def test_an_older_entry_of_the_same_pool_under_the_new_key_is_not_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The entry of the pool before a.json was rewritten, copied under the new pool's
    key (same paths, other bytes): its records are a.json's old ones, so it is a miss."""
    folder, entry, _ = _served_pool(tmp_path)
    old = entry.read_bytes()
    pool = json.loads((folder / "a.json").read_text())
    for record in pool["trajectories"].values():
        record["success_score"] = 0.5
    (folder / "a.json").write_text(json.dumps(pool))
    _age(folder)
    fresh, _, _ = _slim(folder, tmp_path / "fresh-new", "q")
    _slim(folder, tmp_path, "changed")  # a.json parsed: no pool entry written
    _slim(folder, tmp_path, "changed-second")  # every file's own entry: the new pool's
    (new,) = [p for p in (tmp_path / "cache").glob("pool-*.gfpool") if p != entry]
    new.write_bytes(old)
    _miss_then_hit(folder, tmp_path, fresh, caplog)


@pytest.mark.parametrize("kind", ["fifo", "link to a fifo", "folder"])
def test_a_fifo_or_folder_at_the_pool_entry_is_a_counted_miss_and_never_blocks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """A FIFO (or a link to one) where the entry was would block a plain open() until
    someone writes to it; it is refused unopened for reading, as is a folder."""
    folder, entry, fresh = _served_pool(tmp_path)
    entry.unlink()
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "folder":
        entry.mkdir()
    else:
        os.mkfifo(tmp_path / "elsewhere")
        entry.symlink_to(tmp_path / "elsewhere")
    failed: list[BaseException] = []

    def read() -> None:
        try:
            with caplog.at_level("WARNING", logger=record_cache.__name__):
                again, cache, _ = _slim(folder, tmp_path, "again")
            assert not cache.pool_hit and cache.unreadable == 1 and cache.hits == 2
            _same_columns(fresh, again)
        except BaseException as error:
            failed.append(error)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "blocked on the FIFO at the pool entry's path"
    assert not failed, repr(failed[0])
    assert "pool entry" in caplog.text and "unreadable" in caplog.text
    if kind == "folder":  # not replaced by a file (the write is counted), nor pruned
        (folder / "a.json").write_text("[]")  # another pool: the folder is an old entry
        _age(folder)
        manifest, _ = scan_files(folder)
        RecordCache(tmp_path / "cache", manifest).prune()  # logged, no OSError
        assert entry.is_dir() and "cannot remove" in caplog.text
        return
    assert entry.is_file() and not entry.is_symlink()  # rewritten as an entry
    healed, cache, _ = _slim(folder, tmp_path, "healed")
    assert cache.pool_hit
    _same_columns(fresh, healed)


def test_a_huge_pool_entry_is_refused_before_any_of_it_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sparse 256 MiB entry whose header claims nearly all of it: refused by its size
    before a byte is read (the header was read whole first: +1.5 GiB for a 1.5 GiB one)."""
    folder, entry, fresh = _served_pool(tmp_path)
    size = 256 * 2**20
    with entry.open("wb") as handle:
        handle.write(b"GFP16POOL\n" + (size - 64).to_bytes(8, "little"))
        handle.truncate(size)  # sparse: no disk used
    tracemalloc.start()
    try:
        with caplog.at_level("WARNING", logger=record_cache.__name__):
            again, cache, _ = _slim(folder, tmp_path, "again")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"{peak / 2**20:.0f} MiB allocated reading the entry"
    assert not cache.pool_hit and cache.unreadable == 1 and cache.hits == 2
    assert "pool entry" in caplog.text and "unreadable" in caplog.text
    _same_columns(fresh, again)
    assert entry.stat().st_size < 2**20  # rewritten
    _, cache, _ = _slim(folder, tmp_path, "healed")
    assert cache.pool_hit


@pytest.mark.parametrize("damage", ["scores", "codes", "fifo"])
def test_a_training_run_counts_a_damaged_pool_entry_and_writes_it_again(
    tmp_path: Path, damage: str
) -> None:
    """Through the product's path (a judged se_darwin run, forced on unchanged data,
    as ``train --resume --steps N`` runs it): flipped scores, a code naming no agent, or
    a FIFO at the entry are a miss in ``extra.record_cache`` (never served, never an
    IndexError, never a hang), and the next run is served from the rewritten entry."""
    data = tmp_path / "pool"
    data.mkdir()
    (data / "pool.json").write_text(json.dumps(generate_pool(300, seed=2)))
    (data / "more.json").write_text(json.dumps(generate_pool(100, seed=9, agent="qa")))
    _age(data)
    ckpt = tmp_path / "ck"

    def run(**fields: Any) -> dict[str, int]:
        request = TrainRequest(
            agent="se_darwin",
            precision="fp32",
            precision_reason="test",
            state_dir=tmp_path,
            checkpoint_dir=ckpt,
            data_path=data,
            seed=3,
            **{"steps": 5, "resume": True, "forced": True, **fields},
        )
        counts: dict[str, int] = run_plugin(plugin, request).extra["record_cache"]
        return counts

    run(resume=False, forced=False)  # each file parsed, its own entry stored
    assert run()["pool_cached"] == 0  # every file from its entry: the pool's written
    served = run()
    assert served["pool_cached"] == 1
    (entry,) = (tmp_path / "record_cache").rglob("pool-*.gfpool")
    columns = read_trajectories(data, keep_text=False).columns
    raw = bytearray(entry.read_bytes())
    if damage == "scores":
        at = _column_at(bytes(raw), columns.score)
        for k in range(len(columns)):
            raw[at + 8 * k] ^= 1
        entry.write_bytes(bytes(raw))
    elif damage == "codes":
        at = _column_at(bytes(raw), columns.agent.codes)
        raw[at : at + 8] = np.int64(len(columns.agent.values)).tobytes()
        entry.write_bytes(bytes(raw))
    else:
        entry.unlink()
        os.mkfifo(entry)
    found: list[Any] = []
    thread = threading.Thread(target=lambda: found.append(run()), daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive(), "the run blocked on the pool entry"
    assert found and found[0] == {**served, "pool_cached": 0, "entries_unreadable": 1}
    assert run() == served


def test_a_flipped_bit_in_a_files_entry_is_a_logged_counted_miss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One bit of one record's label score flipped in each file's own entry (a bad disk,
    a torn copy): its columns still agree in length and every code names a value, so
    only the entry's CRC-32 finds it. Never served: the files are parsed again, the
    reason logged and each miss counted."""
    folder = _pool(tmp_path)
    plain = read_trajectories(folder)
    _read(folder, tmp_path, "cold")
    entries = sorted((tmp_path / "cache").glob("*.msgpack"))
    assert len(entries) == 2
    for entry in entries:
        raw = bytearray(entry.read_bytes())
        scores = record_cache._read_entry(entry).label_score
        named = bytes(raw).index(b"\xablabel_score") + 12  # its msgpack key, then its bin
        at = named + {0xC4: 2, 0xC5: 3, 0xC6: 5}[raw[named]]
        assert bytes(raw[at : at + len(scores)]) == scores
        raw[at + 8 * 3] ^= 1  # the 4th record's lowest mantissa byte
        entry.write_bytes(bytes(raw))
    with caplog.at_level("WARNING", logger=record_cache.__name__):
        again, cache, _ = _read(folder, tmp_path, "again")
    assert (cache.hits, cache.misses, cache.unreadable) == (0, 2, 2)
    assert "CRC-32" in caplog.text
    _same(plain, again)
