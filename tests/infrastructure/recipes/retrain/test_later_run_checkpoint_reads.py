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


def test_a_later_run_whose_watch_ran_unpickles_no_checkpoint_and_builds_one_model(
    first: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loads: list[int]
) -> None:
    """A resident process's runs whose served model has a predecessor (the model it
    served before), two in a row: the live watch scores the new records with that one,
    whose state and scoring model the process kept since it served it (hashed and
    matched, not unpickled nor built again), as it kept the served model's and its
    candidate's (saved there). No checkpoint is unpickled in either run, and the one
    model each builds is its candidate's, for the gate."""
    from genesis_fp16_infrastructure.world_model import predict

    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    write_pool(folder / "data", "zz-1.json", 300, seed=41)
    assert _run(folder).gate.outcome == "promoted"  # type: ignore[union-attr]
    built: list[object] = []
    real = predict.WorldModelPredictor.of_state.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, state: Any, path: Any = None) -> Any:
        built.append(state)
        return real(cls, state, path)

    monkeypatch.setattr(predict.WorldModelPredictor, "of_state", classmethod(counted))
    for later in (2, 3):
        write_pool(folder / "data", f"zz-{later}.json", 300, seed=40 + later)
        loads.clear()
        built.clear()
        result = _run(folder)
        assert result.live is not None and result.live.new_records > 0  # the watch ran
        assert loads == [] and len(built) == 1, later
