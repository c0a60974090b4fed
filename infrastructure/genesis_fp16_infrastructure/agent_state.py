"""One agent's state folder, read in one call: what its next run starts from.

Beside an agent's checkpoints a daemon keeps a few small files: the precision guard's
memory of a demotion (``training/precision/precision_memory.py``), the loss scale the
last fp16 run ended with (``training/precision/carried_scale.py``) and the served-model
pointer naming the checkpoint the next run resumes (``served.py``). Planning a run needs
each of them; :func:`read_agent_state` reads them together and answers one
:class:`AgentState`, so that a planner asks one record instead of reaching into three
modules in turn. Where the files are is the caller's (:class:`AgentStateFiles`), and so
is what an unusable file means (set aside, a floor, a warning): the record says what was
found, and why a file could not be used, instead of raising::

    >>> files = AgentStateFiles(Path("state/precision_state.json"), Path("state/loss_scale.json"))
    >>> state = read_agent_state(files)  # no files yet: nothing remembered, nothing carried
    >>> state.memory, state.carried, state.resume
    (None, None, None)

Importable without torch; torch is imported only to read a resume point that has no
summary file (``CheckpointManager.latest_summary``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.recipes.retrain.served import ServedPointerError, served_checkpoint
from genesis_fp16_infrastructure.training.precision.carried_scale import (
    CarriedScale,
    read_carried_scale,
)
from genesis_fp16_infrastructure.training.precision.precision_memory import (
    PrecisionMemory,
    read_precision_memory,
)
from genesis_fp16_infrastructure.training.precision.precision_names import RequestedName


@dataclass(frozen=True)
class AgentStateFiles:
    """Where one agent's state files are. ``checkpoint_dir``: the folder whose served
    model the next run resumes, when the caller asks for that resume point (None: it
    does not, and :attr:`AgentState.resume` is None)."""

    precision_state: Path
    loss_scale: Path
    checkpoint_dir: Path | None = None


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint folder a run resumes from and its newest checkpoint's summary.

    - ``folder``: the folder of the checkpoint the served-model pointer names, else the
      agent's checkpoint folder itself (no pointer, or one that cannot be followed).
    - ``pointer_error``: why the pointer could not be followed (None: it could, or
      there is none); the folder is then the agent's checkpoint folder.
    - ``summary``: ``CheckpointManager.latest_summary`` of ``folder`` (step, counters,
      precision, loss scale); None when it holds no checkpoint.
    """

    folder: Path
    pointer_error: str | None
    summary: Mapping[str, Any] | None


@dataclass(frozen=True)
class AgentState:
    """What an agent's state folder holds for its next run.

    - ``memory``: the precision guard's remembered demotion (None: none remembered);
      ``memory_error``: why the memory file is unusable (torn, not JSON, a folder, a
      FIFO, a link, over its bound), and ``memory`` is then None.
    - ``carried``: the loss scale carried from the last fp16 run (None: none, or a file
      that cannot be read, which counts as a fresh start).
    - ``resume``: where the next run resumes (None: not asked for).
    """

    memory: PrecisionMemory | None
    memory_error: str | None
    carried: CarriedScale | None
    resume: ResumePoint | None

    def initial_scale(self, requested: RequestedName) -> float | None:
        """The scale a run asking ``requested`` starts at: the carried one when the carried
        run asked the same (None: the scaler's own)."""
        return None if self.carried is None else self.carried.for_request(requested)


def read_agent_state(files: AgentStateFiles) -> AgentState:
    """The :class:`AgentState` under ``files``; an unusable memory file or pointer is
    reported in the record. Raises ``OSError`` (or ``CheckpointError``) only when the
    resume point's checkpoints cannot be read at all."""
    try:
        memory, memory_error = read_precision_memory(files.precision_state), None
    except ValueError as exc:  # UnusableStateFile too
        memory, memory_error = None, str(exc)
    carried = read_carried_scale(files.loss_scale)
    resume = None if files.checkpoint_dir is None else read_resume_point(files.checkpoint_dir)
    return AgentState(memory, memory_error, carried, resume)


def read_resume_point(checkpoint_dir: Path) -> ResumePoint:
    """The :class:`ResumePoint` of an agent whose checkpoints are under ``checkpoint_dir``
    (se_darwin's served model lives in ``candidates/``, where its pointer says)."""
    try:
        served = served_checkpoint(checkpoint_dir)
        folder, error = (checkpoint_dir if served is None else served.parent), None
    except ServedPointerError as exc:
        served, folder, error = None, checkpoint_dir, str(exc)
    # The checkpoint module imports torch; a caller that asks no resume point never pays.
    from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager

    if served is not None:  # the file the pointer names, never a newer one beside it
        return ResumePoint(folder, error, _summary_of(served))
    return ResumePoint(folder, error, CheckpointManager(folder).latest_summary())


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
