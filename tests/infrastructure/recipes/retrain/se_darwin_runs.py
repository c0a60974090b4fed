"""One SE-Darwin run through the plugin's judged run, as the tests of this folder start it."""

from __future__ import annotations

from pathlib import Path

from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.judging.run import run_plugin


def train(data: Path, ckpt: Path, precision: str = "fp32", **fields: object) -> TrainResult:
    """A judged run of the plugin (``run_plugin``: gate, watch and pointer) on ``data``
    into ``ckpt``: 20 steps, seed 3, fresh unless ``fields`` (any TrainRequest field:
    steps, seed, resume, options...) say otherwise."""
    request = TrainRequest(
        agent="se_darwin",
        precision=precision,
        precision_reason="test",
        state_dir=ckpt.parent,
        checkpoint_dir=ckpt,
        data_path=data,
        **{"steps": 20, "seed": 3, "resume": False, **fields},  # type: ignore[arg-type]
    )
    return run_plugin(plugin, request)
