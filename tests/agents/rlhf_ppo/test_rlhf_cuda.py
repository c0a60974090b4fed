"""rlhf_ppo on a CUDA device: it trains, one seed on one device is one run bit for bit, and
its update steps replay from a CUDA graph with the numbers of eager steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16_agents.rlhf_ppo import plugin

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

OPTIONS = {"batch_size": 16, "preset": "mixed_recommended"}


def _train(folder: Path, steps: int, **fields: Any) -> TrainResult:
    return plugin.train(
        TrainRequest(
            agent="rlhf_ppo",
            precision="auto",
            precision_reason="test",
            state_dir=folder,
            checkpoint_dir=folder / "checkpoints",
            steps=steps,
            seed=5,
            device="cuda",
            **{"options": OPTIONS, **fields},
        )
    )


def _weights(result: TrainResult) -> dict[str, Any]:
    assert result.checkpoint is not None
    return torch.load(result.checkpoint, map_location="cpu", weights_only=True)["model"]


def test_two_runs_with_one_seed_on_cuda_are_equal_bit_for_bit(tmp_path: Path) -> None:
    """Rollouts sample from a CUDA generator seeded by the run: the same seed gives the
    same weights (the defect was a CPU generator, refused by torch.multinomial on CUDA)."""
    a, b = _train(tmp_path / "a", 8), _train(tmp_path / "b", 8)
    assert a.device.startswith("cuda") and a.steps == 8
    for key, tensor in _weights(a).items():
        assert torch.equal(_weights(b)[key], tensor), key


def test_a_resumed_cuda_run_continues_bit_for_bit(tmp_path: Path) -> None:
    """4 steps + resumed 4 end where 8 straight steps end: the CUDA sampling stream is
    saved in the checkpoint and restored."""
    _train(tmp_path / "split", 4)
    split = _train(tmp_path / "split", 4)
    straight = _train(tmp_path / "straight", 8)
    assert split.extra["resumed_from"] is not None
    for key, tensor in _weights(straight).items():
        assert torch.equal(_weights(split)[key], tensor), key


@pytest.mark.parametrize("preset", ["mixed_recommended", "fp16_all"])
def test_captured_update_steps_equal_eager_ones_bit_for_bit(tmp_path: Path, preset: str) -> None:
    """cuda_graph=auto captures the PPO update (fused, capturable AdamW) and ends in the
    eager run's weights and update diagnostics; the reason says what ran."""
    options = {**OPTIONS, "preset": preset}
    graphed = _train(tmp_path / "graph", 16, cuda_graph="auto", options=options)
    eager = _train(tmp_path / "eager", 16, cuda_graph="off", options=options)
    assert graphed.execution == "cuda_graph", graphed.execution_reason
    assert eager.execution == "eager" and "cuda_graph=off" in eager.execution_reason
    for key, tensor in _weights(eager).items():
        assert torch.equal(_weights(graphed)[key], tensor), key
    for key in ("policy_clip_frac", "value_loss", "mismatch_abs_dlogp_mean"):
        assert graphed.extra["diagnostics"][key] == eager.extra["diagnostics"][key], key
