"""The served model as a run sees it: from the pointer its plan read, once.

A run of the retrain loop asks which model Genesis uses now (:func:`served_model`) to
plan its candidate, to watch it live and to gate against it. The pointer comes from the
request's snapshot (``contract.agent_snapshot``: read once by the job's plan, handed to
a child in its run file), and is read here only when no plan read it (a test, a caller
of ``train`` without one). A folder written before the pointer existed adopts its
newest checkpoint (:func:`_adopt`). Split from promotion.py, which plans and judges
candidates against what this answers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder.lifecycle import (
    ServedPointer,
    ServedPointerError,
    checkpoint_of,
    read_pointer,
    serve,
)
from genesis_fp16_infrastructure.contract.agent_snapshot import AgentSnapshot
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
from genesis_fp16_infrastructure.world_model.predict import accept_world_model

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Served:
    """The served model: its pointer entry, checkpoint, and the checkpoint the gate
    scores (the split run's, for a final_fit=whole model); ``history``: the models
    served before it, newest first (the gate's best-earlier comparison)."""

    entry: Mapping[str, Any]
    checkpoint: Path
    judged: Path
    pinned: Mapping[str, Any] | None = None  # the operator's pin: the gate only reports
    history: tuple[Mapping[str, Any], ...] = ()


def served_model(root: Path, snapshot: AgentSnapshot | None = None) -> Served | None:
    """The pointer's model, or None before the first promotion; an unreadable pointer or
    a missing file is a one-line refusal, never a guess at another model. ``snapshot``:
    the pointer as the job's plan read it (None: read now)."""
    try:
        if snapshot is not None and snapshot.pointer_error is not None:
            raise ServedPointerError(snapshot.pointer_error)
        pointer = read_pointer(root) if snapshot is None else snapshot.pointer
        checkpoint = None if pointer is None else checkpoint_of(root, pointer)
    except ServedPointerError as exc:
        raise TrainRequestError(str(exc)) from None
    if pointer is None or checkpoint is None:
        return _adopt(root)
    return _of_pointer(root, pointer, checkpoint)


def _of_pointer(root: Path, pointer: ServedPointer, checkpoint: Path) -> Served:
    """The :class:`Served` of ``pointer`` (read from ``root``), whose served entry names
    ``checkpoint``."""
    judged = Path(root) / str(pointer.served.get("judged") or pointer.served["checkpoint"])
    chosen = judged if judged.is_file() else checkpoint
    return Served(pointer.served, checkpoint, chosen, pointer.pinned, tuple(pointer.history))


def _adopt(root: Path) -> Served | None:
    """A folder written before the pointer existed: its newest valid world-model checkpoint
    is what was served, and becomes the pointer's (logged), so that no upgrade leaves the
    prediction API without a model while the first candidate trains."""
    found = CheckpointManager(Path(root)).load_latest(accept_world_model)
    if found is None:
        return None
    path = found[1]
    entry = {"id": f"adopted-{path.stem}", "checkpoint": path.name, "judged": path.name}
    serve(root, entry, "adopted")
    logger.warning("no served.json in %s: serving its newest checkpoint %s", root, path)
    return Served({**entry, "how": "adopted"}, path, path)
