"""The copy a plugin scores (issue 69): the plugin never gets the original, and any
change to the copy, even by a plugin that then fails, ends the run in one line."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.judging.scoring_copy import (
    CheckpointChangedError,
    score_on_copy,
)


def _checkpoint(folder: Path) -> Path:
    """A checkpoint with its digest file, as CheckpointManager writes them."""
    folder.mkdir(parents=True)
    path = folder / "ckpt-0000000001.pt"
    path.write_bytes(b"weights")
    (folder / "ckpt-0000000001.pt.sha256").write_text(hashlib.sha256(b"weights").hexdigest())
    return path


def test_an_honest_score_reads_a_copy_with_its_digest_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """The plugin's path is not the original, holds the same bytes beside its digest
    file, and the copy's folder is gone afterwards."""
    original = _checkpoint(tmp_path / "candidate")
    seen: list[Path] = []

    def score(copy: Path) -> bytes:
        seen.append(copy)
        assert (copy.parent / (copy.name + ".sha256")).is_file()
        return copy.read_bytes()

    assert score_on_copy(score, original, tmp_path, "agent: plugin p") == b"weights"
    assert seen[0] != original and seen[0].name == original.name
    assert not seen[0].exists() and not list(tmp_path.glob(".scoring-*"))


@pytest.mark.parametrize("change", ["append", "remove", "fifo"])
def test_a_changed_copy_is_refused_in_one_line_and_the_original_kept(
    tmp_path: Path, change: str
) -> None:
    """Appended bytes, a removed file or a FIFO in its place: CheckpointChangedError (a
    TrainRequestError) naming the plugin and the checkpoint; the original unchanged."""
    original = _checkpoint(tmp_path / "candidate")

    def score(copy: Path) -> int:
        if change == "append":
            with copy.open("ab") as file:
                file.write(b"x")
        else:
            copy.unlink()
            if change == "fifo":
                os.mkfifo(copy)
        return 1

    with pytest.raises(CheckpointChangedError, match="agent: plugin p: score_records") as e:
        score_on_copy(score, original, tmp_path, "agent: plugin p")
    assert isinstance(e.value, TrainRequestError) and "\n" not in str(e.value)
    assert str(original) in str(e.value) and original.read_bytes() == b"weights"


def test_a_plugin_that_changes_the_copy_and_then_fails_is_named_for_the_change(
    tmp_path: Path,
) -> None:
    """The plugin's own error does not hide the change: the change is what is raised."""
    original = _checkpoint(tmp_path / "candidate")

    def score(copy: Path) -> int:
        copy.write_bytes(b"other")
        raise ValueError("cannot load")

    with pytest.raises(CheckpointChangedError, match="changed the checkpoint it scored"):
        score_on_copy(score, original, tmp_path, "agent: plugin p")


# A judged run of test_run.py's one-number plugin whose scoring waits: killed there, it
# leaves its copy. argv: the tests folder, the state folder, the data file.
_KILLED_WHILE_SCORING = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, str(Path(sys.argv[1]).parents[1]))  # tests/, as pytest puts it: its helpers
import test_run
from genesis_fp16_infrastructure.judging.run import run_plugin

class Slow(test_run.OneNumber):
    def score_records(self, checkpoint, request):
        print("scoring", flush=True)
        time.sleep(600)

run_plugin(Slow(), test_run._request(Path(sys.argv[2]), Path(sys.argv[3])))
"""


def test_a_copy_left_by_a_killed_scoring_is_swept_by_the_next_judged_run(
    tmp_path: Path,
) -> None:
    """SIGKILL of a real process inside score_records leaves a .scoring-* folder with
    the copy; the agent's next judged run removes it (it stayed for good), and a link of
    that name is unlinked without touching the folder it points to."""
    import subprocess
    import sys

    from test_run import OneNumber, _data, _request

    from genesis_fp16_infrastructure.judging.run import run_plugin

    data = _data(tmp_path / "d.json", 0.5, range(40))
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _KILLED_WHILE_SCORING,
            str(Path(__file__).parent),
            str(tmp_path),
            str(data),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "scoring\n"
    finally:
        child.kill()
        child.wait()
    checkpoints = tmp_path / "checkpoints"
    (left,) = checkpoints.glob(".scoring-*")
    assert [p.name for p in left.iterdir()] and left.is_dir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("mine")
    (checkpoints / ".scoring-link").symlink_to(elsewhere, target_is_directory=True)

    result = run_plugin(OneNumber(), _request(tmp_path, data))
    assert result.gate is not None and result.gate.outcome == "promoted"
    assert not list(checkpoints.glob(".scoring-*"))
    assert (elsewhere / "keep").read_text() == "mine"


def test_the_plugins_load_of_its_copy_is_not_hashed_again_in_a_judged_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the judged run's reusing_loads() block, the plugin's load of the copy it is
    handed (hashed once by score_on_copy) neither reads nor hashes it again after the
    original was loaded (issue 90): the state it gets is the original's, unpickled once."""
    import torch
    from checkpoint_state import checkpoint_state

    from genesis_fp16_infrastructure.training import CheckpointManager, checkpoint_load
    from genesis_fp16_infrastructure.training.checkpoint_load import (
        load_checkpoint,
        reusing_loads,
    )

    state = checkpoint_state(3, torch.ones(3), 1024.0, ("auto", "fp32"), {})
    original = CheckpointManager(tmp_path / "candidate").save(state)
    hashed: list[int] = []
    real = hashlib.sha256

    def counting(data: bytes = b"") -> object:
        hashed.append(len(data))
        return real(data)

    with reusing_loads():
        first = load_checkpoint(original)
        # the loader's own hashing (score_on_copy hashes the copy as it writes it)
        monkeypatch.setattr(checkpoint_load, "hashlib", SimpleNamespace(sha256=counting))
        assert score_on_copy(load_checkpoint, original, tmp_path, "agent: plugin p") is first
    assert hashed == []


def test_the_copy_of_a_checkpoint_its_block_read_is_written_from_the_checked_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the judged run's reusing_loads() block, after the load that read the records
    a checkpoint names, its scoring copy is written from the bytes that load read and
    checked: the original is neither read nor hashed again (issue 90). When the digest
    file no longer names those bytes (the step saved again since), the file is read
    and hashed anew, and the copy holds what it holds now, beside its digest."""
    import torch
    from checkpoint_state import checkpoint_state

    from genesis_fp16_infrastructure.judging import scoring_copy
    from genesis_fp16_infrastructure.training import CheckpointManager
    from genesis_fp16_infrastructure.training.checkpoint_load import (
        load_checkpoint,
        reusing_loads,
    )

    manager = CheckpointManager(tmp_path / "candidate")
    original = manager.save(checkpoint_state(3, torch.ones(3), 1024.0, ("auto", "fp32"), {}))
    hashed: list[int] = []
    real = hashlib.sha256

    def counting(data: bytes = b"") -> object:
        hashed.append(len(data))
        return real(data)

    monkeypatch.setattr(
        scoring_copy, "hashlib", SimpleNamespace(sha256=counting, file_digest=hashlib.file_digest)
    )
    read: list[bytes] = []

    def score(copy: Path) -> bytes:
        read.append(copy.read_bytes())
        return (copy.parent / (copy.name + ".sha256")).read_bytes()

    with reusing_loads():
        load_checkpoint(original)
        before = original.read_bytes()
        monkeypatch.setattr(Path, "read_bytes", _refusing(original, Path.read_bytes))
        digest_file = score_on_copy(score, original, tmp_path, "agent: plugin p")
        assert (
            hashed == [] and read == [before] and real(before).hexdigest() in digest_file.decode()
        )
        monkeypatch.undo()
        monkeypatch.setattr(
            scoring_copy,
            "hashlib",
            SimpleNamespace(sha256=counting, file_digest=hashlib.file_digest),
        )
        manager.save(checkpoint_state(3, torch.zeros(3), 1024.0, ("auto", "fp32"), {}))
        now = original.read_bytes()
        assert now != before
        digest_file = score_on_copy(score, original, tmp_path, "agent: plugin p")
    assert hashed == [len(now)] and read[-1] == now
    assert digest_file.decode().split() == [real(now).hexdigest()]


def _refusing(path: Path, read_bytes: Any) -> Any:
    """``Path.read_bytes`` that fails the test when ``path`` itself is read."""

    def reading(self: Path) -> bytes:
        assert self != path, f"{path} read again"
        return bytes(read_bytes(self))

    return reading


def test_a_byte_flipped_in_place_with_the_copys_size_and_times_kept_is_refused(
    tmp_path: Path,
) -> None:
    """One byte of the copy flipped, its size, atime and mtime put back: refused, the
    copy read back and compared with the bytes written (no file times trusted)."""
    original = _checkpoint(tmp_path / "candidate")

    def score(copy: Path) -> int:
        times = copy.stat()
        data = bytearray(copy.read_bytes())
        data[0] ^= 1
        copy.write_bytes(bytes(data))
        os.utime(copy, ns=(times.st_atime_ns, times.st_mtime_ns))
        return 1

    with pytest.raises(CheckpointChangedError, match="changed the checkpoint it scored"):
        score_on_copy(score, original, tmp_path, "agent: plugin p")
    assert original.read_bytes() == b"weights"


def test_an_honest_copy_is_compared_after_scoring_not_hashed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an honest scoring the copy is read back and compared with the bytes
    written: no SHA-256 of it is taken again (issue 90)."""
    from genesis_fp16_infrastructure.judging import scoring_copy

    original = _checkpoint(tmp_path / "candidate")
    digests: list[object] = []

    def counting(file: Any, name: str) -> Any:
        digests.append(file)
        return hashlib.file_digest(file, name)

    monkeypatch.setattr(
        scoring_copy, "hashlib", SimpleNamespace(sha256=hashlib.sha256, file_digest=counting)
    )
    assert score_on_copy(lambda copy: copy.read_bytes(), original, tmp_path, "a: p") == b"weights"
    assert digests == []


def test_the_plugins_losses_are_handed_back_as_a_checked_copy_of_their_own(
    tmp_path: Path,
) -> None:
    """losses_on_copy hands back a RecordLosses the plugin never held, with its
    records and losses; any other answer is refused in one line (RecordLossesError)."""
    from genesis_fp16_infrastructure.contract.record_losses import RecordLosses, RecordLossesError
    from genesis_fp16_infrastructure.judging.scoring_copy import losses_on_copy

    original = _checkpoint(tmp_path / "candidate")
    given = RecordLosses.of(["a", "b"], [0.5, 1.5])
    got = losses_on_copy(lambda copy: given, original, tmp_path, "agent: plugin p")
    assert got is not given and got.ids == ("a", "b") and got.column() == (0.5, 1.5)
    with pytest.raises(RecordLossesError, match="returned a dict, not RecordLosses"):
        losses_on_copy(lambda copy: {"a": 0.5}, original, tmp_path, "agent: plugin p")
