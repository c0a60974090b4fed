"""A state folder written by 8cf75976 (``fixtures/record_cache_8cf75976``, its
``WRITTEN_BY.txt`` says how) read by this build: its record cache entries (version 9,
before an entry ended in its CRC-32) are of another version, so its files are parsed
once more and the next read is served from this build's entries; what the old entries
hold is byte for byte this build's own parse of the same files (only the container
changed), and the data fingerprint its checkpoint kept finds the same data unchanged
(every record hash the same: no run trains afresh, no pool re-dealt)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec
import pytest
import torch

from genesis_fp16_infrastructure.data import readers
from genesis_fp16_infrastructure.data.fingerprint import compare
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.record_cache import CACHE_VERSION, RecordCache

_WRITTEN = Path(__file__).parent / "fixtures" / "record_cache_8cf75976"


def _state(tmp_path: Path) -> tuple[Path, Path]:
    """The fixture's data and cache folders, copied; the data older than the manifest's
    racy window, as they were when written."""
    data, cache = tmp_path / "data", tmp_path / "record_cache"
    shutil.copytree(_WRITTEN / "data", data)
    shutil.copytree(_WRITTEN / "record_cache", cache)
    for file in data.iterdir():
        past = file.stat().st_mtime_ns - 60 * 10**9
        os.utime(file, ns=(past, past))
    return data, cache


def _read(data: Path, cache_folder: Path | None, keep_text: bool) -> tuple[ReadResult, RecordCache]:
    manifest, _ = scan_files(data)
    cache = RecordCache(cache_folder or data.parent / "fresh", manifest)
    read = read_trajectories(data, data.parent / "q.jsonl", cache=cache, keep_text=keep_text)
    return read, cache


@pytest.mark.parametrize("keep_text", [True, False])
def test_its_cache_entries_hold_this_builds_parse_and_are_replaced_once(
    tmp_path: Path, keep_text: bool
) -> None:
    """Each of its files a miss (another version's entry: not read, so none unreadable),
    the pool the one a fresh parse makes, then each a hit from this build's entry; and
    each old entry's bytes exactly this build's msgpack of its file's parse, under the
    old version: the columns themselves did not change."""
    data, cache_folder = _state(tmp_path)
    old = {path.name: path.read_bytes() for path in cache_folder.iterdir()}
    served, cache = _read(data, cache_folder, keep_text)
    assert (cache.hits, cache.misses, cache.unreadable) == (0, 2, 0)
    fresh, parsed = _read(data, None, keep_text)
    assert parsed.misses == 2
    assert served.columns.key.tolist() == fresh.columns.key.tolist()
    assert served.fingerprint.digest == fresh.fingerprint.digest
    assert served.columns.ids == fresh.columns.ids
    again, cache = _read(data, cache_folder, keep_text)
    assert (cache.hits, cache.misses, cache.unreadable) == (2, 0, 0)
    assert again.columns.key.tolist() == fresh.columns.key.tolist()
    for file in sorted(data.iterdir()):
        state = cache.files[str(file)]
        name = f"{state.digest}-9.s1.n1{'' if keep_text else '-slim'}.msgpack"
        assert CACHE_VERSION != "9.s1.n1"
        block = readers._file_records(file, QuarantineSink(None), None, keep_text)
        ours = msgspec.msgpack.encode(msgspec.structs.replace(block, version="9.s1.n1"))
        assert ours == old[name], file.name


def test_its_checkpoints_fingerprint_finds_the_data_unchanged(tmp_path: Path) -> None:
    """The fingerprint 8cf75976 saved of these files: compare() says unchanged, with
    every record counted (a record hash of another kind would read as relabelled)."""
    data, _ = _state(tmp_path)
    saved = torch.load(_WRITTEN / "fingerprint.pt", weights_only=True)
    read = read_trajectories(data, tmp_path / "q.jsonl", keep_text=False)
    change = compare(saved, read.fingerprint)
    assert change.unchanged and change.previous == read.fingerprint.records == 63
