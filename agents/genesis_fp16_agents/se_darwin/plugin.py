"""The SE-Darwin agent plugin: its sample data, and its world model trained by the
library's retrain loop (``genesis_fp16_infrastructure.recipes.retrain``) in one call a run.

It is a judged plugin like any other (``contract.judging``): the library's judged run
serves, watches, pins and rolls back its models, judging each candidate by the success
head's log-loss on the held-out records neither model trained on (``score_records``),
per Genesis agent. The AUC is reported in the run's eval, not gated (docs/judging.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from genesis_fp16.plugin_api import (
    API_VERSION,
    JUDGING_VERSION,
    ProbeSetup,
    RecordLosses,
    TrainRequest,
    TrainResult,
)
from genesis_fp16_infrastructure.api import DataCheck
from genesis_fp16_infrastructure.contract.judging import RecordIds
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain import freshness, probe, run, scoring
from genesis_fp16_infrastructure.recipes.retrain.options import agent_options
from genesis_fp16_infrastructure.recipes.retrain.task import Batch, WorldModelStep


class SEDarwinPlugin:
    """Genesis's SE-Darwin agent: a world model that forecasts how an attempt will end."""

    api_version = API_VERSION
    name = "se_darwin"
    options = agent_options()
    description = "SE-Darwin world model: success, score and outcome of a code-evolution attempt"
    # The types a fault bundle's batches may be rebuilt as (``genesis-fp16 replay``).
    batch_types = (Batch,)
    # Its data is a folder of pools: with no data path configured the daemon trains it on
    # <state>/agents/se_darwin/data/, the generated sample and every pool dropped beside it
    # (genesis_fp16.jobs.run_request.default_data_path; docs/se-darwin.md, "Where to put data").
    data_folder = True
    # Judged models (contract.judging): the success head's losses per record (retrain.
    # scoring: its log-loss, the primary column), clipped to [0, loss_span] (P(success)
    # in [0.01, 0.99]), each no worse than the served model's by more than its margin.
    judging_version = JUDGING_VERSION
    loss_span = scoring.LOSS_SPAN
    judging_margin = scoring.MARGIN

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        """Write ``<out>/trajectory_pools/se_darwin/trajectory_pool.json``; return its path."""
        return write_pool(Path(out), count, seed, agent=self.name)

    def train(self, request: TrainRequest) -> TrainResult:
        """Train a candidate in the judged run's candidate folder (``retrain.run.train``)
        on the records the held-out split leaves it: afresh on the current records, or
        continuing the served model when the run is forced."""
        return run.train(request)

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        """``checkpoint``'s success log-loss on each labelled record of the request's
        pool, by trajectory id, segmented by Genesis agent (``retrain.scoring``)."""
        return scoring.score_records(checkpoint, request)

    def record_ids(self, request: TrainRequest) -> RecordIds | None:
        """Every labelled record of the request's pool, unscored (``retrain.scoring``): the
        judged run scores the served model only where it needs its losses."""
        return scoring.record_ids(request)

    def check_data(self, request: TrainRequest) -> DataCheck:
        """The data files scanned once, and the run's result when nothing changed since
        the served model's run (decided from the data manifest beside it, without parsing
        or torch; None: the run must read the pool). A job's plan asks once, before it
        starts a run's process, and hands both to the run in ``request.snapshot``."""
        return freshness.check_data(request)

    def probe_setup(self, data_path: Path | None, seed: int) -> ProbeSetup:
        """The world model, its loss and a few real batches, for the precision probe."""
        return probe.probe_setup(data_path, seed, agent=self.name)

    def replay_task(self, context: Mapping[str, Any]) -> WorldModelStep:
        """A fault bundle's step rebuilt for ``genesis-fp16 replay``: the model the run
        trained (its configuration, cross-validated members included, from the bundle's
        ``rebuild``), its optimizer and loss; the data is not read."""
        spec = context.get("rebuild")
        if not isinstance(spec, Mapping) or "model" not in spec:
            raise ValueError(
                "the bundle holds no model record (rebuild.model): it was written before "
                "bundles kept one, or by another agent; re-run the training to write a new one"
            )
        return WorldModelStep.from_spec(spec)
