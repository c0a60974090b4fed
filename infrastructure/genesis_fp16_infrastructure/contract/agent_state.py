"""One agent's state folder, read in one call: what its next run starts from.

Planning a run needs the precision guard's memory of a demotion
(``training/precision/precision_memory.py``), the loss scale the last fp16 run ended
with (``training/precision/carried_scale.py``) and the served-model pointer naming the
checkpoint the next run resumes (``recipes/retrain/served.py``). :func:`read_snapshot`
reads each of them once and answers one
:class:`~genesis_fp16_infrastructure.contract.agent_snapshot.AgentSnapshot` (the record
types live in the contract: a child process gets the snapshot in its run file). Where
the files are is the caller's (:class:`AgentStateFiles`), and so is what an unusable
file means::

    >>> files = AgentStateFiles(Path("state/precision_state.json"), Path("state/loss_scale.json"))
    >>> state = read_agent_state(files)  # no files yet: nothing remembered, nothing carried
    >>> state.memory, state.carried, state.resume
    (None, None, None)

Importable without torch; torch is imported only to read a resume point that has no
summary file (``CheckpointManager.latest_summary``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder.pointer import (
    ServedPointer,
    ServedPointerError,
    checkpoint_of,
    read_pointer,
)
from genesis_fp16_infrastructure.contract.agent_snapshot import (
    AgentSnapshot,
    AgentState,
    AgentStateFiles,
    ResumePoint,
)
from genesis_fp16_infrastructure.training.precision.carried_scale import read_carried_scale
from genesis_fp16_infrastructure.training.precision.precision_memory import read_precision_memory

__all__ = ["AgentState", "AgentStateFiles", "ResumePoint", "read_agent_state", "read_snapshot"]


def read_snapshot(files: AgentStateFiles) -> AgentSnapshot:
    """The :class:`AgentSnapshot` under ``files`` (its ``data`` left to the plugin's
    check): each file read once, the pointer only with a resume point. An unusable
    memory file or pointer is reported in the record. Raises ``OSError`` (or
    ``CheckpointError``) only when the resume point's checkpoints cannot be read."""
    try:
        memory, memory_error = read_precision_memory(files.precision_state), None
    except ValueError as exc:  # UnusableStateFile too
        memory, memory_error = None, str(exc)
    carried = read_carried_scale(files.loss_scale)
    if files.checkpoint_dir is None:
        return AgentSnapshot(AgentState(memory, memory_error, carried, None))
    pointer, served, error = _read_pointer(files.checkpoint_dir)
    resume = _resume_point(files.checkpoint_dir, served, error)
    return AgentSnapshot(AgentState(memory, memory_error, carried, resume), pointer, error)


def read_agent_state(files: AgentStateFiles) -> AgentState:
    """The :class:`AgentState` part of :func:`read_snapshot`."""
    state = read_snapshot(files).state
    assert state is not None  # read_snapshot always reads it
    return state


def read_resume_point(checkpoint_dir: Path) -> ResumePoint:
    """The :class:`ResumePoint` of an agent whose checkpoints are under ``checkpoint_dir``
    (se_darwin's served model lives in ``candidates/``, where its pointer says)."""
    _, served, error = _read_pointer(checkpoint_dir)
    return _resume_point(checkpoint_dir, served, error)


def _read_pointer(checkpoint_dir: Path) -> tuple[ServedPointer | None, Path | None, str | None]:
    """The pointer, read once, the checkpoint it names, and why it cannot be followed
    (unreadable, or naming a checkpoint that is gone: the pointer is then None)."""
    try:
        pointer = read_pointer(checkpoint_dir)
        served = None if pointer is None else checkpoint_of(checkpoint_dir, pointer)
        return pointer, served, None
    except ServedPointerError as exc:
        return None, None, str(exc)


def _resume_point(checkpoint_dir: Path, served: Path | None, error: str | None) -> ResumePoint:
    # The checkpoint module imports torch; a caller that asks no resume point never pays.
    from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager

    if served is not None:  # the file the pointer names, never a newer one beside it
        return ResumePoint(served.parent, error, _summary_of(served))
    return ResumePoint(checkpoint_dir, error, CheckpointManager(checkpoint_dir).latest_summary())


def _summary_of(path: Path) -> Mapping[str, Any] | None:
    """The summary of one checkpoint file: its summary file, else the file read."""
    from genesis_fp16_infrastructure.training.checkpoint import CheckpointError, load_checkpoint
    from genesis_fp16_infrastructure.training.checkpoint_files import read_summary, summarize

    summary = read_summary(path)
    if summary is not None:
        return summary
    try:
        return summarize(load_checkpoint(path))
    except (CheckpointError, OSError):
        return None
