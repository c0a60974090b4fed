"""The data manifest: a stat per file says "unchanged", a hash only where a stat moved."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from genesis_fp16_infrastructure.data.manifest import RACY_NS, Manifest, scan_files


def _age(path: Path, seconds: float = 60.0) -> None:
    """Set a file's mtime into the past: older than a scan by more than RACY_NS."""
    stat = path.stat()
    past = stat.st_mtime_ns - int(seconds * 1e9)
    os.utime(path, ns=(past, past))


def _pool(tmp_path: Path) -> Path:
    folder = tmp_path / "pool"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text('{"trajectory_id": "a"}\n')
    (folder / "b.json").write_text('[{"trajectory_id": "b"}]')
    for file in folder.iterdir():
        _age(file)
    return folder


def test_an_untouched_pool_is_scanned_without_hashing(tmp_path: Path) -> None:
    """Every file's size and mtime match: no file is hashed, and the content is the same."""
    folder = _pool(tmp_path)
    first, report = scan_files(folder)
    assert report.hashed == 2
    again, report = scan_files(folder, first)
    assert (report.hashed, report.reused) == (0, 2)
    assert again.same_content(first)


def test_a_file_rewritten_with_the_same_bytes_is_unchanged(tmp_path: Path) -> None:
    """A rewrite moves the mtime: the file is hashed again, and its content is the same."""
    folder = _pool(tmp_path)
    first, _ = scan_files(folder)
    (folder / "a.jsonl").write_text('{"trajectory_id": "a"}\n')
    again, report = scan_files(folder, first)
    assert report.hashed == 1 and again.same_content(first)


def test_appended_edited_added_and_removed_files_are_changes(tmp_path: Path) -> None:
    """A line appended, a byte edited in place (same size), a new file, a file removed."""
    folder = _pool(tmp_path)
    first, _ = scan_files(folder)
    with (folder / "a.jsonl").open("a") as handle:
        handle.write('{"trajectory_id": "c"}\n')
    assert not scan_files(folder, first)[0].same_content(first)

    folder = _pool(tmp_path / "2")
    first, _ = scan_files(folder)
    (folder / "b.json").write_text('[{"trajectory_id": "x"}]')  # same size, other bytes
    assert not scan_files(folder, first)[0].same_content(first)

    folder = _pool(tmp_path / "3")
    first, _ = scan_files(folder)
    (folder / "c.json").write_text("[]")
    assert not scan_files(folder, first)[0].same_content(first)
    (folder / "c.json").unlink()
    (folder / "b.json").unlink()
    assert not scan_files(folder, first)[0].same_content(first)


def test_a_file_written_in_the_scans_mtime_tick_is_hashed_again(tmp_path: Path) -> None:
    """Same size, same mtime, other bytes (a write within one mtime tick of the scan): the
    scan does not trust a stat this close to it, and sees the edit."""
    folder = _pool(tmp_path)
    file = folder / "b.json"
    stat = file.stat()
    first, _ = scan_files(folder)
    now = first.scanned_ns - RACY_NS // 2  # modified just before the scan
    os.utime(file, ns=(now, now))
    first, _ = scan_files(folder)
    file.write_text('[{"trajectory_id": "x"}]')
    os.utime(file, ns=(now, now))  # the clock's granularity hid the write
    assert file.stat().st_size == stat.st_size
    again, report = scan_files(folder, first)
    assert report.hashed >= 1 and not again.same_content(first)


def test_a_manifest_survives_json_and_refuses_another_version(tmp_path: Path) -> None:
    """to_json/from_json round-trips; another version or a malformed one reads as None."""
    manifest, _ = scan_files(_pool(tmp_path))
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert Manifest.from_json({**manifest.to_json(), "version": 99}) is None
    assert Manifest.from_json({"version": 1, "files": [[1]], "scanned_ns": 0}) is None


def test_the_manifest_module_does_not_import_torch() -> None:
    """The daemon's check costs no torch import: the module needs only the standard library
    and the readers."""
    code = (
        "import sys, genesis_fp16_infrastructure.data.manifest; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_file_that_cannot_be_read_is_a_data_error(tmp_path: Path) -> None:
    """An unreadable file is the readers' DataError naming it, never a raw OSError."""
    import pytest

    from genesis_fp16_infrastructure.errors import DataError

    with pytest.raises(DataError, match=r"cannot read data file '/proc/self/mem'"):
        scan_files(Path("/proc/self/mem"))


def test_a_file_replaced_under_its_old_size_and_mtime_is_hashed_again(tmp_path: Path) -> None:
    """Other bytes of the same size with the old mtime set back (cp -p, rsync -t, touch -r):
    the ctime moved, so the scan hashes the file and sees the change."""
    folder = _pool(tmp_path)
    file = folder / "b.json"
    before = file.stat()
    first, _ = scan_files(folder)
    file.write_text('[{"trajectory_id": "x"}]')
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = file.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    again, report = scan_files(folder, first)
    assert report.hashed == 1 and not again.same_content(first)


def test_a_manifest_saved_without_ctime_and_inode_is_read_and_hashed_again(
    tmp_path: Path,
) -> None:
    """A manifest of four fields per file (before ctime and inode were kept) reads, and
    vouches for nothing: each file is hashed once more, to the same content."""
    folder = _pool(tmp_path)
    first, _ = scan_files(folder)
    saved = first.to_json()
    old = Manifest.from_json({**saved, "files": [entry[:4] for entry in saved["files"]]})
    assert old is not None and old.same_content(first)
    again, report = scan_files(folder, old)
    assert (report.hashed, report.reused) == (2, 0) and again.same_content(first)
    assert scan_files(folder, again)[1].reused == 2


def test_a_copy_or_a_rename_keeping_the_read_order_holds_the_same_content(
    tmp_path: Path,
) -> None:
    """A file copied beside itself (its records all duplicates), a file renamed without
    changing the read order, and the pool's folder moved: the same content, whatever the
    names (issue 69: an identical copy of a pool started a child and a calibration)."""
    folder = _pool(tmp_path)
    first, _ = scan_files(folder)
    (folder / "b copy.json").write_bytes((folder / "b.json").read_bytes())  # just before it
    assert scan_files(folder, first)[0].same_content(first)
    (folder / "a.jsonl").rename(folder / "a0.jsonl")  # still read first
    assert scan_files(folder, first)[0].same_content(first)
    moved = folder.rename(tmp_path / "moved")
    assert scan_files(moved, first)[0].same_content(first)


def test_the_same_bytes_read_otherwise_are_a_change(tmp_path: Path) -> None:
    """The same bytes under another format (``.json`` read as ``.jsonl``), or a rename
    that reads two files in the other order (where both hold one id, the first read
    wins): a change, read in full."""
    folder = _pool(tmp_path)
    first, _ = scan_files(folder)
    (folder / "b.json").rename(folder / "b.jsonl")
    assert not scan_files(folder, first)[0].same_content(first)
    (folder / "b.jsonl").rename(folder / "b.json")
    (folder / "a.jsonl").rename(folder / "c.jsonl")  # now read after b.json
    assert not scan_files(folder, first)[0].same_content(first)


def test_a_digest_is_blake2b_128_of_the_bytes_and_a_prefix_of_its_head(tmp_path: Path) -> None:
    """The digests saved manifests hold: a changed scheme would hash every pool again."""
    file = tmp_path / "pool.jsonl"
    file.write_bytes(b'{"a": 1}\n')
    _age(file)
    before, _ = scan_files(tmp_path)
    file.write_bytes(b'{"a": 1}\n{"b": 2}\n')
    after, _ = scan_files(tmp_path, before)
    (old,), (new,) = before.files, after.files
    assert old.digest == hashlib.blake2b(b'{"a": 1}\n', digest_size=16).hexdigest()
    assert new.digest == hashlib.blake2b(file.read_bytes(), digest_size=16).hexdigest()
    assert new.prefix is not None and (new.prefix.digest, new.prefix.lines) == (old.digest, 1)
    assert old.prefix is None
