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
)
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain import freshness, run, scoring, task
from genesis_fp16_infrastructure.recipes.retrain.options import agent_options


class SEDarwinPlugin:
    """Genesis's SE-Darwin agent: a world model that forecasts how an attempt will end."""

    api_version = API_VERSION
    name = "se_darwin"
    options = agent_options()
    description = "SE-Darwin world model: success, score and outcome of a code-evolution attempt"
    # The types a fault bundle's batches may be rebuilt as (``genesis-fp16 replay``).
    batch_types = (task.Batch,)
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

    # The retrain recipe's own functions, called as they are: train a candidate in the
    # judged run's candidate folder (afresh, or continuing the served model when forced);
    # score a checkpoint's success log-loss per labelled record, by judged id and Genesis
    # agent, or list those records unscored; scan the data files once before a run, with
    # its result when nothing changed since the served model's run (decided from the
    # data manifest beside it, without parsing or torch).
    train = staticmethod(run.train)
    score_records = staticmethod(scoring.score_records)
    record_ids = staticmethod(scoring.record_ids)
    check_data = staticmethod(freshness.check_data)

    def probe_setup(self, data_path: Path | None, seed: int) -> ProbeSetup:
        """The world model, its loss and a few real batches, for the precision probe."""
        return task.probe_setup(data_path, seed, agent=self.name)

    def replay_task(self, context: Mapping[str, Any]) -> task.WorldModelStep:
        """A fault bundle's step rebuilt for ``genesis-fp16 replay``: the model the run
        trained (its configuration, cross-validated members included, from the bundle's
        ``rebuild``), its optimizer and loss; the data is not read."""
        spec = context.get("rebuild")
        if not isinstance(spec, Mapping) or "model" not in spec:
            raise ValueError(
                "the bundle holds no model record (rebuild.model): it was written before "
                "bundles kept one, or by another agent; re-run the training to write a new one"
            )
        return task.WorldModelStep.from_spec(spec)
