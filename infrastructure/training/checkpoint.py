"""One file per checkpoint: written atomically, the last N kept, loaded without unpickling.

::

    manager = CheckpointManager(Path("state/checkpoints"), keep=3)
    path = manager.save({"schema_version": SCHEMA_VERSION, "step": 1200, ...})
    found = manager.load_latest()  # (state, path), or None when there is no valid file
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from infrastructure.atomic import write_atomic
from infrastructure.training import checkpoint_keys as keys

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^ckpt-(\d{10})\.pt$")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: unreadable, not a dict, or of another schema."""


class CheckpointManager:
    """Saves training state under ``directory`` as ``ckpt-<step>.pt`` and finds the newest.

    - ``save`` writes a temp file in the same folder, flushes and fsyncs it, renames it
      over the final name with ``os.replace`` and fsyncs the folder, so a crash leaves
      either the old set of files or the new one, never a half-written checkpoint under
      a real name. Then it deletes all but the newest ``keep`` checkpoints.
    - ``load_latest`` loads with ``torch.load(weights_only=True)``: a file holding a
      pickled custom object is refused, not executed. A newest file that is torn,
      corrupt or of another schema version is skipped with a warning naming it, and the
      one before it is used.
    """

    def __init__(self, directory: Path | str, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep!r}: must be >= 1 (the number of checkpoints to keep)")
        self.directory = Path(directory)
        self.keep = keep

    def path_for(self, step: int) -> Path:
        """The file name of the checkpoint at ``step``; names sort by step."""
        if step < 0 or step >= 10**10:
            raise ValueError(f"step={step!r}: must be in [0, 10**10)")
        return self.directory / f"ckpt-{step:010d}.pt"

    def checkpoints(self) -> list[Path]:
        """The checkpoint files present, oldest first (temp files are not listed)."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if _NAME.match(p.name))

    def save(self, state: Mapping[str, Any]) -> Path:
        """Write ``state`` (which must hold ``step``) atomically and prune old files."""
        if keys.STEP not in state:
            raise ValueError(f"a checkpoint needs the key {keys.STEP!r}; got {sorted(state)}")
        final = self.path_for(int(state[keys.STEP]))
        write_atomic(final, lambda handle: torch.save(dict(state), handle))
        self._prune()
        return final

    def _prune(self) -> None:
        for old in self.checkpoints()[: -self.keep]:
            old.unlink(missing_ok=True)

    def load_latest(self) -> tuple[dict[str, Any], Path] | None:
        """The newest valid checkpoint and its path, or None (with a warning if files were bad)."""
        files = self.checkpoints()
        for path in reversed(files):
            try:
                return load_checkpoint(path), path
            except CheckpointError as error:
                logger.warning("skipping checkpoint %s: %s", path, error)
        if files:
            logger.warning(
                "no valid checkpoint in %s (%d file(s) rejected); starting fresh",
                self.directory,
                len(files),
            )
        return None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load one checkpoint with ``weights_only=True`` and check its schema version.

    Raises :class:`CheckpointError` for a file that cannot be used.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torn file, garbage bytes, refused pickle: all unusable
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(f"cannot be loaded ({type(error).__name__}: {first_line})") from error
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
    return state
