"""The served-model pointer's record and codec: ``served.json`` in an agent's checkpoint
folder names the checkpoint Genesis uses (the retrain recipe's ``served.py`` owns the
lifecycle: serve, roll back, pin, prune, under one lock).

The pointer is part of the agent folder this package owns: every reader (the daemon's
plan, the prediction API, the ``model`` command) reads it here, through the hardened
reader, and one that cannot be followed raises :class:`ServedPointerError`, one line
that names the file and the command that repairs it. JSON only, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.files import UnusableStateFile
from genesis_fp16_infrastructure.agent_folder.layout import (
    ASIDE_SUFFIX,
    CANDIDATES_FOLDER,
    CHECKPOINTS_FOLDER,
    SERVED_POINTER,
)

POINTER_NAME = SERVED_POINTER.name
POINTER_VERSION = 1
ASIDE_NAME = POINTER_NAME + ASIDE_SUFFIX  # an unusable pointer, set aside until a repair
REPAIR = "`genesis-fp16 model promote AGENT ID` or `genesis-fp16 model rollback AGENT` repairs it"


class ServedPointerError(ValueError):
    """A pointer file that cannot be read or names nothing: one line naming the file."""


@dataclass(frozen=True)
class ServedPointer:
    """What ``served.json`` holds: the served entry, the ones served before it, and the
    operator's pin (None: the daemon's gate and live watch may replace the served model)."""

    served: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    pinned: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"version": POINTER_VERSION, "served": self.served, "history": self.history}
        if self.pinned is not None:
            data["pinned"] = self.pinned
        return data


def pointer_path(folder: Path) -> Path:
    return Path(folder) / POINTER_NAME


def candidates_dir(folder: Path) -> Path:
    return Path(folder) / CANDIDATES_FOLDER


def read_pointer(folder: Path) -> ServedPointer | None:
    """The folder's pointer; None when it has none yet (no model was ever promoted).
    A pointer that exists but cannot be read raises :class:`ServedPointerError`: a served
    model is never guessed."""
    path = pointer_path(folder)
    if not path.exists() and not path.is_symlink() and aside_path(folder).exists():
        raise ServedPointerError(
            f"served-model pointer {str(path)!r} was set aside as unusable "
            f"({str(aside_path(folder))!r}); {repair_hint(folder)}"
        )
    return parse_pointer(path)


def parse_pointer(path: Path) -> ServedPointer | None:
    try:
        data = files.read_json(path, SERVED_POINTER)
    except UnusableStateFile as exc:
        raise ServedPointerError(
            f"served-model pointer {str(path)!r} unreadable: {exc}; {repair_hint(path.parent)}"
        ) from None
    if data is None:
        return None
    if not isinstance(data, dict) or data.get("version") != POINTER_VERSION:
        raise ServedPointerError(
            f"served-model pointer {str(path)!r} is not version {POINTER_VERSION} "
            f"(found {data.get('version') if isinstance(data, dict) else type(data).__name__!r}); "
            f"{repair_hint(path.parent)}"
        )
    served, history = data.get("served"), data.get("history", [])
    if not isinstance(served, dict) or not isinstance(served.get("checkpoint"), str):
        raise ServedPointerError(
            f"served-model pointer {str(path)!r} names no checkpoint; {repair_hint(path.parent)}"
        )
    if not isinstance(history, list):
        raise ServedPointerError(
            f"served-model pointer {str(path)!r}: history is not a list; {repair_hint(path.parent)}"
        )
    pinned = data.get("pinned")
    return ServedPointer(
        served,
        [h for h in history if isinstance(h, dict)],
        pinned if isinstance(pinned, dict) else None,
    )


def served_checkpoint(folder: Path) -> Path | None:
    """The checkpoint file the pointer names (None: no pointer); ServedPointerError when
    the file it names is gone."""
    pointer = read_pointer(folder)
    return None if pointer is None else checkpoint_of(folder, pointer)


def checkpoint_of(folder: Path, pointer: ServedPointer) -> Path:
    """The checkpoint file ``pointer`` (read from ``folder``) names; ServedPointerError
    when it is gone."""
    path = Path(folder) / pointer.served["checkpoint"]
    if not path.is_file():
        raise ServedPointerError(
            f"served-model pointer {str(pointer_path(folder))!r} names {str(path)!r}, "
            f"which is not there; {repair_hint(folder)}"
        )
    return path


def repair_hint(folder: Path) -> str:
    """The commands that repair the pointer of ``folder``, naming its agent where the
    folder is a state folder's (``<state>/agents/<agent>/checkpoints``)."""
    folder = Path(folder)
    agent = folder.parent.name if folder.name == CHECKPOINTS_FOLDER else "AGENT"
    return REPAIR.replace("AGENT", agent)


def aside_path(folder: Path) -> Path:
    return Path(folder) / ASIDE_NAME


def write_pointer(folder: Path, pointer: ServedPointer) -> None:
    """Replace the pointer atomically (the old one or the new one, never neither). Callers
    that read it first hold :func:`pointer_lock` around both (:func:`update_pointer`)."""
    files.write_json(pointer_path(folder), SERVED_POINTER, pointer.to_json())
