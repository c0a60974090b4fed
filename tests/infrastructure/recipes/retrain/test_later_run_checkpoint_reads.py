"""A later judged run reads and hashes each checkpoint's bytes once for each use that
must check them (issue 90): the served model's and the candidate's, counted."""

from __future__ import annotations

import collections
import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
from first_served import write_pool
from test_ranked_later_run import _run

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.agent_folder.pointer import checkpoint_of, read_pointer
from genesis_fp16_infrastructure.training.checkpoint_files import digest_path


class _Counted:
    """A SHA-256 that counts its digest in ``seen`` when it is taken."""

    def __init__(self, seen: collections.Counter[str], data: bytes = b"") -> None:
        self._hash, self._seen = _SHA256(data), seen

    def update(self, data: bytes) -> None:
        self._hash.update(data)

    def hexdigest(self) -> str:
        digest = self._hash.hexdigest()
        self._seen[digest] += 1
        return digest

    def digest(self) -> bytes:
        return bytes.fromhex(self.hexdigest())


_SHA256, _FILE_DIGEST = hashlib.sha256, hashlib.file_digest


def test_a_later_run_hashes_each_checkpoint_once_a_use_that_checks_it(
    first: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resident process's run after one that judged the served model, with 300 new
    records: the served checkpoint's bytes are hashed twice (its copy in the
    candidate's folder, read by the plugin; its load for the records it names, whose
    bytes its scoring copy is written from), four before; the candidate's twice (its
    save; its load for the records it names and its copy), five before: its evaluation
    is keyed by the save's digest. A scoring copy is not hashed again after scoring: it
    is read back and compared byte for byte with the bytes it was written from."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    write_pool(folder / "data", "zz-1.json", 300, seed=41)
    _run(folder)
    write_pool(folder / "data", "zz-2.json", 300, seed=42)
    served = checkpoint_of(folder / "ck", read_pointer(folder / "ck"))
    seen: collections.Counter[str] = collections.Counter()

    def file_digest(file: Any, name: str) -> Any:
        found = _FILE_DIGEST(file, name)
        seen[found.hexdigest()] += 1
        return found

    monkeypatch.setattr(hashlib, "sha256", lambda data=b"": _Counted(seen, data))
    monkeypatch.setattr(hashlib, "file_digest", file_digest)
    result = _run(folder)
    monkeypatch.undo()
    assert result.gate is not None and result.gate.outcome == "promoted"
    candidate = checkpoint_of(folder / "ck", read_pointer(folder / "ck"))
    assert candidate != served
    digests = {p: digest_path(p).read_text().split() for p in (served, candidate)}
    assert [len(d) for d in digests.values()] == [1, 1]
    assert seen[digests[served][0]] == 2, seen
    assert seen[digests[candidate][0]] == 2, seen
