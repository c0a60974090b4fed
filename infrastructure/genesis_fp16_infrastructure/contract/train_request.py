"""What the daemon, or ``genesis-fp16 train``, asks an agent to do in one run:
:class:`TrainRequest`, the budget of a request that names none (:data:`DEFAULT_STEPS`),
and the agent's folder as the job's plan read it, which the request carries.

The request and its budget are part of the plugin contract: a plugin imports them from
``genesis_fp16.plugin_api``, the daemon from ``genesis_fp16_infrastructure.api``.

What the request carries: one agent's state folder as a job's plan read it, once,
:class:`AgentSnapshot`. Beside an agent's checkpoints a daemon keeps a few small files:
the precision guard's memory of a demotion, the loss scale the last fp16 run ended with,
the served-model pointer (``served.json``) and the data manifest of the served model's
run (``data_manifest.json``). A job's plan reads them once (:func:`read_snapshot`, here,
and the plugin's ``check_data``) and everything after it takes this record instead of
reading again: the daemon's own checks, the run in the daemon's process, and a child
process, which gets it in its run file (:meth:`AgentSnapshot.to_json`, inside
``TrainRequest.to_json``)::

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

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from genesis_fp16_infrastructure.agent_folder.pointer import (
    ServedPointer,
    checkpoint_of,
    read_pointer,
)
from genesis_fp16_infrastructure.contract.split import HELD_OUT, ScoreOnly, id_hashes, sorted_unique
from genesis_fp16_infrastructure.data.manifest import Manifest
from genesis_fp16_infrastructure.errors import CheckpointError, ServedPointerError
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.precision_names import (
    INITIAL_LOSS_SCALE,
    LOSS_SCALED,
    PrecisionName,
    RequestedName,
)
from genesis_fp16_infrastructure.record_codec import LOCAL, OMIT_NONE, Record
from genesis_fp16_infrastructure.training.flight.bundle_files import FlightConfig, bundle_folder
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import CarriedScale
from genesis_fp16_infrastructure.training.precision.precision_memory import PrecisionMemory
from genesis_fp16_infrastructure.training.run.spec import RunCallbacks, RunSpec

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.training.reports import TrainingSummary
    from genesis_fp16_infrastructure.training.run.fit import FitOptions

# The optimizer steps a run trains when its request names no budget (TrainRequest.fit_options).
DEFAULT_STEPS = 100


@dataclass(frozen=True, kw_only=True)
class TrainRequest(RunSpec, RunCallbacks, Record):
    """What the daemon, or ``genesis-fp16 train``, asks an agent to do in one run.

    The run's own fields (``precision``, ``device``, the budget, ``resume``, the
    checkpoint cadence, ``guard``, ``fsdp``, the step fields) and the callbacks (set
    together: :meth:`with_callbacks`) are
    :class:`~genesis_fp16_infrastructure.training.run.spec.RunSpec`'s and
    :class:`~genesis_fp16_infrastructure.training.run.spec.RunCallbacks`', which say what
    each means, shared with ``FitOptions``; the rest are the agent's. ``precision_reason``
    says who asked for the precision (a CLI flag, ``ENABLE_FP16_TRAINING``, a per-agent
    override). With ``resume``, ``steps`` come on top of the checkpoint's, unless the
    checkpoint is an interrupted run's with the same budget, which then finishes. Fields
    are keyword-only.

    The daemon hands the request to its child or its torchrun ranks whole (a file), so
    every process trains with the same precision and reason, guard, budget and options:
    ``to_json`` and ``from_json`` are the record codec's, the callbacks left out (they
    cannot cross a process; set them with :meth:`with_callbacks`)::

        TrainRequest.from_json(json.loads(json.dumps(request.to_json())))
    """

    agent: str
    precision_reason: str
    state_dir: Path
    checkpoint_dir: Path
    data_path: Path | None = None
    quarantine_path: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    # The resident memory the run may use (the daemon's RUN_MEMORY_LIMIT_BYTES; None: no
    # limit set), for what a plugin sizes by it: se_darwin's largest pool.
    memory_limit_bytes: int | None = None
    # What the run may keep in its process's memory for the next run there (the daemon's
    # RUN_RESIDENT_KEEP_MIB, in bytes, when a resident run process serves it; None or 0:
    # nothing kept, as in a child forked per run or `train`): kept_in_memory. Left out of
    # the run file while None, so a run file an older daemon wrote reads and writes the same.
    keep_in_memory_bytes: int | None = field(default=None, metadata={OMIT_NONE: True})
    # A fixed pool the operator trusts: a candidate must be no worse than the served
    # model on it too (the promotion gate; GENESIS_FP16_AGENTS__<AGENT>__GOLDEN_DATA).
    golden_data_path: Path | None = None
    # A forced run (``genesis-fp16 train --resume --steps N``): the budget is trained even
    # on data the served model has already learned, continuing it. Otherwise (the daemon,
    # a plain ``train``) a budget only sizes a run on new data: an agent that can tell
    # its data unchanged (se_darwin) is up to date whatever the budget.
    forced: bool = False
    # The agent's state folder as the job's plan read it, once (AgentSnapshot, below):
    # the served-model pointer, the data scan and the up-to-date verdict, which the run
    # takes instead of reading them again. None: the run reads them itself.
    snapshot: AgentSnapshot | None = None
    # Per-layer range statistics of sampled steps, at a rate chosen to cost <= 1% of the
    # run's step time (training.flight.range_stats; GENESIS_FP16_RANGE_STATS). False: off.
    range_stats: bool = True
    # The records a judged run asks ``score_records`` to score (contract.split.ScoreOnly:
    # their ids); None: every record. Only the judged run sets it, on the request
    # it hands ``score_records``; never part of the JSON (``to_json`` writes null).
    score_only: ScoreOnly | None = None

    def fit_options(self, **overrides: Any) -> FitOptions:
        """The :class:`~genesis_fp16_infrastructure.training.FitOptions` this request asks for.

        Every field of the run (``RunSpec``'s: the precision request whole, with its
        ``auto`` mode, exclusions and floor), the callbacks, the checkpoint folder and
        cadence come from the request; ``overrides`` replace any
        of them or set the rest (``scaler``, ``trainer``, ...). A request with no budget
        (neither ``steps`` nor ``epochs``: no ``--steps``, no ``STEPS_PER_RUN``) trains
        :data:`DEFAULT_STEPS` optimizer steps, so a plugin that passes the request through
        trains under the daemon with no setting::

            result = fit(task, request.fit_options())
        """
        from genesis_fp16_infrastructure.training.flight.range_stats import RangeStatsConfig
        from genesis_fp16_infrastructure.training.run.fit import FitOptions

        # RunSpec declares the run's fields, RunCallbacks the callbacks: FitOptions' too.
        shared = fields(RunSpec) + fields(RunCallbacks)
        values: dict[str, Any] = {f.name: getattr(self, f.name) for f in shared}
        values.update(
            checkpoint_dir=Path(self.checkpoint_dir),
            # Fault bundles in the agent's state folder (the guard must be on to write any).
            # The request as a bundle's context: serialised only when a bundle is written.
            flight=FlightConfig(
                folder=bundle_folder(self.state_dir, self.agent), context=self._bundle_context
            ),
            range_stats=RangeStatsConfig() if self.range_stats else None,
        )
        merged = {**values, **overrides}
        if merged.get("steps") is None and merged.get("epochs") is None:
            merged["steps"] = DEFAULT_STEPS
        return FitOptions(**merged)

    def _bundle_context(self) -> dict[str, Any]:
        request = self.to_json()
        request.pop("snapshot", None)  # a file list and a result: not a bundle's context
        return {"agent": self.agent, "request": request}

    def recorded_options(self) -> Any:
        """The plugin options as a run records them (a candidate's meta, the data
        manifest's request) and compares them: as JSON keeps them, keys sorted, values
        as text where JSON has no type for them."""
        return json.loads(json.dumps(dict(self.options), sort_keys=True, default=str))

    def training_rows(self, ids: Sequence[str]) -> list[int]:
        """The rows of ``ids`` (the records' stable ids, as ``score_records`` names them,
        in the data's order) this run may train on: every record but the fifth a judged
        run holds out to judge the model on (``contract.judging``). A judged plugin
        trains on these alone and its task's ``extra_state()`` names them
        (:meth:`trained_ids`)::

            rows = request.training_rows(ids)
            task = Task(x[rows], y[rows], request.trained_ids([ids[i] for i in rows]))
        """
        return np.flatnonzero(~HELD_OUT.of_ids(ids)).tolist()

    @staticmethod
    def trained_ids(ids: Iterable[str]) -> Any:
        """What a judged plugin's task keeps as ``extra_state()["trained_ids"]`` for the
        records ``ids`` it trains on: the distinct ids' 64-bit hashes
        (contract.split.id_hashes), sorted, one int64 tensor. The ids themselves are
        accepted too, but every read of the checkpoint unpickles them: a list of 90,000
        took 0.39 s a load, and a judged run loads a checkpoint 5 times."""
        import torch

        return torch.from_numpy(sorted_unique(id_hashes(list(ids))).view(np.int64))

    def scoring_rows(self, ids: Sequence[str]) -> list[int]:
        """The rows of ``ids`` (as ``score_records`` names the records, in the data's
        order) this request asks scored: every row, unless the judged run asks for some
        (``score_only``: the watch wants only records new since the served model, the
        gate only those it judges on). A plugin scores these, or all of them::

            rows = request.scoring_rows(ids)
            return RecordLosses.of([ids[i] for i in rows], losses_of(rows))
        """
        return list(range(len(ids))) if self.score_only is None else self.score_only.rows(ids)

    def with_callbacks(
        self,
        on_log: Callable[[TrainingSummary], None] | None,
        should_stop: Callable[[], bool],
        on_diagnostics: Callable[[Mapping[str, float]], object] | None = None,
        on_precision: Callable[[PrecisionName], object] | None = None,
    ) -> TrainRequest:
        """This request with the run's callbacks, all set together (``on_diagnostics`` and
        ``on_precision`` left out: none) by whoever starts the run::

            request.with_callbacks(on_log=show, should_stop=stop.is_set)
        """
        return replace(
            self,
            on_log=on_log,
            should_stop=should_stop,
            on_diagnostics=on_diagnostics,
            on_precision=on_precision,
        )


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
