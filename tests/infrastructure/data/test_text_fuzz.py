"""The reader and the record cache together, fed text of every kind: lone surrogates,
control characters, astral planes, bytes that are not UTF-8."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.synthetic import generate_pool

# Any code point, a lone surrogate included, and the characters JSON must escape.
_CHAR = st.characters(codec=None) | st.characters(categories=["Cs"]) | st.sampled_from('"\\\n\x00')
_TEXT = st.text(_CHAR, max_size=8)
_FIELDS = ("tools_used", "reasoning_pattern", "code_changes", "problem_diagnosis", "agent_name")
_EDIT = st.tuples(st.integers(0, 11), st.sampled_from(_FIELDS), _TEXT)
_RECORDS = generate_pool(12, seed=3)["trajectories"]


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _write(folder: Path, edits: list[tuple[int, str, str]], junk: list[bytes], ascii_only: bool):
    """The 12 records as JSON lines, ``edits`` applied and ``junk`` lines among them,
    dated a minute back (cacheable); the ids a read must keep."""
    records = [dict(r) for r in _RECORDS.values()]
    for index, name, text in edits:
        records[index][name] = [text] if name == "tools_used" else text
    lines = [
        json.dumps(r, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") for r in records
    ]
    for at, line in enumerate(junk):
        lines.insert(at * 3, line)
    file = folder / "pool.jsonl"
    file.write_bytes(b"\n".join(lines) + b"\n")
    past = file.stat().st_mtime_ns - 60 * 10**9
    os.utime(file, ns=(past, past))
    return {r["trajectory_id"] for r in records if _encodes(json.dumps(r, ensure_ascii=False))}


def _read(folder: Path, cache: Path | None, quarantine: Path) -> tuple[ReadResult, Any]:
    manifest, _ = scan_files(folder)
    store = None if cache is None else RecordCache(cache, manifest)
    return read_trajectories(folder, quarantine, cache=store, keep_text=False), store


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(_EDIT, max_size=6),
    junk=st.lists(st.binary(max_size=12), max_size=3),
    ascii_only=st.booleans(),
)
def test_text_of_every_kind_is_read_cached_or_quarantined_never_raised(
    edits: list[tuple[int, str, str]], junk: list[bytes], ascii_only: bool
) -> None:
    """No traceback and no lost valid record: a cold read, a read that stores and one
    from the cache keep every record whose text is Unicode, and quarantine the rest."""
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "pool"
        folder.mkdir()
        kept = _write(folder, edits, junk, ascii_only)
        plain, _ = _read(folder, None, Path(root) / "q0.jsonl")
        stored, cache = _read(folder, Path(root) / "cache", Path(root) / "q1.jsonl")
        cached, again = _read(folder, Path(root) / "cache", Path(root) / "q2.jsonl")
        for result in (plain, stored, cached):
            # Escaped, a surrogate is a record's text; raw, bytes that are not UTF-8.
            assert set(result.columns.ids) == kept
            assert result.quarantined == plain.quarantined
            assert result.columns.key.tolist() == plain.columns.key.tolist()
        assert cache.write_failures == 0 and again.hits == 1
        files = [Path(root) / f"q{i}.jsonl" for i in range(3)]
        # No file where nothing was quarantined; the same lines, cached or not.
        quarantine = [f.read_text(encoding="utf-8") if f.exists() else None for f in files]
        assert quarantine[0] == quarantine[1] == quarantine[2]
        assert (quarantine[0] is None) == (plain.quarantined == 0)
