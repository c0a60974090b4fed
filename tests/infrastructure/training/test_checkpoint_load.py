"""A checkpoint read once is not read again: Loaded handed on, and the summary file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from checkpoint_state import checkpoint_state

from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint_files import digest_path, summary_path
from genesis_fp16_infrastructure.training.checkpoint_load import (
    load_checkpoint,
    note_hashed,
    read_checkpoint,
    read_in_block,
    reusing_loads,
    saved_digest,
    sharing_kept,
    stat_signature,
)


def _state(step: int, scale: float = 1024.0) -> dict[str, Any]:
    stats = {keys.STATS: {"skipped_steps": 2, "nonfinite_losses": 1}}
    return checkpoint_state(step, torch.full((3,), float(step)), scale, ("auto", "fp16"), stats)


def test_a_loaded_checkpoint_is_resumed_without_a_second_read(
    tmp_path: Path, loads: list[int]
) -> None:
    """load_latest(loaded=...) takes the state read already; once the file changes on
    disk, the file is read again, not trusted."""
    manager = CheckpointManager(tmp_path)
    path = manager.save(_state(7))
    loaded = read_checkpoint(path)
    assert len(loads) == 1
    found = manager.load_latest(loaded=loaded)
    assert found is not None and found[0] is loaded.state and len(loads) == 1
    manager.save({**_state(7), keys.CONFIG: {"changed": True}})  # same step, new bytes
    found = CheckpointManager(tmp_path).load_latest(loaded=loaded)
    assert found is not None and found[0][keys.CONFIG] == {"changed": True}
    assert len(loads) == 2


def test_pruning_does_not_read_again_a_file_this_manager_loaded(
    tmp_path: Path, loads: list[int]
) -> None:
    """The resumed file, found valid at load, is kept at the next saves without a read."""
    CheckpointManager(tmp_path).save(_state(1))
    manager = CheckpointManager(tmp_path, keep=3)
    manager.load_latest()
    assert len(loads) == 1
    manager.save(_state(2))
    manager.save(_state(3))
    assert len(loads) == 1 and len(manager.checkpoints()) == 3


def test_the_newest_summary_answers_without_reading_the_checkpoint(
    tmp_path: Path, loads: list[int]
) -> None:
    """latest_summary reads the summary file beside the newest checkpoint: step, counters,
    precision, loss scale; no torch.load."""
    manager = CheckpointManager(tmp_path)
    manager.save(_state(4))
    path = manager.save(_state(9, scale=512.0))
    assert manager.latest_summary() == {
        "step": 9,
        "skipped_steps": 2,
        "nonfinite_losses": 1,
        "precision": "fp16",
        "loss_scale": 512.0,
    }
    assert loads == []
    assert summary_path(path).stat().st_size < 512


@pytest.mark.parametrize("damage", ["missing", "garbage", "other_bytes"])
def test_a_summary_that_does_not_speak_for_the_file_is_not_used(
    tmp_path: Path, loads: list[int], damage: str
) -> None:
    """No summary, an unreadable one, or one of bytes the digest file no longer names: the
    newest valid checkpoint is loaded instead (a checkpoint from before summary files)."""
    manager = CheckpointManager(tmp_path)
    path = manager.save(_state(5, scale=256.0))
    if damage == "missing":
        summary_path(path).unlink()
    elif damage == "garbage":
        summary_path(path).write_text("{not json")
    else:  # the file was replaced by other bytes (another state) after the summary
        other = CheckpointManager(tmp_path / "other").save(_state(5, scale=128.0))
        path.write_bytes(other.read_bytes())
        digest_path(path).write_bytes(digest_path(other).read_bytes())
    summary = manager.latest_summary()
    assert len(loads) == 1
    assert summary is not None
    assert summary["loss_scale"] == (128.0 if damage == "other_bytes" else 256.0)


def test_removing_or_setting_aside_a_checkpoint_takes_its_summary(tmp_path: Path) -> None:
    """A summary never outlives its checkpoint in the folder."""
    manager = CheckpointManager(tmp_path, keep=1)
    first = manager.save(_state(1))
    manager.save(_state(2))
    assert not summary_path(first).exists()
    moved = manager.set_aside(manager.checkpoints()[-1], tmp_path / "aside")
    assert summary_path(moved).exists()
    assert list(tmp_path.glob("*.json")) == []


def test_within_reusing_loads_the_same_bytes_are_unpickled_once(
    tmp_path: Path, loads: list[int]
) -> None:
    """In a reusing_loads() block a copy of the last checkpoint loaded (same bytes, other
    path) is not unpickled again; other bytes are, and the block's end forgets it. The
    digest is still checked on every read: a copy whose bytes changed is refused."""
    path = CheckpointManager(tmp_path / "a").save(_state(7))
    copy = tmp_path / "copy" / path.name
    copy.parent.mkdir()
    for source in (digest_path(path), path):
        (copy.parent / source.name).write_bytes(source.read_bytes())
    other = CheckpointManager(tmp_path / "b").save(_state(8))
    with reusing_loads():
        first = load_checkpoint(path)
        assert load_checkpoint(copy) is first and len(loads) == 1
        assert load_checkpoint(other)[keys.STEP] == 8 and len(loads) == 2
        assert load_checkpoint(path) is not first and len(loads) == 3  # the last one only
        data = copy.read_bytes()
        copy.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
        with pytest.raises(CheckpointError, match="do not match the digest"):
            load_checkpoint(copy)
    assert load_checkpoint(path) is not first and len(loads) == 4


def test_a_copy_its_caller_hashed_is_loaded_without_reading_it_while_unchanged(
    tmp_path: Path, loads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a reusing_loads() block a file whose bytes the caller hashed and noted (the judged
    run's scored copy, issue 69) is not read or hashed again by its load while its stat
    is unchanged (issue 90: four hashes of each scored checkpoint a gate, three now); a
    copy written after the note is read, hashed and refused when its bytes are not the
    digest's, and a note whose signature is not the file's now is not kept."""
    import hashlib

    from genesis_fp16_infrastructure.training import checkpoint_load

    path = CheckpointManager(tmp_path / "a").save(_state(7))
    copy = tmp_path / "copy" / path.name
    copy.parent.mkdir()
    for source in (digest_path(path), path):
        (copy.parent / source.name).write_bytes(source.read_bytes())
    hashed: list[int] = []
    real = hashlib.sha256

    def counting(data: bytes = b"") -> Any:
        hashed.append(len(data))
        return real(data)

    monkeypatch.setattr(checkpoint_load.hashlib, "sha256", counting)
    with reusing_loads():
        first = load_checkpoint(path)
        signature = stat_signature(copy)
        note_hashed(copy, real(copy.read_bytes()).hexdigest(), signature)
        hashed.clear()
        assert load_checkpoint(copy) is first and hashed == [] and len(loads) == 1
        data = copy.read_bytes()
        # Written anew (another inode): a file's times may not move within a clock tick.
        changed = copy.with_name("changed")
        changed.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
        changed.replace(copy)
        with pytest.raises(CheckpointError, match="do not match the digest"):
            load_checkpoint(copy)
        assert hashed == [len(data)]
        note_hashed(copy, real(data).hexdigest(), signature)  # taken before the write
        with pytest.raises(CheckpointError, match="do not match the digest"):
            load_checkpoint(copy)


def test_a_resident_process_keeps_the_last_three_states_used_in_blocks(
    tmp_path: Path, loads: list[int]
) -> None:
    """With a memory store (a resident process), the states of the last three checkpoints
    used in reusing_loads() blocks by readers that never change them (sharing_kept) are
    handed out again in a later block, by their bytes' digest, still checked on every
    read (a changed file is refused); a fourth evicts the one used longest ago; a load
    outside a block always unpickles, as does another reader's in a block (a plugin's);
    without a store nothing is kept."""
    from genesis_fp16_infrastructure.kept_in_memory import process_memory

    a, b, c, d = (
        CheckpointManager(tmp_path / n).save(_state(s))
        for n, s in (("a", 1), ("b", 2), ("c", 3), ("d", 4))
    )
    with reusing_loads(), sharing_kept():
        load_checkpoint(a)
    with reusing_loads(), sharing_kept():
        load_checkpoint(a)
    assert len(loads) == 2  # no store: nothing kept from one block to the next
    process_memory(64 * 2**20)
    with reusing_loads(), sharing_kept():
        first, second = load_checkpoint(a), load_checkpoint(b)
    assert len(loads) == 4
    with reusing_loads(), sharing_kept():
        assert load_checkpoint(b) is second and load_checkpoint(a) is first and len(loads) == 4
        assert load_checkpoint(c)[keys.STEP] == 3 and len(loads) == 5
        assert load_checkpoint(d)[keys.STEP] == 4 and len(loads) == 6  # b used longest ago
    with reusing_loads():  # a plugin's load: never handed what is kept
        assert load_checkpoint(a) is not first and len(loads) == 7
    loads.clear()
    with reusing_loads(), sharing_kept():
        assert load_checkpoint(a) is first and len(loads) == 0  # kept: used after b
        assert load_checkpoint(b) is not second and len(loads) == 1  # evicted by d
        data = c.read_bytes()
        c.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
        with pytest.raises(CheckpointError, match="do not match the digest"):
            load_checkpoint(c)
    assert load_checkpoint(d) is not None and len(loads) == 2  # outside a block


def _same(a: Any, b: Any) -> bool:
    """Whether two states hold the same types, keys, values and tensors, bit for bit."""
    if isinstance(a, torch.Tensor):
        return type(a) is type(b) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def test_a_resident_process_loads_what_it_saved_without_unpickling_it(
    tmp_path: Path, loads: list[int]
) -> None:
    """In a resident process a checkpoint it saved is loaded in a reusing_loads() block
    (the gate's candidate) without an unpickle: a copy, equal to what the unpickle gives
    and untouched by later changes to the saved tensors; a state holding anything but
    plain values and tensors is not kept, and one the load refuses is refused still."""
    from genesis_fp16_infrastructure.kept_in_memory import process_memory

    process_memory(64 * 2**20)
    state = _state(7)
    path = CheckpointManager(tmp_path / "a").save(state)
    state[keys.MODEL]["w"].add_(1.0)  # training goes on
    with reusing_loads(), sharing_kept():
        kept = load_checkpoint(path)
    assert loads == []
    assert _same(kept, load_checkpoint(path)) and len(loads) == 1
    odd = _state(8) | {keys.EXTRA: {"when": torch.Size([2])}}  # a tuple's subclass
    odd_path = CheckpointManager(tmp_path / "b").save(odd)
    with reusing_loads(), sharing_kept():
        load_checkpoint(odd_path)
    assert len(loads) == 2
    bad = _state(9)
    bad[keys.MODEL]["w"][0] = float("nan")
    bad_path = CheckpointManager(tmp_path / "c").save(bad)
    with reusing_loads(), sharing_kept(), pytest.raises(CheckpointError, match="not finite"):
        load_checkpoint(bad_path)


def test_a_load_in_a_block_hands_its_checked_bytes_on_for_that_file_alone(
    tmp_path: Path,
) -> None:
    """read_in_block gives the bytes a block's last load read and checked, with their
    SHA-256, for that file only: none outside a block, none for another file, none
    once another file was read, none once a load of the file refused what it read (not
    even the bytes an earlier load of it checked)."""
    import hashlib

    manager = CheckpointManager(tmp_path, keep=5)
    first, second = manager.save(_state(1)), manager.save(_state(2))
    load_checkpoint(first)
    assert read_in_block(first) is None  # no block
    with reusing_loads():
        assert read_in_block(first) is None  # read nothing yet
        load_checkpoint(first)
        data = first.read_bytes()
        assert read_in_block(first) == (data, hashlib.sha256(data).hexdigest())
        assert read_in_block(second) is None
        load_checkpoint(second)
        assert read_in_block(first) is None and read_in_block(second) is not None
        good = second.read_bytes()
        second.write_bytes(good[:50] + bytes([good[50] ^ 1]) + good[51:])
        with pytest.raises(CheckpointError, match="do not match the digest"):
            load_checkpoint(second)
        assert read_in_block(second) is None  # neither these bytes nor those read before
        assert read_in_block(first) is None
    assert read_in_block(first) is None and read_in_block(second) is None


def test_a_blocks_checked_bytes_are_handed_on_only_where_a_copys_digest_file_names_them(
    tmp_path: Path,
) -> None:
    """read_in_block(named_in=...) gives the block's checked bytes only while the digest
    file it is given names them (a copy's, which the copy's loader reads); one that names
    others, or cannot be read as text, gives none; none there (a checkpoint of before
    digests) names any."""
    import hashlib

    path = CheckpointManager(tmp_path / "ck").save(_state(1))
    copied = tmp_path / "copy.pt.sha256"
    with reusing_loads():
        load_checkpoint(path)
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        copied.write_text(digest)
        assert read_in_block(path, named_in=copied) == (data, digest)
        copied.write_text(hashlib.sha256(b"other").hexdigest())
        assert read_in_block(path, named_in=copied) is None
        copied.write_bytes(b"\xff\xfe")
        assert read_in_block(path, named_in=copied) is None
        copied.unlink()
        assert read_in_block(path, named_in=copied) == (data, digest)


def test_the_digest_of_a_save_is_of_the_file_saved_last_alone(tmp_path: Path) -> None:
    """saved_digest names the SHA-256 of the bytes the last save wrote for its path
    alone; a file changed since still gets the saved digest (a key, never a check of
    the file: its load refuses the changed bytes)."""
    import hashlib

    manager = CheckpointManager(tmp_path, keep=5)
    first = manager.save(_state(1))
    assert saved_digest(first) == hashlib.sha256(first.read_bytes()).hexdigest()
    second = manager.save(_state(2))
    assert saved_digest(first) is None
    assert saved_digest(second) == hashlib.sha256(second.read_bytes()).hexdigest()
    digest = saved_digest(second)
    data = second.read_bytes()
    second.write_bytes(data[:50] + bytes([data[50] ^ 1]) + data[51:])
    assert saved_digest(second) == digest
    with pytest.raises(CheckpointError, match="do not match the digest"):
        load_checkpoint(second)
