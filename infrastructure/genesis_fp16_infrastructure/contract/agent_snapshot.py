"""The agent's folder as a job's plan read it, once: :class:`AgentSnapshot`, and its one read.

What a request carries (``TrainRequest.snapshot``): one agent's state folder as a job's
plan read it, once, :class:`AgentSnapshot`. Beside an agent's checkpoints a daemon keeps
a few small files: the precision guard's memory of a demotion, the loss scale the last
fp16 run ended with, the served-model pointer (``served.json``) and the data manifest of
the served model's run (``data_manifest.json``). A job's plan reads them once
(:func:`read_snapshot`, here, and the plugin's ``check_data``) and everything after it
takes this record instead of reading again: the daemon's own checks, the run in the
daemon's process, and a child process, which gets it in its run file
(:meth:`AgentSnapshot.to_json`, inside ``TrainRequest.to_json``)::

    snapshot = replace(read_snapshot(folder, checkpoint_dir), data=DataCheck(scan, None))
    AgentSnapshot.from_json(json.loads(json.dumps(snapshot.to_json()))).data == snapshot.data

- :class:`AgentState`: what the next run starts from (the guard's memory, the carried
  scale, the resume point); the plan folds it into the request, so it stays with the
  plan and does not travel.
- ``pointer``: the served-model pointer as read (None: none, or ``pointer_error`` says
  why it cannot be followed).
- :class:`DataCheck`: the data files scanned once, before the run reads them, and the
  up-to-date verdict taken from them (a result: nothing changed; None: the run trains).

What an unusable file means is the reader's (set aside, a floor, a warning): the record
says what was found, and why a file could not be used, instead of raising. The files
are the agent folder's; the checkpoints whose resume point the next run takes, the caller's::

    >>> folder = AgentFolder(Path("state"), "my_agent")
    >>> state = read_snapshot(folder).state  # no files yet: nothing remembered, nothing carried
    >>> state.memory, state.carried, state.resume
    (None, None, None)

Importable without torch; torch is imported only to read a resume point that has no
summary file (``CheckpointManager.latest_summary``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder.pointer import (
    ServedPointer,
    checkpoint_of,
    read_pointer,
)
from genesis_fp16_infrastructure.data.manifest import Manifest
from genesis_fp16_infrastructure.errors import CheckpointError, ServedPointerError
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.precision_names import (
    INITIAL_LOSS_SCALE,
    LOSS_SCALED,
    PrecisionName,
    RequestedName,
)
from genesis_fp16_infrastructure.record_codec import LOCAL, Record
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import CarriedScale
from genesis_fp16_infrastructure.training.precision.precision_memory import PrecisionMemory


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint folder a run resumes from and its newest checkpoint's summary.

    - ``folder``: the folder of the checkpoint the served-model pointer names, else the
      agent's checkpoint folder itself (no pointer, or one that cannot be followed: the
      snapshot's ``pointer_error`` says why).
    - ``summary``: ``CheckpointManager.latest_summary`` of ``folder`` (step, counters,
      precision, loss scale); None when it holds no checkpoint.
    """

    folder: Path
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


@dataclass(frozen=True)
class DataCheck(Record):
    """The data files as the plan scanned them, and what that says.

    - ``scan``: the manifest of the data files, taken before the run reads them, with
      each grown file's prefix in its JSON (a run's record cache continues the file; None:
      not scanned: no data path, or one the run's read reports).
    - ``up_to_date``: the run's result when nothing changed since the served model's run
      (the run then takes no step), as ``TrainResult.to_json`` (``TrainResult.from_json``
      reads it: the result module names the request, which names this one); None: the
      run reads the data and trains.
    """

    scan: Manifest | None = None
    up_to_date: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class AgentSnapshot(Record):
    """The agent's state folder, read once by a job's plan (module docstring).

    ``state`` is the plan's (None in a child: its request already holds what came of
    it; never in the JSON); ``pointer``/``pointer_error`` the served-model pointer as
    read (its own JSON, read as its file is); ``data`` the plugin's data check (None:
    the plugin has none, or it was not asked).
    """

    VERSION = 1
    state: AgentState | None = field(default=None, metadata={LOCAL: True})
    pointer: ServedPointer | None = None
    pointer_error: str | None = None
    data: DataCheck | None = None


def read_snapshot(folder: AgentFolder, checkpoint_dir: Path | None = None) -> AgentSnapshot:
    """The :class:`AgentSnapshot` of ``folder`` (its ``data`` left to the plugin's check):
    each file read once, the pointer and the resume point only of ``checkpoint_dir``, the
    folder whose served model the next run resumes (None: no resume point asked). An
    unusable memory file or pointer is reported in the record. Raises ``OSError`` (or
    ``CheckpointError``) only when the resume point's checkpoints cannot be read."""
    try:
        memory, memory_error = folder.precision_memory(), None
    except ValueError as exc:  # UnusableStateFile too
        memory, memory_error = None, str(exc)
    carried = folder.carried_scale()
    if checkpoint_dir is None:
        return AgentSnapshot(AgentState(memory, memory_error, carried, None))
    pointer, error, resume = _resume_point(checkpoint_dir)
    return AgentSnapshot(AgentState(memory, memory_error, carried, resume), pointer, error)


def resume_loss_scale(
    checkpoint_dir: Path, precision: PrecisionName
) -> tuple[float, str | None, str | None]:
    """The loss scale a run in ``precision`` resuming from ``checkpoint_dir`` starts with,
    and why the folder, or its served-model pointer, could not be read (None: it could).
    1 outside ``LOSS_SCALED`` (nothing read), else the resume point's newest scale, else
    ``INITIAL_LOSS_SCALE`` (no checkpoint, or an unreadable folder: none)."""
    if precision not in LOSS_SCALED:
        return 1.0, None, None
    try:
        _, error, resume = _resume_point(checkpoint_dir)
    except (OSError, CheckpointError) as exc:
        return INITIAL_LOSS_SCALE, str(exc), None
    scale = None if resume.summary is None else resume.summary.get("loss_scale")
    return INITIAL_LOSS_SCALE if scale is None else scale, None, error


def _resume_point(checkpoint_dir: Path) -> tuple[ServedPointer | None, str | None, ResumePoint]:
    """The served-model pointer, read once (None: none, or it cannot be followed:
    unreadable, or naming a checkpoint that is gone), why it cannot be followed (None: it
    can, or there is none), and the resume point it gives."""
    # The checkpoint module imports torch; a caller that asks no resume point never pays.
    from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager

    served = error = None
    try:
        pointer = read_pointer(checkpoint_dir)
        served = None if pointer is None else checkpoint_of(checkpoint_dir, pointer)
    except ServedPointerError as exc:
        pointer, error = None, str(exc)
    if served is not None:  # the file the pointer names, never a newer one beside it
        return pointer, error, ResumePoint(served.parent, _summary_of(served))
    summary = CheckpointManager(checkpoint_dir).latest_summary()
    return pointer, error, ResumePoint(checkpoint_dir, summary)


def _summary_of(path: Path) -> Mapping[str, Any] | None:
    """The summary of one checkpoint file: its summary file, else the file read."""
    from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint
    from genesis_fp16_infrastructure.training.checkpoint_files import read_summary, summarize

    summary = read_summary(path)
    if summary is not None:
        return summary
    try:
        return summarize(load_checkpoint(path))
    except (CheckpointError, OSError):
        return None
