"""A checkpoint file and its digest file, on disk: written as a pair, atomically.

The digest file ``ckpt-<step>.pt.sha256`` holds the hex SHA-256 of ``ckpt-<step>.pt``
(two digests, one a line, while a step is saved again). ``CheckpointManager.save``
writes through :func:`write_pair` and skips a state already saved with :func:`holds`;
``load_checkpoint`` checks the bytes against :func:`digest_path`'s file::

    digest = hashlib.sha256(data).hexdigest()
    if not holds(path, digest):
        write_pair(path, data, digest.encode() + b"\n")
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from genesis_fp16_infrastructure.atomic import fsync_directory

DIGEST_SUFFIX = ".sha256"  # ckpt-<step>.pt.sha256: the hex SHA-256 of ckpt-<step>.pt


def write_pair(final: Path, data: bytes, digest: bytes) -> None:
    """The temp files complete and fsynced, then the digest renamed, then the data; on
    any failure the temps go and nothing in place has changed.

    Over a valid file of the same step, the digest file first names both digests (the
    old file still matches it), then the data is replaced (the new one matches), then
    the new digest alone: every moment in between, the file on disk loads.
    """
    temps: list[Path] = []
    old = _valid_digest(final)
    try:
        contents = [(data, final.suffix), (digest, DIGEST_SUFFIX)]
        if old is not None:
            contents.append((f"{old}\n".encode() + digest, DIGEST_SUFFIX))
        for content, suffix in contents:
            temps.append(_fsynced_temp(final.parent, content, suffix))
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


def _fsynced_temp(folder: Path, content: bytes, suffix: str) -> Path:
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


def holds(path: Path, digest: str) -> bool:
    """Whether ``path`` is a regular file whose digest file and bytes are ``digest``."""
    try:
        if digest_path(path).read_text().strip() != digest:
            return False
        return hashlib.sha256(path.read_bytes()).hexdigest() == digest
    except OSError:
        return False


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
