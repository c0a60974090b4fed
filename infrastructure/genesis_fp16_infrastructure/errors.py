"""The errors a caller of the library handles, in one module: each is one line for the
user (its message names what is wrong), and the library raises it from the component that
found it. The daemon catches them here (through its door, ``api``); a plugin meets the
two it may see, ``CheckpointError`` and ``PrecisionError``, through ``genesis_fp16.plugin_api``.

The plugin contract's own refusals (``TrainRequestError``, ``RecordLossesError``) stay with
the contract that defines what a plugin returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


class DataError(Exception):
    """Input the user has to fix: a missing path, an unreadable file, nothing to train on."""


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: unreadable, corrupt, of another schema, unfit."""


class PrecisionError(ValueError):
    """A precision request or a model that cannot run as asked; the message says why."""


class ExecutionError(ValueError):
    """``cuda_graph='on'`` (or ``compile='on'``) for a run that cannot be captured; the
    message says why and ``obstacle`` is the reason alone."""

    def __init__(self, message: str, obstacle: str | None = None) -> None:
        super().__init__(message)
        self.obstacle = obstacle or message


class BundleError(ValueError):
    """A bundle that cannot be used: missing, too big, not a bundle, or damaged."""


class ProbeError(Exception):
    """The probe cannot run on what the agent gave it."""


class LockBusy(Exception):
    """Another process holds the lock at ``path``; ``holder`` is what its file says (or None)."""

    def __init__(self, path: Path, holder: Mapping[str, object] | None, message: str = "") -> None:
        self.path = path
        self.holder = holder
        super().__init__(message or f"{path} is held by {holder or 'another process'}")


class CheckpointFolderBusy(LockBusy, RuntimeError):
    """Another process holds this checkpoint folder's writer lock; the message names it."""


class ServedPointerError(ValueError):
    """A pointer file that cannot be read or names nothing: one line naming the file."""
