"""Reading one checkpoint file: checked (digest, schema, keys, finite weights) and loaded
with ``torch.load(weights_only=True)``; a file read once can be handed on as
:class:`Loaded`, so that the run resuming from it does not read it again::

    loaded = read_checkpoint(Path("state/checkpoints/ckpt-0000001200.pt"))
    loaded.state["step"]  # 1200
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import logging
import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.kept_in_memory import (
    current,
    estimate_bytes,
    held_of_digest,
    kept_of_digest,
)
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint_files import digest_path

logger = logging.getLogger(__name__)

KEPT_KIND = "checkpoint state"  # the memory store's (kept_in_memory.kept_of_digest)
# The last checkpoint loaded in a reusing_loads() block, by the sha256 of its bytes.
_LAST: ContextVar[dict[str, dict[str, Any]] | None] = ContextVar("last_checkpoint", default=None)
# In such a block, the sha256 of files a caller hashed itself (note_hashed), by their stat
# signature (:func:`stat_signature`).
_HASHED: ContextVar[dict[tuple[int, ...], str] | None] = ContextVar("hashed", default=None)
# Whether this thread's loads are a reader's that never changes its state (sharing_kept).
_SHARING: ContextVar[bool] = ContextVar("sharing_kept", default=False)
# In a reusing_loads() block, the last checkpoint file a load read there: its path, its
# bytes, checked against its digest file, and their SHA-256 (:func:`read_in_block`).
_READ: ContextVar[list[tuple[Path, bytes, str]] | None] = ContextVar("read", default=None)
# The checkpoint this thread saved last, by its path, and the SHA-256 of the bytes it
# wrote there (:func:`saved_digest`).
_SAVED: ContextVar[tuple[Path, str] | None] = ContextVar("saved", default=None)


@contextlib.contextmanager
def reusing_loads() -> Iterator[None]:
    """Within the block (in this thread), a checkpoint whose bytes are those of the last
    one loaded is not unpickled again: its state is handed out once more, so its readers
    must not change it. A judged run reads the served model's and the candidate's
    checkpoint twice each, back to back (the weights it scores, the records it names):
    unpickling the tensors is most of a read (15-30 ms for a small world model's).

    In a resident process (its memory store: ``kept_in_memory``) the states of the last
    three checkpoints loaded by readers that said they never change them
    (:func:`sharing_kept`) are kept from one run to the next, by the SHA-256 of their
    bytes (:data:`KEPT_KIND`), with the state of the checkpoint the process saved last
    (:func:`keep_saved`): the candidate a run judged is the model the next run serves,
    and its bytes, hashed again and matched, are not unpickled again (10-13 ms of the
    next run's live phase, issue 90). A plugin's own load in the block is never handed
    a kept state (a plugin might change what it loads: issue 69), and a load outside a
    block always unpickles: a run that resumes from a state changes its tensors."""
    token, hashed, read = _LAST.set({}), _HASHED.set({}), _READ.set([])
    try:
        yield
    finally:
        _READ.reset(read)
        _HASHED.reset(hashed)
        _LAST.reset(token)


@contextlib.contextmanager
def sharing_kept() -> Iterator[None]:
    """Within it, this thread's loads in a reusing_loads() block are a reader's that
    never changes what it is handed (the judged run's read of the records a checkpoint
    names, a plugin's scoring that says so): in a resident process they take the states
    kept from earlier runs, and keep theirs (:func:`reusing_loads`). ::

        with reusing_loads(), sharing_kept():
            extra = load_checkpoint(path)[keys.EXTRA]  # read, never changed
    """
    token = _SHARING.set(True)
    try:
        yield
    finally:
        _SHARING.reset(token)


def stat_signature(path: Path) -> tuple[int, ...] | None:
    """A file's device, inode, size, mtime and ctime (ns); None when it cannot be read.
    Any write to the file, or a change of its times, changes its ctime, which no
    unprivileged process can set back."""
    try:
        info = Path(path).stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def note_hashed(path: Path, digest: str, signature: tuple[int, ...] | None) -> None:
    """In a reusing_loads() block: ``path``'s bytes, hashed by the caller to ``digest``
    while its stat was ``signature`` (taken before the hash), so that a load of it while
    that signature holds need not read or hash it again (the judged run hashes each
    copy of a checkpoint it scores: issue 69; a 2.9 MB checkpoint is 6 ms a hash). Noted
    only when the file's signature now is the one taken before the hash. A file's times
    move by clock ticks: a write in the same tick that keeps its size may go unseen
    here, and its load then hands out the state of the bytes the caller hashed, never
    others' (score_on_copy hashes the copy again after scoring, which sees that write)."""
    hashed = _HASHED.get()
    if hashed is not None and signature is not None and stat_signature(path) == signature:
        hashed[signature] = digest


@dataclass(frozen=True)
class Loaded:
    """A checkpoint read once, handed on so that the next reader need not read it again
    (``CheckpointManager.load_latest(loaded=...)``): its state, its path, and the file's
    size and mtime when it was read. Its tensors go to whoever resumes from it. ::

        loaded = read_checkpoint(path)
        fit(task, FitOptions(..., resume=True, loaded_checkpoint=loaded))
    """

    state: dict[str, Any]
    path: Path
    signature: tuple[int, int] | None


def read_checkpoint(path: Path) -> Loaded:
    """:func:`load_checkpoint` of ``path``, kept as a :class:`Loaded` to hand on."""
    signature = file_signature(Path(path))
    return Loaded(load_checkpoint(path), Path(path), signature)


def file_signature(path: Path) -> tuple[int, int] | None:
    """A file's size and mtime (ns), None when it cannot be read: changed if either moved."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load one checkpoint with ``weights_only=True``; check digest, schema and weights.

    Raises :class:`CheckpointError` for a file that cannot be used: not a regular file (a
    FIFO would block the read forever), bytes that do not match the digest written with
    them, a torn or refused pickle, another schema version, missing keys, or weights that
    are not all finite (resuming from them trains to NaN). A file written before digests
    existed loads with a warning.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError("not a regular file")
    last = _LAST.get()
    # A reader that never changes its state, in a resident process: the states kept
    # across runs (reusing_loads), else this block's last one.
    kept = current() if last is not None and _SHARING.get() else None
    try:
        # One digest, or two while the same step is saved again (see checkpoint_files.write_pair).
        expected = digest_path(path).read_text().split() if digest_path(path).exists() else None
        if last is not None and expected is not None:
            noted = _noted(path)  # its bytes as a caller hashed them, unchanged since
            if noted is not None and noted in expected:
                held = last.get(noted) if kept is None else held_of_digest(kept, KEPT_KIND, noted)
                if held is not None:
                    return held  # and those bytes unpickled already: not read again
        read = _READ.get()
        if read is not None:  # the block's last read: none until these bytes pass every check
            read.clear()
        data = path.read_bytes()
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(
            f"cannot be read ({getattr(error, 'strerror', None) or error})"
        ) from error
    # Hashed to verify the bytes, or to know them again in a reusing_loads() block.
    digest = None if expected is None and last is None else hashlib.sha256(data).hexdigest()
    if expected is None:
        logger.warning("checkpoint %s has no digest (written before digests): not verified", path)
    elif digest not in expected:
        raise CheckpointError(
            f"its bytes do not match the digest in {digest_path(path).name} "
            "(changed after it was written: bit rot, a torn copy or an edit)"
        )
    if last is None or digest is None:
        return _loaded(data)
    if kept is not None:  # never put in ``last``: a plugin's load there may change it
        state = kept_of_digest(kept, KEPT_KIND, digest, partial(_loaded, data), estimate_bytes)
    else:
        if digest not in last:
            last.clear()
            last[digest] = _loaded(data)
        state = last[digest]
    if read is not None:  # checked: kept for a copy of them (read_in_block)
        read[:] = [(path, data, digest)]
    return state


def read_in_block(path: Path, named_in: Path | None = None) -> tuple[bytes, str] | None:
    """In a reusing_loads() block whose last read of a checkpoint file was of ``path``:
    the bytes that load read, checked against the file's digest file then, and their
    SHA-256; None otherwise (another file, no block, or a load that read nothing), or
    when the digest file ``named_in`` (one copied beside a copy of them, which the copy's
    loader reads) does not name them now. Not a claim on what the file holds now: a
    caller that copies them copies the checkpoint as the block read and checked it,
    without a second read and hash (the judged run reads the records a checkpoint names,
    then scores a copy of it: one read of its bytes for both, the copy of the very bytes
    whose trained ids it read; issue 90). ::

        with reusing_loads():
            named = load_checkpoint(path)["extra"]
            data, digest = read_in_block(path)  # those bytes, hashed once
    """
    read = _READ.get()
    if not read or read[0][0] != Path(path):
        return None
    if named_in is not None and not _names(named_in, read[0][2]):
        return None
    return read[0][1], read[0][2]


def _names(digests: Path, digest: str) -> bool:
    """Whether the digest file ``digests`` names ``digest`` (none there: a checkpoint
    written before digests, whose loader hashes nothing against it)."""
    try:
        return digest in digests.read_text().split()
    except FileNotFoundError:
        return True
    except (OSError, UnicodeDecodeError):
        return False


def note_saved(path: Path, digest: str) -> None:
    """This thread just wrote ``path``, bytes whose SHA-256 is ``digest``
    (``CheckpointManager.save``): :func:`saved_digest` answers with it."""
    _SAVED.set((Path(path), digest))


def saved_digest(path: Path) -> str | None:
    """The SHA-256 of the bytes this thread last saved as ``path`` (the checkpoint it
    saved last), None for any other file: which model a kept output of the run's own
    evaluation is of, without reading the file back and hashing it. A digest of bytes
    this thread wrote, never a claim on the file now: whatever reads the file hashes
    what it reads, and a file changed since matches no output kept under this digest."""
    saved = _SAVED.get()
    return saved[1] if saved is not None and saved[0] == Path(path) else None


def noted_digest(path: Path) -> str | None:
    """The SHA-256 a caller noted for ``path`` in this reusing_loads() block
    (:func:`note_hashed`), while its stat is what it was then; None otherwise."""
    return _noted(Path(path))


def _noted(path: Path) -> str | None:
    """The digest :func:`note_hashed` noted for ``path`` as its stat is now, if any."""
    hashed = _HASHED.get()
    signature = stat_signature(path) if hashed else None
    return None if hashed is None or signature is None else hashed.get(signature)


def _loaded(data: bytes) -> dict[str, Any]:
    """A checkpoint's verified bytes, unpickled and checked (:func:`load_checkpoint`)."""
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # torn file, garbage bytes, refused pickle: all unusable
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(f"cannot be loaded ({type(error).__name__}: {first_line})") from error
    return _checked(state)


def _checked(state: Any) -> dict[str, Any]:
    """``state`` when it is a checkpoint's: a dict of this schema, its keys all there,
    its weights finite; else the :class:`CheckpointError` saying which it is not."""
    if not isinstance(state, dict):
        raise CheckpointError(f"holds a {type(state).__name__}, not a dict")
    version = state.get(keys.SCHEMA)
    if version != keys.SCHEMA_VERSION:
        raise CheckpointError(
            f"schema_version={version!r}, this code reads schema_version={keys.SCHEMA_VERSION}"
        )
    missing = [k for k in keys.REQUIRED if k not in state]
    if missing:
        raise CheckpointError(f"lacks the keys {missing}")
    bad = _first_nonfinite(state[keys.MODEL])
    if bad is not None:
        raise CheckpointError(
            f"the weight {bad!r} is not finite (NaN or inf); not resuming from it"
        )
    return state


def keep_saved(state: Mapping[str, Any], digest: str) -> None:
    """A checkpoint this process just wrote (``digest``: its bytes' SHA-256), kept in a
    resident process (its memory store) as the state a load in a reusing_loads() block
    hands out for those bytes: the gate loads the candidate its run saved last, and
    unpickling what this process pickled is 10-20 ms of the gate (issue 90). A copy
    (``copy.deepcopy``: training goes on changing the tensors it saved), kept only when
    it is what the load would give: plain values and CPU tensors alone, which
    ``weights_only`` reads back as they were written, passing the load's checks (a
    state they refuse is refused by its load as before)."""
    memory = current()
    if memory is None or not _plain(state):
        return

    def copied() -> dict[str, Any]:
        return _checked(copy.deepcopy(dict(state)))

    with contextlib.suppress(CheckpointError):
        kept_of_digest(memory, KEPT_KIND, digest, copied, estimate_bytes)


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only CPU tensors, plain scalars and strings, in dicts,
    lists and tuples: what a weights_only load gives back as it was saved."""
    if isinstance(value, torch.Tensor):
        return type(value) in (torch.Tensor, torch.nn.Parameter) and value.device.type == "cpu"
    if type(value) in (dict, OrderedDict):
        return all(type(k) in (str, int) and _plain(v) for k, v in value.items())
    if type(value) in (list, tuple):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (int, float, bool, str)


def _first_nonfinite(weights: Any) -> str | None:
    """The name of the first floating tensor in ``weights`` holding a NaN or an inf."""
    if not isinstance(weights, Mapping):
        return None
    for name, value in weights.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            if not bool(torch.isfinite(value).all()):
                return str(name)
        elif isinstance(value, float) and not math.isfinite(value):
            return str(name)
    return None
