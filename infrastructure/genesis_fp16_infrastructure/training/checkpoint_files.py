"""A checkpoint file, its digest file and its summary file, on disk: the first two
written as a pair, atomically.

The digest file ``ckpt-<step>.pt.sha256`` holds the hex SHA-256 of ``ckpt-<step>.pt``
(two digests, one a line, while a step is saved again). ``CheckpointManager.save``
writes through :func:`write_pair`, which leaves a file that holds these very bytes as
it is; ``load_checkpoint`` checks the bytes against :func:`digest_path`'s file::

    written = write_pair(path, data, hashlib.sha256(data).hexdigest())  # False: held already

The summary file ``ckpt-<step>.pt.json`` (:func:`write_summary`) holds what a caller
without torch asks of a checkpoint (its step, counters, precision, loss scale) and the
digest of the bytes it summarises; :func:`read_summary` gives it only while the digest
file still names that digest, so a summary never speaks for another file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder.files import fsync_directory, write_json_atomic
from genesis_fp16_infrastructure.training import checkpoint_keys as keys

DIGEST_SUFFIX = ".sha256"  # ckpt-<step>.pt.sha256: the hex SHA-256 of ckpt-<step>.pt
SUMMARY_SUFFIX = ".json"  # ckpt-<step>.pt.json: summarize(state), with that digest
SUMMARY_BYTES = 4096  # a summary is a few numbers: a larger file is not one
ARRAYS_KEY = "arrays"  # a summary's digests of the per-record side files it names


def write_pair(final: Path, data: bytes, digest: str) -> bool:
    """The temp files complete and fsynced, then the digest renamed, then the data; on
    any failure the temps go and nothing in place has changed. False, and nothing
    written, when ``final`` holds these bytes already (``digest``, its digest file lists).

    Over a valid file of the same step, the digest file first names both digests (the
    old file still matches it), then the data is replaced (the new one matches), then
    the new digest alone: every moment in between, the file on disk loads.
    """
    temps: list[Path] = []
    old = _valid_digest(final)
    if old == digest:
        return False
    try:
        contents = [(data, final.suffix), (f"{digest}\n".encode(), DIGEST_SUFFIX)]
        if old is not None:
            contents.append((f"{old}\n{digest}\n".encode(), DIGEST_SUFFIX))
        for content, suffix in contents:
            temps.append(fsynced_temp(final.parent, content, suffix))
        if old is not None:
            os.replace(temps[2], digest_path(final))  # both: old and new bytes match
            os.replace(temps[0], final)
            os.replace(temps[1], digest_path(final))  # the new alone
        else:
            os.replace(temps[1], digest_path(final))
            os.replace(temps[0], final)
    except BaseException as error:
        for temp in temps:
            temp.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None and error.errno is not None:
            raise OSError(error.errno, error.strerror, str(final)) from error  # name the file
        raise
    fsync_directory(final.parent)
    return True


def fsynced_temp(folder: Path, content: bytes, suffix: str) -> Path:
    """``content`` in a new ``.tmp-*<suffix>`` file of ``folder`` (made if missing),
    fsynced: a caller renames it into place (a killed save's temps are swept)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _valid_digest(path: Path) -> str | None:
    """The digest of ``path`` when it is a regular file its digest file lists, else None."""
    try:
        if not path.is_file():
            return None
        listed = digest_path(path).read_text().split()
        actual = hashlib.sha256(path.read_bytes()).hexdigest()
    except (OSError, UnicodeDecodeError):
        return None
    return actual if actual in listed else None


def digest_path(path: Path) -> Path:
    """The digest file of the checkpoint ``path``: ``ckpt-<step>.pt.sha256``."""
    return path.with_name(path.name + DIGEST_SUFFIX)


def summary_path(path: Path) -> Path:
    """The summary file of the checkpoint ``path``: ``ckpt-<step>.pt.json``."""
    return path.with_name(path.name + SUMMARY_SUFFIX)


def summarize(state: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's step, run counters, precision and loss scale, as plain values.

    >>> state = {keys.STEP: 1200, keys.STATS: {"skipped_steps": 3}, keys.SCALER: {"scale": 32768.0},
    ...          keys.PRECISION: {"requested": "auto", "used": "fp16"}}
    >>> summarize(state)  # doctest: +NORMALIZE_WHITESPACE
    {'step': 1200, 'skipped_steps': 3, 'nonfinite_losses': 0, 'precision': 'fp16',
     'loss_scale': 32768.0}
    """
    stats = state.get(keys.STATS)
    stats = stats if isinstance(stats, Mapping) else {}
    record = state.get(keys.PRECISION)
    scaler = state.get(keys.SCALER)
    scale = scaler.get("scale") if isinstance(scaler, Mapping) else None
    if not isinstance(scale, int | float) or isinstance(scale, bool) or not math.isfinite(scale):
        scale = None
    return {
        "step": int(state[keys.STEP]),
        "skipped_steps": int(stats.get("skipped_steps", 0)),
        "nonfinite_losses": int(stats.get("nonfinite_losses", 0)),
        "precision": record.get("used") if isinstance(record, Mapping) else None,
        "loss_scale": None if scale is None else float(scale),
    }


def write_summary(
    path: Path, digest: str, state: Mapping[str, Any], arrays: list[str] | None = None
) -> None:
    """Write :func:`summarize` of ``state``, the checkpoint ``path`` whose bytes are
    ``digest``, with the digests of the per-record side files it names (``arrays``:
    ``checkpoint_arrays``; pruning keeps those)."""
    named = {ARRAYS_KEY: arrays} if arrays else {}
    write_json_atomic(summary_path(path), {"sha256": digest, **named, **summarize(state)})


def read_summary(path: Path) -> dict[str, Any] | None:
    """The summary of the checkpoint ``path``, or None: no summary file, an unreadable
    one, or one of other bytes than those the digest file names now (then the caller
    reads the checkpoint). The checkpoint's own bytes are not read, so not checked."""
    summary = _current_summary(path)
    if summary is not None:
        summary.pop(ARRAYS_KEY, None)  # the side files it names: pruning's, not a caller's
    return summary


def summary_arrays(path: Path) -> list[str] | None:
    """The digests of the per-record side files (``checkpoint_arrays``) the current
    summary of the checkpoint ``path`` names ([]: none); None: no current summary, or a
    list that is none (the checkpoint may name any)."""
    summary = _current_summary(path)
    digests = None if summary is None else summary.get(ARRAYS_KEY, [])
    return [str(d) for d in digests] if isinstance(digests, list) else None


def _current_summary(path: Path) -> dict[str, Any] | None:
    """The summary file of the checkpoint ``path`` as written, its digest checked
    against those the digest file names now and taken out; None as :func:`read_summary`."""
    if not summary_path(path).is_file():  # a FIFO would block the read
        return None
    try:
        with open(summary_path(path), "rb") as handle:
            raw = handle.read(SUMMARY_BYTES + 1)
        summary = json.loads(raw) if len(raw) <= SUMMARY_BYTES else None
        listed = digest_path(path).read_text().split()
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.pop("sha256", None) not in listed:
        return None
    return summary
