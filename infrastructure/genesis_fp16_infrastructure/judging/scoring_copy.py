"""What a plugin's ``score_records`` is handed: a private copy of a checkpoint, checked
after it is scored (:func:`score_on_copy`, issue 69), with the plugin's answer checked where
it is received (:func:`losses_on_copy`); :func:`losses_of`, the one way a judged run scores a
model (the served one, its predecessor, a candidate: the records it needs asked, a refusal
the run's in one line); and the sweep of the copies a killed run left (:func:`sweep_copies`).

A plugin that wrote to the checkpoint it scored got that checkpoint served with bytes its
digest file no longer names, and every later run of the agent failed to load it. So the
judged run never hands a plugin the file the pointer serves or the gate judges: it
copies the checkpoint (with its digest and summary files, which the plugin's loader
reads) into a fresh hidden folder of the agent's checkpoint folder, takes the copy's
SHA-256, lets the plugin score the copy, and reads it back to compare with the bytes it
wrote. Different bytes, or no file, end the run in one line
(:class:`CheckpointChangedError`, a ``TrainRequestError``) that names the plugin and the
checkpoint, even where the plugin's own scoring failed; the altered copy is deleted with
its folder. The original files were never the plugin's to write, so the served model and
the candidate's checkpoint are as they were.

A copy rather than a check of the original in place: a check alone detects a plugin that
altered the served checkpoint while scoring it, but cannot undo it, and the agent's
later runs would fail all the same. The copy costs one write of the checkpoint a score,
and its read and hash where the judged run did not read it already: it reads the records
the checkpoint names first (``trained_ids.trained_ids``), and the copy is written from the
bytes that load read and checked (``checkpoint_load.read_in_block``; issue 90). A plugin
that deliberately looks for the agent's files elsewhere (``request.checkpoint_dir``) is
not stopped by it: a plugin runs in the daemon's process and could do anything there.
A copy left by a killed process is a hidden ``.scoring-*`` folder that nothing reads:
the agent's next judged run removes it (:func:`sweep_copies`) before it scores anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.contract.judging import JudgedPlugin
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError, plugin_name
from genesis_fp16_infrastructure.contract.record_losses import RecordLosses, RecordLossesError
from genesis_fp16_infrastructure.contract.split import ScoreOnly
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.training.checkpoint_arrays import link_arrays
from genesis_fp16_infrastructure.training.checkpoint_files import digest_path, summary_path
from genesis_fp16_infrastructure.training.checkpoint_load import (
    note_hashed,
    read_in_block,
    stat_signature,
)

T = TypeVar("T")
logger = logging.getLogger(__name__)


SCORING_PREFIX = ".scoring-"  # <checkpoint_dir>/.scoring-*/: the copy, while it is scored


class CheckpointChangedError(TrainRequestError):
    """The plugin changed (or removed) the copy of a checkpoint it was given to score."""


def score_on_copy(score: Callable[[Path], T], checkpoint: Path, folder: Path, who: str) -> T:
    """``score(copy)`` on a private copy of ``checkpoint`` made in ``folder``; raises
    :class:`CheckpointChangedError` naming ``who`` (the agent and plugin) and the
    checkpoint when the copy's bytes differ after scoring, whatever ``score`` did. The
    copy is read back after scoring and compared with the bytes written, byte for byte
    (a read and a compare where a hash of it took 0.4 ms at a 670 KB checkpoint)."""
    with tempfile.TemporaryDirectory(
        prefix=SCORING_PREFIX, dir=folder, ignore_cleanup_errors=True
    ) as temp:
        copy = Path(temp) / checkpoint.name
        data, before = _copied(checkpoint, Path(temp))
        # The plugin's load of the copy, unchanged, need not hash it again (issue 90).
        note_hashed(copy, before, stat_signature(copy))
        try:
            return score(copy)
        finally:
            if not _holds(copy, data):
                raise CheckpointChangedError(
                    f"{who}: score_records changed the checkpoint it scored ({checkpoint}, "
                    f"given as a copy: sha256 {before[:16]} before, {_sha256(copy)[:16]} "
                    "after): the run is refused and nothing is served; score_records must "
                    "only read it"
                )


def losses_on_copy(
    score: Callable[[Path], object], checkpoint: Path, folder: Path, who: str
) -> RecordLosses:
    """:func:`score_on_copy` of a plugin's ``score_records``, its answer checked where it
    is received: a :class:`RecordLosses`, copied and checked again on a copy of its own
    (``RecordLosses.copy_of``: the plugin's object may have been changed since it was
    built, object.__setattr__ on a frozen one), which the run alone holds. Anything else
    raises RecordLossesError, in one line."""
    losses = score_on_copy(score, checkpoint, folder, who)
    if not isinstance(losses, RecordLosses):
        raise RecordLossesError(
            f"score_records returned a {type(losses).__name__}, not RecordLosses"
        )
    return RecordLosses.copy_of(losses)


def losses_of(
    plugin: JudgedPlugin,
    checkpoint: Path,
    request: TrainRequest,
    only: Collection[str] | ScoreOnly | None = None,
) -> RecordLosses:
    """The plugin's losses of ``checkpoint``, scored on a copy of it and checked as they
    are received (``scoring_copy.losses_on_copy``); a refusal is the run's, in one line
    (a TrainRequestError; a plugin that changed the copy: CheckpointChangedError, which
    always ends the run). ``only``: the ids of
    the records the run needs (the request's ``score_only``, or one made of their rows in
    a listing: ``ScoreOnly.of_rows``; the plugin may score more); None: every record."""
    who = f"{request.agent}: plugin {plugin_name(plugin)}"
    if only is not None:
        asked = only if isinstance(only, ScoreOnly) else ScoreOnly(frozenset(only))
        request = replace(request, score_only=asked)
    try:  # checked where it is received, a copy of its own (losses_on_copy)
        return losses_on_copy(
            lambda copy: plugin.score_records(copy, request),
            checkpoint,
            Path(request.checkpoint_dir),
            who,
        )
    except CheckpointChangedError:
        raise
    except (RecordLossesError, TrainRequestError, OSError, ValueError) as exc:
        raise TrainRequestError(f"{request.agent}: cannot score {checkpoint}: {exc}") from None


def copy_checkpoint(checkpoint: Path, folder: Path) -> None:
    """``checkpoint`` with its digest and summary files (which its loader reads) in
    ``folder``, and its per-record side files as links (``checkpoint_arrays``: never
    written in place): the served model in a candidate that continues it."""
    _copy_side_files(checkpoint, folder)
    link_arrays(checkpoint, folder)
    if checkpoint.is_file():  # the checkpoint last: a digest is there before its file
        shutil.copy2(checkpoint, folder / checkpoint.name)


def _copy_side_files(checkpoint: Path, folder: Path) -> None:
    """The checkpoint's digest and summary files, where they are, copied into ``folder``."""
    for path in (digest_path(checkpoint), summary_path(checkpoint)):
        if path.is_file():
            shutil.copy2(path, folder / path.name)


def _copied(checkpoint: Path, folder: Path) -> tuple[bytes | None, str]:
    """:func:`copy_checkpoint` into ``folder``, the checkpoint's bytes read once: written
    to the copy, with the SHA-256 of the bytes written (None and "none": no regular file
    to copy). In the judged run's reusing_loads() block, after it read the records the
    checkpoint names (``trained_ids.trained_ids``), the bytes that load read and checked, with
    their hash, while the digest file copied beside them names them (``read_in_block``):
    not read nor hashed again (issue 90). A copy that does not hold those bytes after
    the plugin's scoring is refused all the same (:func:`score_on_copy` reads it back)."""
    _copy_side_files(checkpoint, folder)  # the checkpoint last: a digest is there first
    target = folder / checkpoint.name
    read = read_in_block(checkpoint, named_in=digest_path(target))
    if read is None:
        try:
            if not stat.S_ISREG(os.stat(checkpoint).st_mode):
                return None, "none"  # a FIFO put in its place is never opened: the read would block
            data = checkpoint.read_bytes()
        except OSError:
            return None, "none"
        read = data, hashlib.sha256(data).hexdigest()
    target.write_bytes(read[0])
    with contextlib.suppress(OSError):  # times only; a checkpoint gone since keeps the copy's
        shutil.copystat(checkpoint, target)
    return read


def _holds(copy: Path, data: bytes | None) -> bool:
    """Whether ``copy`` is a regular file of the bytes ``data`` (None: whether it is no
    regular file, as none was copied); a FIFO put in its place is never opened."""
    try:
        if not stat.S_ISREG(os.lstat(copy).st_mode):
            return data is None
        return data is not None and copy.read_bytes() == data
    except OSError:
        return data is None


def sweep_copies(folder: Path) -> None:
    """Remove the ``.scoring-*`` folders a killed run left in ``folder`` (an agent's
    checkpoint folder, which one run at a time scores in); a link of that name is not
    followed, only unlinked. How many went is logged, as is an entry that cannot go."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(SCORING_PREFIX)]
    except OSError:  # no checkpoint folder yet
        return
    removed = 0
    for entry in entries:
        try:
            files.remove_entry(Path(entry.path))
            removed += 1
        except OSError as exc:
            logger.warning("cannot remove %s, left by a killed scoring: %s", entry.path, exc)
    if removed:
        logger.info("removed %d checkpoint copies a killed scoring left in %s", removed, folder)


def _sha256(path: Path) -> str:
    """The file's hex SHA-256; "none" when it is not a regular file any more (a FIFO put
    in its place is never opened: the read would block)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return "none"
        with path.open("rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()
    except OSError:
        return "none"
