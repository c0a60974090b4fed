"""rlhf_ppo demotes as fit() does: the same guard trip gives the same record and report.

Both runs are real fp16 on the CPU whose loss turns NaN from optimizer step 8: fit() on
the guard's own fault set-up (tests/infrastructure/training/guard_faults.py), rlhf_ppo
through its plugin with its PPO loss made NaN the same way.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infrastructure" / "training"))
from guard_faults import FaultTask

from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16_agents.rlhf_ppo import plugin
from genesis_fp16_agents.rlhf_ppo.task import PPOTask
from genesis_fp16_infrastructure.training import FitOptions, GuardConfig, fit

FAULT_STEP = 8  # an iteration boundary of rlhf_ppo (4 optimizer steps each) and a check
STEPS = 16
# No divergence trigger (rlhf_ppo turns it off, with a warning); bf16 on every CPU.
GUARD = GuardConfig(check_interval=4, divergence_factor=None, bf16_needs_native=False)
# The guard's own sentence in a demoted run's reason, up to where each names its first.
GUARD_SAYS = re.compile(r"precision guard demoted .*?, rolled back to step \d+")

_ppo_loss = PPOTask.loss


def _nan_from(step: int, precisions: tuple[str, ...]) -> Callable[..., torch.Tensor]:
    """The PPO loss, NaN from optimizer ``step`` on in ``precisions``: what FaultTask("nan")
    does to fit()."""

    def loss(self: PPOTask, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        value = _ppo_loss(self, model, batch)  # type: ignore[arg-type]
        trainer = self.trainer
        assert trainer is not None
        if trainer.policy.name in precisions and trainer.step_count >= step:
            return value * float("nan")
        return value

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
    monkeypatch.setattr(PPOTask, "loss", _nan_from(FAULT_STEP, ("fp16",)))
    ppo = plugin.train(_request("rlhf_ppo", tmp_path / "ppo"))

    (record,) = fitted.demotions
    assert record.to_json() == {
        "from": "fp16", "to": "bf16", "reason": "nonfinite_loss", "step": 12,
        "rollback_step": FAULT_STEP, "detail": "4 non-finite losses in steps 0..12 (limit 3)",
    }  # fmt: skip
    assert list(ppo.demotions) == [record]
    assert ppo.precision_used == fitted.precision_used == "bf16"
    assert ppo.steps == fitted.steps == STEPS
    guard_says = [GUARD_SAYS.findall(r.precision_reason) for r in (fitted, ppo)]
    assert guard_says[0] == guard_says[1] and len(guard_says[0]) == 1, guard_says


ALL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# At the last rung only the skip rate can fire: over every 4 steps, from the first.
LAST_RUNG_GUARD = GuardConfig(
    check_interval=4, overflow_window=4, overflow_warmup=0, divergence_factor=None
)


def test_rlhf_ppo_and_fit_fail_alike_at_the_last_rung(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every fp32 step skipped for a NaN loss: both runs end failed at the first check,
    with the same failure and no end checkpoint, instead of demoting past the ladder."""
    request = dataclasses.replace(
        _request("fault_agent", tmp_path / "fit"), precision="fp32", guard=LAST_RUNG_GUARD
    )
    options = FitOptions(
        precision="fp32", steps=STEPS, checkpoint_dir=request.checkpoint_dir, guard=LAST_RUNG_GUARD
    )
    task = FaultTask("nan", fault_step=0, fault_in=ALL_DTYPES)
    fitted = TrainResult.from_fit(request, fit(task, options)).to_json()
    monkeypatch.setattr(PPOTask, "loss", _nan_from(0, ("fp32",)))
    ppo_request = dataclasses.replace(
        _request("rlhf_ppo", tmp_path / "ppo"), precision="fp32", guard=LAST_RUNG_GUARD
    )
    ppo = plugin.train(ppo_request).to_json()

    same = ("outcome", "failure", "failure_detail", "steps", "skipped_steps", "checkpoint")
    assert {k: ppo[k] for k in same} == {k: fitted[k] for k in same}
    assert (fitted["outcome"], fitted["steps"], fitted["checkpoint"]) == ("failed", 4, None)
    assert ppo["demotions"] == fitted["demotions"] == []
