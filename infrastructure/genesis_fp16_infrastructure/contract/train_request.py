"""What the daemon, or ``genesis-fp16 train``, asks an agent to do in one run:
:class:`TrainRequest`, the budget of a request that names none (:data:`DEFAULT_STEPS`),
and the agent's folder as the job's plan read it, which the request carries.

The request and its budget are part of the plugin contract: a plugin imports them from
``genesis_fp16.plugin_api``, the daemon from ``genesis_fp16_infrastructure.api``.

What the request carries, the agent's folder as the job's plan read it once
(:class:`AgentSnapshot`, and :func:`read_snapshot`, the read), is
:mod:`~genesis_fp16_infrastructure.contract.agent_snapshot`'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from genesis_fp16_infrastructure.contract.agent_snapshot import AgentSnapshot
from genesis_fp16_infrastructure.contract.split import HELD_OUT, ScoreOnly, id_hashes, sorted_unique
from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.record_codec import OMIT_NONE, Record
from genesis_fp16_infrastructure.training.flight.bundle_files import FlightConfig, bundle_folder
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
    # Helper processes that parse the run's new data files beside it (the daemon's
    # READ_WORKERS, for a run with NPROC 1; None or 0: the run parses alone):
    # data.read_workers. Left out of the run file while None, as keep_in_memory_bytes.
    read_workers: int | None = field(default=None, metadata={OMIT_NONE: True})
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
