"""A checkpoint's per-record arrays, in a side file named by its SHA-256 and written once.

A judged task keeps a few arrays with one entry a record in its ``extra_state()``: the
records its model trained on (``trained_ids``) and the fingerprint of the pool it read
(``data/ids``, ``data/labelled``). At 100,000 records they were 2.2 MB of a 2.85 MB
checkpoint, re-pickled, hashed, written and fsynced at every save, copied and hashed
twice at every scoring, hashed at every load, though no model reads them (issue 90). A
task names them in ``extra["per_record"]`` (:data:`PER_RECORD`: paths into its extra,
``/`` between keys), and ``CheckpointManager.save`` keeps them in one side file beside
the checkpoint, ``arrays-<sha256>.bin`` (their int64 bytes, one after the other), and a
reference in their place (:data:`REF`: the file's digest, the offset and the count)::

    stored, blob, digest = split_arrays(state)  # the state to pickle, the side file's
    extra = with_arrays(load_checkpoint(path), path)[keys.EXTRA]   # the arrays back

- **Written once.** The saves of one run (the same pool) name the same file: a file of
  that name is written only when none valid is there, so a later save pickles, hashes and
  writes the small checkpoint alone. It is written (temp, fsync, rename, folder fsync)
  before the checkpoint that names it, so a kill -9 never leaves a checkpoint without its
  arrays; pruning deletes the files no kept checkpoint names (their summary files say
  which; a checkpoint without a current summary keeps them all).
- **Checked before use.** :func:`with_arrays` reads the file and checks its SHA-256
  against its name, its length against the references: a planted, truncated or edited
  file is refused in one line (:class:`~genesis_fp16_infrastructure.errors.CheckpointError`).
  In a resident process (``kept_in_memory``) the arrays of a file this process wrote or
  checked are kept, with the file's identity (device, inode, size, mtime, ctime): read
  again only once the file is another.
- **Read only where they are used.** ``load_checkpoint`` hands out the references: the
  weights a scoring loads, hashes and copies are the model's alone. A checkpoint written
  before this (the arrays inline) reads as before: :func:`with_arrays` returns it as it is.
- **Copied as links.** A checkpoint copied into another folder (the served model in the
  candidate that continues it, one set aside) takes its side files as hard links
  (:func:`link_arrays`): never written in place, they are shared, not copied.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_infrastructure.agent_folder.files import fsync_directory
from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.kept_in_memory import Identity, current, identity_of
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint_files import fsynced_temp, summary_arrays

logger = logging.getLogger(__name__)

PER_RECORD = "per_record"  # extra's key: the paths ("trained_ids", "data/ids") kept aside
REF = "arrays_sha256"  # a reference's key: the side file's SHA-256 (with "offset", "count")
PREFIX, SUFFIX = "arrays-", ".bin"  # arrays-<sha256>.bin, beside the checkpoint
KEPT_KIND = "checkpoint arrays"  # the memory store's key


def side_path(folder: Path, digest: str) -> Path:
    """The side file of SHA-256 ``digest`` in ``folder``."""
    return Path(folder) / f"{PREFIX}{digest}{SUFFIX}"


def split_arrays(
    state: Mapping[str, Any], folder: Path | None = None
) -> tuple[dict[str, Any], bytes | None, str]:
    """``state`` with the tensors its extra names in :data:`PER_RECORD` replaced by
    references, the side file's bytes (None: it names none, or only references
    already) and their SHA-256 ("" for none). The caller's dicts are not changed. A
    named value that is no 1-D int64 CPU tensor is a task's error; a reference (a
    loaded state saved again) stays one when its side file is in ``folder``, where the
    state is saved, else is refused (its arrays would be lost: ``with_arrays`` first).

    >>> extra = {PER_RECORD: ["ids"], "ids": torch.tensor([3, 1]), "n": 2}
    >>> stored, blob, digest = split_arrays({keys.EXTRA: extra})
    >>> stored[keys.EXTRA]["ids"] == {REF: digest, "offset": 0, "count": 2}
    True
    >>> extra["ids"].tolist(), len(blob)
    ([3, 1], 16)
    """
    extra = state.get(keys.EXTRA)
    paths = extra.get(PER_RECORD) if isinstance(extra, Mapping) else None
    if not paths:
        return dict(state), None, ""
    assert isinstance(extra, Mapping)
    parts: list[bytes] = []
    places: list[tuple[str, int, int]] = []
    offset = 0
    for path in paths:
        value = _at(extra, path)
        if isinstance(value, Mapping) and REF in value:
            if folder is None or not side_path(folder, str(value[REF])).is_file():
                raise ValueError(
                    f"extra[{PER_RECORD!r}] names {path!r}, a reference to a side file not in "
                    f"{folder}: read a loaded checkpoint's arrays (with_arrays) before saving it"
                )
            continue
        if not (
            isinstance(value, torch.Tensor)
            and value.dim() == 1
            and value.dtype == torch.int64
            and value.device.type == "cpu"
        ):
            raise ValueError(
                f"extra[{PER_RECORD!r}] names {path!r}, which holds {type(value).__name__}: "
                "a per-record array is one 1-D int64 CPU tensor"
            )
        data = value.contiguous().numpy().astype("<i8", copy=False).tobytes()
        parts.append(data)
        places.append((path, offset, len(value)))
        offset += len(data)
    if not places:
        return dict(state), None, ""
    blob = b"".join(parts)
    digest = hashlib.sha256(blob).hexdigest()
    stored_extra = dict(extra)
    for path, at, count in places:
        stored_extra = _replaced(stored_extra, path, {REF: digest, "offset": at, "count": count})
    return {**state, keys.EXTRA: stored_extra}, blob, digest


def digests_of(state: Mapping[str, Any]) -> list[str]:
    """The side files a stored state's references name (none for arrays inline)."""
    extra = state.get(keys.EXTRA)
    if not isinstance(extra, Mapping):
        return []
    found = [_at(extra, p) for p in extra.get(PER_RECORD) or ()]
    return sorted({r[REF] for r in found if isinstance(r, Mapping) and REF in r})


def write_arrays(folder: Path, blob: bytes, digest: str, known: dict[Path, Identity]) -> Path:
    """The side file of ``blob`` (SHA-256 ``digest``) in ``folder``, written (temp,
    fsync, rename, folder fsync) unless one valid is there: ``known`` (the caller's
    record of files it wrote or checked, by path, with their identity then) or, else,
    read and hashed now. A file of that name that is not those bytes is replaced."""
    path = side_path(folder, digest)
    if known.get(path) is not None and identity_of(path) == known[path]:
        return path  # written or checked by this manager, unchanged since
    if _holds(path, digest, len(blob)):
        known[path] = identity_of(path)  # type: ignore[assignment]
        return path
    temp = fsynced_temp(Path(folder), blob, SUFFIX)
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_directory(Path(folder))  # durable before the checkpoint that names it
    identity = identity_of(path)
    if identity is not None:
        known[path] = identity
        _keep(digest, identity, _tensor(blob))  # the next run's reads need not read it
    return path


def _holds(path: Path, digest: str, size: int) -> bool:
    """Whether ``path`` is a regular file of ``size`` bytes whose SHA-256 is ``digest``."""
    try:
        if not path.is_file() or path.stat().st_size != size:
            return False
        return hashlib.sha256(path.read_bytes()).hexdigest() == digest
    except OSError:
        return False


def with_arrays(state: dict[str, Any], checkpoint: Path) -> dict[str, Any]:
    """``state`` (a checkpoint's, as loaded from ``checkpoint``) with its per-record
    arrays in place of their references, read from their side files beside it and
    checked; ``state`` itself when it has none (a checkpoint of before, arrays inline).
    New dicts along the arrays' paths: ``state``, which may be a kept one, is not
    changed. The arrays handed out may be kept in memory: never change them. Raises
    :class:`CheckpointError` in one line for a side file missing, of other bytes than
    its name says, or shorter than its references."""
    extra = state.get(keys.EXTRA)
    paths = extra.get(PER_RECORD) if isinstance(extra, Mapping) else None
    if not paths:
        return state
    assert isinstance(extra, Mapping)
    resolved = dict(extra)
    for path in paths:
        ref = _at(extra, path)
        if not (isinstance(ref, Mapping) and REF in ref):
            continue  # inline (a task's own state, never saved)
        flat = _read(side_path(Path(checkpoint).parent, str(ref[REF])))
        start, count = int(ref["offset"]) // 8, int(ref["count"])
        if int(ref["offset"]) % 8 or start < 0 or count < 0 or start + count > len(flat):
            raise CheckpointError(
                f"its per-record array {path!r} lies past the end of "
                f"{PREFIX}{str(ref[REF])[:12]}...{SUFFIX} ({len(flat)} values)"
            )
        resolved = _replaced(resolved, path, flat[start : start + count])
    return {**state, keys.EXTRA: resolved}


def _read(path: Path) -> torch.Tensor:
    """The int64 values of the side file ``path``, checked against its name; kept in a
    resident process with its identity, and taken from there while that holds."""
    digest = path.name[len(PREFIX) : -len(SUFFIX)]
    identity = identity_of(path)
    kept = _kept().get(digest)
    if kept is not None and identity is not None and kept[0] == identity:
        memory = current()
        assert memory is not None
        memory.note_given(f"{KEPT_KIND} {digest[:12]}")
        return kept[1]
    try:
        if not path.is_file():
            raise CheckpointError(f"its per-record arrays file {path.name} is missing")
        data = path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"its per-record arrays file {path.name}: {error.strerror}") from None
    if hashlib.sha256(data).hexdigest() != digest or len(data) % 8:
        raise CheckpointError(
            f"its per-record arrays file {path.name} does not hold the bytes its name says "
            f"({len(data)} bytes: truncated, edited or planted)"
        )
    flat = _tensor(data)
    if identity is not None and identity_of(path) == identity:
        _keep(digest, identity, flat)
    return flat


def _tensor(data: bytes) -> torch.Tensor:
    """The little-endian int64 values of ``data``, in memory of their own."""
    if not data:
        return torch.zeros(0, dtype=torch.int64)
    return torch.frombuffer(bytearray(data), dtype=torch.int64)


def _kept() -> dict[str, tuple[Identity, torch.Tensor]]:
    """The arrays this resident process keeps, by their side file's digest, with the
    identity of the file they were read from or written to (none without a store)."""
    memory = current()
    kept = memory.get((KEPT_KIND,), KEPT_KIND, given=False) if memory is not None else None
    return kept if isinstance(kept, dict) else {}


def _keep(digest: str, identity: Identity, flat: torch.Tensor, keep: int = 2) -> None:
    """Keep ``flat``, the arrays of the side file ``digest`` (its ``identity``), with
    the ``keep - 1`` kept last: a judged run's served model's and its candidate's, the
    candidate's being the next run's served model's."""
    memory = current()
    if memory is None:
        return
    others = [(d, v) for d, v in _kept().items() if d != digest][-(keep - 1) :] if keep > 1 else []
    kept = dict([*others, (digest, (identity, flat))])
    size = sum(v[1].nbytes for v in kept.values())
    memory.put((KEPT_KIND,), KEPT_KIND, kept, size, f"{KEPT_KIND} of {len(kept)} file(s)")


def link_arrays(checkpoint: Path, folder: Path) -> None:
    """The side files beside ``checkpoint`` (those its folder holds) in ``folder`` too,
    as hard links (a copy where the file system has none): a checkpoint copied or moved
    there finds its arrays. One already there is left (its name is its content, checked
    at each read). A resident process's kept arrays follow the link (the same inode)."""
    try:
        sides = [p for p in Path(checkpoint).parent.iterdir() if _is_side(p.name)]
    except OSError:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    for side in sides:
        target = Path(folder) / side.name
        if target.exists():
            continue
        before = identity_of(side)
        try:
            os.link(side, target)
        except OSError:  # no hard links here (another file system)
            shutil.copy2(side, target)
            continue
        _follow(side.name[len(PREFIX) : -len(SUFFIX)], before, identity_of(target))


def _follow(digest: str, before: Identity | None, after: Identity | None) -> None:
    """A link changes its file's ctime: kept arrays of the file as it was are its."""
    kept = _kept().get(digest)
    if kept is not None and before is not None and after is not None and kept[0] == before:
        _keep(digest, after, kept[1])


def prune_arrays(folder: Path, checkpoints: list[Path]) -> None:
    """Delete the side files in ``folder`` that none of ``checkpoints`` names, as their
    summary files say; none when one of them has no current summary (it may name any)."""
    try:
        sides = [p for p in Path(folder).iterdir() if _is_side(p.name)]
    except OSError:
        return
    if not sides:
        return
    named: set[str] = set()
    for checkpoint in checkpoints:
        digests = summary_arrays(checkpoint)
        if digests is None:
            return
        named.update(digests)
    for side in sides:
        if side.name[len(PREFIX) : -len(SUFFIX)] not in named:
            side.unlink(missing_ok=True)


def _is_side(name: str) -> bool:
    return name.startswith(PREFIX) and name.endswith(SUFFIX) and len(name) == 64 + 11


def _at(extra: Mapping[str, Any], path: str) -> Any:
    value: Any = extra
    for part in str(path).split("/"):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _replaced(extra: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``extra`` with ``value`` at ``path``: new dicts along it, the rest shared."""
    head, _, rest = str(path).partition("/")
    inner = extra.get(head)
    new = _replaced(inner if isinstance(inner, Mapping) else {}, rest, value) if rest else value
    return {**extra, head: new}
