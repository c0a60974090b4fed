"""One file per checkpoint: written atomically with its digest, the newest valid N kept.

::

    manager = CheckpointManager(Path("state/checkpoints"), keep=3)
    path = manager.save({"schema_version": SCHEMA_VERSION, "step": 1200, ...})
    found = manager.load_latest()  # (state, path), or None when there is no valid file
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_infrastructure.agent_folder.layout import CHECKPOINT_NAME, list_checkpoints
from genesis_fp16_infrastructure.agent_folder.layout import WRITER_LOCK as WRITER_LOCK_FILE
from genesis_fp16_infrastructure.agent_folder.lock import take_lock
from genesis_fp16_infrastructure.errors import CheckpointError, CheckpointFolderBusy, LockBusy
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint_arrays import (
    digests_of,
    link_arrays,
    prune_arrays,
    split_arrays,
    write_arrays,
)
from genesis_fp16_infrastructure.training.checkpoint_files import (
    digest_path,
    read_summary,
    summarize,
    summary_path,
    write_pair,
    write_summary,
)
from genesis_fp16_infrastructure.training.checkpoint_load import (
    Loaded,
    file_signature,
    keep_saved,
    load_checkpoint,
    note_saved,
)

logger = logging.getLogger(__name__)

REJECTED_SUFFIX = ".rejected"  # a file pruning found unusable, set aside rather than deleted
STALE_TEMP_SECONDS = 60.0
WRITER_LOCK = WRITER_LOCK_FILE.name  # the flock of the one process that writes the folder

# Called with a loaded state before it is used; raises to pass over the file.
Accept = Callable[[dict[str, Any], Path], object]


# This process's claims, by lock file (resolved): (descriptor, claims). An flock
# conflicts between two descriptors even in one process, so a second claim here shares
# the first's.
_CLAIMS: dict[str, tuple[int, int]] = {}
_CLAIMS_LOCK = threading.Lock()


class CheckpointManager:
    """Saves training state under ``directory`` as ``ckpt-<step>.pt`` and finds the newest.

    - ``save`` serialises the state and writes it and its SHA-256 (``ckpt-<step>.pt.sha256``)
      to fsynced temp files first; only when they are complete are they renamed into
      place, the digest first. A full disk therefore fails the save before anything is
      replaced: the checkpoints already there stay valid. A step saved again (the
      end-of-run record of a step its periodic save wrote) never leaves a file that fails
      its digest: the digest file first lists the old digest and the new, then the data
      is replaced, then the digest file names the new one alone, so a crash at any point
      leaves a file that loads. A crash between the renames of a new step leaves an
      orphan digest, which is skipped. State equal to the file already saved
      for its step is not written again. A file that changes afterwards (bit rot, a torn
      copy) is caught at load. Then it prunes: the file just written is always kept, with
      the newest ``keep - 1`` *valid* others; an invalid one is renamed to ``*.rejected``
      (kept for a look, never loaded again), older ones are deleted.
    - The per-record arrays a task names in ``extra["per_record"]`` are saved once in a
      side file named by their SHA-256, before the checkpoint that names them, and pruned
      with the last checkpoint naming them (``checkpoint_arrays``); a checkpoint set
      aside takes them as links.
    - Whatever is named like a checkpoint but is not a regular file (a folder, a FIFO, a
      link to a device) is renamed ``*.rejected`` with a warning naming it, when the
      folder is next read or written: it never blocks a read or fails a later save.
    - ``load_latest`` loads with ``torch.load(weights_only=True)``: a file holding a
      pickled custom object is refused, not executed. A newest file that is torn, corrupt,
      not a regular file, of another schema, holds non-finite weights, or that ``accept``
      refuses (it does not fit the model) is skipped with a warning naming it and why,
      and the one before it is used.
    - ``remove_stale_temps`` deletes temp files that interrupted saves left behind.
    """

    def __init__(self, directory: Path | str, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep!r}: must be >= 1 (the number of checkpoints to keep)")
        self.directory = Path(directory)
        self.keep = keep
        # Files this manager wrote or read valid, with their size and mtime then: pruning
        # trusts them while both are unchanged instead of loading each again at every save.
        self._written: dict[Path, tuple[int, int]] = {}
        # Per-record side files (checkpoint_arrays) this manager wrote or checked, with
        # their identity then: a later save of the same arrays writes none.
        self._sides: dict[Path, Any] = {}
        self._claim: str | None = None  # our key in _CLAIMS while we are the writer

    def claim(self, owner: str) -> None:
        """Become the folder's one writer until :meth:`release` (or this process dies):
        an ``flock`` on ``writer.lock`` in it. Raises :class:`CheckpointFolderBusy` at
        once, naming the holder's pid and ``owner`` text, when another process holds it.
        The kernel drops the lock with its holder, ``kill -9`` included. Within one
        process the claim is shared (an agent that claims its folder, then ``fit()`` on a
        checkpoint in it): one flock, released with the last claim."""
        if self._claim is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / WRITER_LOCK
        key = str(path.resolve())
        record = {"pid": os.getpid(), "owner": owner}
        with _CLAIMS_LOCK:
            held = _CLAIMS.get(key)
            if held is not None:  # this process is the writer already
                _CLAIMS[key] = (held[0], held[1] + 1)
                self._claim = key
                return
            try:
                fd = take_lock(path, WRITER_LOCK_FILE, wait=False, record=record)
            except LockBusy as busy:
                raise CheckpointFolderBusy(
                    path,
                    busy.holder,
                    f"checkpoint folder {self.directory} is written by {_holder(busy.holder)}; "
                    f"one writer per folder (lock file {path})",
                ) from None
            _CLAIMS[key] = (fd, 1)
            self._claim = key

    def release(self) -> None:
        """Stop being the folder's writer (the lock file stays; its lock goes with the
        process's last claim)."""
        if self._claim is None:
            return
        with _CLAIMS_LOCK:
            fd, count = _CLAIMS.pop(self._claim)
            if count > 1:
                _CLAIMS[self._claim] = (fd, count - 1)
            else:
                os.close(fd)
            self._claim = None

    def path_for(self, step: int) -> Path:
        """The file name of the checkpoint at ``step``; names sort by step."""
        if step < 0 or step >= 10**10:
            raise ValueError(f"step={step!r}: must be in [0, 10**10)")
        return self.directory / f"ckpt-{step:010d}.pt"

    def checkpoints(self) -> list[Path]:
        """The checkpoint files present, oldest first (temp files, FIFOs and folders are not)."""
        return list_checkpoints(self.directory)

    def save(self, state: Mapping[str, Any]) -> Path:
        """Write ``state`` (which must hold ``step``) and its digest atomically, then prune."""
        if keys.STEP not in state:
            raise ValueError(f"a checkpoint needs the key {keys.STEP!r}; got {sorted(state)}")
        final = self.path_for(int(state[keys.STEP]))
        # The per-record arrays a task names go to their side file, written once for
        # every save of the same arrays, before the checkpoint that names it (issue 90).
        stored, arrays, named = split_arrays(state, self.directory)
        if arrays is not None:
            write_arrays(self.directory, arrays, named, self._sides)
        buffer = io.BytesIO()  # in memory once, so the digest is of exactly these bytes
        torch.save(stored, buffer)
        data = buffer.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        self._set_aside_irregular()
        written = write_pair(final, data, digest)
        keep_saved(stored, digest)  # a resident process's gate loads it next (issue 90)
        note_saved(final, digest)  # the run's evaluation is of these bytes: not hashed again
        if not written:
            return final  # this very state is saved already: written once, not twice
        # After the pair: a crash leaves none, not a wrong one.
        write_summary(final, digest, stored, digests_of(stored))
        signature = file_signature(final)
        if signature is not None:
            self._written[final] = signature
        self._prune(final)
        return final

    def _prune(self, written: Path) -> None:
        kept = [written]
        for path in reversed(self.checkpoints()):
            if path == written:
                continue
            if len(kept) >= self.keep:
                self._delete(path)
            elif self._usable(path):
                kept.append(path)
        prune_arrays(self.directory, self.checkpoints())

    def remove(self, path: Path) -> None:
        """Delete the checkpoint ``path`` and its digest, and the per-record side files
        no checkpoint left names; one already gone is not an error (under torchrun every
        rank may remove the same file)."""
        self._delete(path)
        prune_arrays(self.directory, self.checkpoints())

    def _delete(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        digest_path(path).unlink(missing_ok=True)
        summary_path(path).unlink(missing_ok=True)
        self._written.pop(path, None)

    def set_aside(self, path: Path, into: Path) -> Path:
        """Move the checkpoint ``path`` and its digest into the folder ``into`` (made if
        missing), out of this manager's sight but kept; return its new path."""
        into.mkdir(parents=True, exist_ok=True)
        link_arrays(path, into)  # its per-record arrays, before the file that names them
        moved = into / path.name
        os.replace(path, moved)
        for side in (digest_path, summary_path):
            if side(path).exists():
                os.replace(side(path), side(moved))
        self._written.pop(path, None)
        prune_arrays(self.directory, self.checkpoints())
        return moved

    def _usable(self, path: Path) -> bool:
        """Whether ``path`` loads: trusted unread while its size and mtime are those it had
        when this manager wrote it or found it valid; an unusable file is renamed
        ``*.rejected`` and its digest and summary dropped."""
        signature = file_signature(path)
        if signature is not None and self._written.get(path) == signature:
            return True
        try:
            load_checkpoint(path)
        except CheckpointError as error:
            aside = path.with_name(path.name + REJECTED_SUFFIX)
            logger.warning("checkpoint %s is unusable (%s); renamed to %s", path, error, aside)
            path.replace(aside)
            digest_path(path).unlink(missing_ok=True)
            summary_path(path).unlink(missing_ok=True)
            return False
        if signature is not None:  # found valid: the next prune need not read it again
            self._written[path] = signature
        return True

    def remove_stale_temps(self) -> list[Path]:
        """Delete the ``.tmp-*`` files of interrupted saves older than ``STALE_TEMP_SECONDS``.

        Younger ones may belong to a save under way in another process; they are left,
        unless this manager has :meth:`claim` ed the folder: then no other process writes
        it, and every temp file is a killed save's, whatever its age.
        """
        if not self.directory.is_dir():
            return []
        older_than = -1.0 if self._claim is not None else STALE_TEMP_SECONDS
        removed = []
        now = time.time()
        for path in self.directory.glob(".tmp-*"):
            try:
                if path.is_file() and now - path.stat().st_mtime > older_than:
                    path.unlink()
                    removed.append(path)
            except OSError:
                continue  # gone already, or not ours to delete
        if removed:
            logger.info("removed %d stale temp file(s) from %s", len(removed), self.directory)
        return removed

    def _set_aside_irregular(self) -> None:
        """Rename whatever is named like a checkpoint but is no regular file ``*.rejected``."""
        if not self.directory.is_dir():
            return
        for path in self.directory.iterdir():
            if CHECKPOINT_NAME.match(path.name) and not path.is_file():
                aside = _free_name(path.with_name(path.name + REJECTED_SUFFIX))
                try:
                    path.rename(aside)
                except OSError as error:  # not ours to move: still never read or written
                    logger.warning("%s is no checkpoint and cannot be moved: %s", path, error)
                    continue
                digest_path(path).unlink(missing_ok=True)
                logger.warning(
                    "%s is named like a checkpoint but is not a regular file (%s); renamed to %s",
                    path,
                    _kind(aside),
                    aside,
                )

    def latest_summary(self) -> dict[str, Any] | None:
        """The newest checkpoint's step, counters, precision and loss scale
        (``checkpoint_files.summarize``), from its summary file when it has a current one,
        else from reading the newest valid checkpoint; None when there is none. The summary
        file saves a reader without torch a full read, and does not check the file's bytes
        (a newest file gone bad is summarised all the same; ``load_latest`` would skip it)."""
        files = self.checkpoints()
        summary = read_summary(files[-1]) if files else None
        if summary is not None:
            return summary
        found = self.load_latest()
        return summarize(found[0]) if found is not None else None

    def load_latest(
        self, accept: Accept | None = None, loaded: Loaded | None = None
    ) -> tuple[dict[str, Any], Path] | None:
        """The newest valid checkpoint that ``accept`` takes, or None (warning if files were bad).

        Each bad file is skipped with a warning, and so is each whose contents
        ``accept(state, path)`` refuses with :class:`CheckpointError` (a shape mismatch, a
        missing key of the task's); the next older one is tried. ``loaded``: a checkpoint
        the caller read already (:func:`read_checkpoint`); that file is not read again
        while its size and mtime are those it had then.
        """
        self._set_aside_irregular()
        for path in reversed(self.checkpoints()):
            signature = file_signature(path)
            try:
                if loaded is not None and (loaded.path, loaded.signature) == (path, signature):
                    state = loaded.state
                else:
                    state = load_checkpoint(path)
                if signature is not None:  # read and found valid: pruning need not read it again
                    self._written.setdefault(path, signature)
                if accept is not None:
                    accept(state, path)
            except CheckpointError as error:
                logger.warning("skipping checkpoint %s: %s", path, error)
                continue
            return state, path
        files = self.checkpoints()
        if files:
            logger.warning(
                "no valid checkpoint in %s (%d file(s) rejected); starting fresh",
                self.directory,
                len(files),
            )
        return None


def _holder(record: Mapping[str, object] | None) -> str:
    """Who holds the writer lock, as its lock file says (read within its bound, retried
    while the holder writes it)."""
    try:
        assert record is not None
        return f"pid {int(str(record['pid']))} ({record['owner']})"
    except (AssertionError, KeyError, TypeError, ValueError):
        return "another process (its lock file names none)"


def _free_name(path: Path) -> Path:
    """``path``, or ``path.N`` for the first N not taken."""
    candidate, n = path, 1
    while candidate.exists() or candidate.is_symlink():
        candidate, n = path.with_name(f"{path.name}.{n}"), n + 1
    return candidate


def _kind(path: Path) -> str:
    if path.is_symlink():
        return f"a link to {os.readlink(path)}"
    if path.is_dir():
        return "a folder"
    return "a FIFO" if stat.S_ISFIFO(path.stat().st_mode) else "a special file"
