"""A state folder written by 3b7871a8 (record cache version 9, fingerprints of version
2, whose record hashes were a text per record) read by this build: its cache entries
are never served (each file is read again once, and the log says why), its checkpoint's
fingerprint counts as unknown (its next run trains afresh once, and says why), and the
pool read is a fresh parse's, never an old record hash in it."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import msgspec
import numpy as np
import pytest

from genesis_fp16_infrastructure.data import fingerprint, record_cache
from genesis_fp16_infrastructure.data.file_records import RecordBlock
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.synthetic import generate_pool

_OLD_VERSION = "9.s1.n1"  # record_cache.CACHE_VERSION at 3b7871a8


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "pool"
    folder.mkdir()
    for name, seed in (("a.json", 1), ("b.json", 2)):
        pool = generate_pool(120, seed=seed)
        (folder / name).write_text(json.dumps(pool))
    for file in folder.iterdir():  # older than the manifest's racy window: cacheable
        past = file.stat().st_mtime_ns - 60 * 10**9
        os.utime(file, ns=(past, past))
    return folder


def _read(folder: Path, cache_folder: Path) -> tuple[ReadResult, RecordCache]:
    manifest, _ = scan_files(folder)
    cache = RecordCache(cache_folder, manifest)
    data = read_trajectories(folder, cache_folder.parent / "q.jsonl", cache=cache, keep_text=False)
    return data, cache


def _made_old(cache_folder: Path) -> int:
    """Each entry as 3b7871a8 named and wrote it: version 9, and a record hash that is
    not this build's (here: this build's plus one); the joined pool's entry gone (its
    name is keyed by the version too). How many entries."""
    for pool in cache_folder.glob("pool-*.gfpool"):
        pool.unlink()
    entries = sorted(cache_folder.glob(f"*-{record_cache.CACHE_VERSION}*.msgpack"))
    for entry in entries:
        block = msgspec.msgpack.decode(entry.read_bytes(), type=RecordBlock)
        stale = (np.frombuffer(block.key, "<i8") + 1).astype("<i8").tobytes()
        old = msgspec.structs.replace(block, version=_OLD_VERSION, key=stale)
        entry.with_name(entry.name.replace(record_cache.CACHE_VERSION, _OLD_VERSION)).write_bytes(
            msgspec.msgpack.encode(old)
        )
        entry.unlink()
    return len(entries)


def test_an_old_record_cache_is_read_again_once_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Version-9 entries: every file parsed again (misses, none served), one log line
    naming both versions, the pool a fresh parse's (no stale hash), the old entries
    pruned, and the next read served from the new ones."""
    folder = _folder(tmp_path)
    fresh, _ = _read(folder, tmp_path / "fresh" / "cache")
    _read(folder, tmp_path / "state" / "cache")
    assert _made_old(tmp_path / "state" / "cache") == 2
    with caplog.at_level(logging.INFO, record_cache.__name__):
        again, cache = _read(folder, tmp_path / "state" / "cache")
    assert cache.hits == 0 and cache.misses == 2
    said = [r.message for r in caplog.records if "entries of version" in r.message]
    assert len(said) == 1 and _OLD_VERSION in said[0] and record_cache.CACHE_VERSION in said[0]
    assert again.columns.key.tolist() == fresh.columns.key.tolist()
    assert again.fingerprint.digest == fresh.fingerprint.digest
    assert cache.prune() == 2
    assert not list((tmp_path / "state" / "cache").glob(f"*{_OLD_VERSION}*"))
    _, warm = _read(folder, tmp_path / "state" / "cache")
    assert warm.hits == 2 and warm.misses == 0


def test_an_old_checkpoints_fingerprint_is_unknown_not_compared(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A version-2 fingerprint of these very records (as 3b7871a8 saved it beside a
    checkpoint): compare() reports no previous data (a fresh training), never "unchanged"
    nor a count of relabelled records worked out from hashes of another kind."""
    folder = _folder(tmp_path)
    seen = read_trajectories(folder, keep_text=False).fingerprint
    saved = {**seen.state_dict(), "version": 2}
    with caplog.at_level(logging.INFO, fingerprint.__name__):
        change = fingerprint.compare(saved, seen)
    assert change.previous is None and not change.unchanged and change.added == seen.records
    assert "version 2, this build's 3" in caplog.text
