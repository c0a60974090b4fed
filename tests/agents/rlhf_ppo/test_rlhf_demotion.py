"""rlhf_ppo demotes as fit() does: the same guard trip gives the same record and report.

Both runs are real fp16 on the CPU whose loss turns NaN from optimizer step 8: fit() on
the guard's own fault set-up (tests/infrastructure/training/guard_faults.py), rlhf_ppo
through its plugin with its PPO loss made NaN the same way.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infrastructure" / "training"))
from guard_faults import FaultTask

from genesis_fp16_agents.rlhf_ppo import plugin
from genesis_fp16_agents.rlhf_ppo.engine import PPOEngine
from genesis_fp16_infrastructure.plugin_api import TrainRequest, TrainResult
from genesis_fp16_infrastructure.training import FitOptions, GuardConfig, fit

FAULT_STEP = 8  # an iteration boundary of rlhf_ppo (4 optimizer steps each) and a check
STEPS = 16
# No divergence trigger (rlhf_ppo turns it off, with a warning); bf16 on every CPU.
GUARD = GuardConfig(check_interval=4, divergence_factor=None, bf16_needs_native=False)
# The guard's own sentence in a demoted run's reason, up to where each names its first.
GUARD_SAYS = re.compile(r"precision guard demoted .*?, rolled back to step \d+")

_ppo_loss = PPOEngine._ppo_loss


def _nan_in_fp16(
    self: PPOEngine, model: nn.Module, batch: tuple[torch.Tensor, ...]
) -> torch.Tensor:
    """The PPO loss, NaN in fp16 from FAULT_STEP on: what FaultTask("nan") does to fit()."""
    loss = _ppo_loss(self, model, batch)
    if self.precision.name == "fp16" and self.trainer.step_count >= FAULT_STEP:
        return loss * float("nan")
    return loss


def _request(agent: str, folder: Path) -> TrainRequest:
    return TrainRequest(
        agent=agent,
        precision="fp16",
        precision_reason="test",
        state_dir=folder,
        checkpoint_dir=folder / "checkpoints",
        steps=STEPS,
        seed=1,
        guard=GUARD,
        options={"batch_size": 16} if agent == "rlhf_ppo" else {},
    )


def test_rlhf_ppo_and_fit_report_one_guard_trip_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NaN losses from step 8 in both: the same demotion record, precision used and guard
    reason, so the two runs cannot drift apart in how a trip is handled or reported."""
    request = _request("fault_agent", tmp_path / "fit")
    options = FitOptions(
        precision="fp16", steps=STEPS, checkpoint_dir=request.checkpoint_dir, guard=GUARD
    )
    fitted = TrainResult.from_fit(request, fit(FaultTask("nan", FAULT_STEP), options))
    monkeypatch.setattr(PPOEngine, "_ppo_loss", _nan_in_fp16)
    ppo = plugin.train(_request("rlhf_ppo", tmp_path / "ppo"))

    (record,) = fitted.demotions
    assert record == {
        "from": "fp16", "to": "bf16", "reason": "nonfinite_loss", "step": 12,
        "rollback_step": FAULT_STEP, "detail": "4 non-finite losses in steps 0..12 (limit 3)",
    }  # fmt: skip
    assert list(ppo.demotions) == [record]
    assert ppo.precision_used == fitted.precision_used == "bf16"
    assert ppo.steps == fitted.steps == STEPS
    guard_says = [GUARD_SAYS.findall(r.precision_reason) for r in (fitted, ppo)]
    assert guard_says[0] == guard_says[1] and len(guard_says[0]) == 1, guard_says
