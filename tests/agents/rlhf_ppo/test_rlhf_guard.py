"""rlhf_ppo honours TrainRequest.guard: a real fp16 overflow demotes, rolls back exactly."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16_agents.rlhf_ppo import plugin
from genesis_fp16_agents.rlhf_ppo.task import PPOConfig, PPOTask
from genesis_fp16_infrastructure.rl.ppo_guard import ppo_guard
from genesis_fp16_infrastructure.rl.ppo_math import token_logprobs
from genesis_fp16_infrastructure.training import (
    FitOptions,
    GuardConfig,
    ScalerConfig,
    Trainer,
    fit,
)
from genesis_fp16_infrastructure.training.precision.precision import autocast_to
from genesis_fp16_infrastructure.training.precision.precision_memory import remember_demotions

FAULT_STEP = 8  # from this optimizer step on, the policy has an activation outlier
STEPS = 16
OPTIONS = {"batch_size": 16}
# bf16 even where the CPU lacks native bf16, so the ladder is the same on every machine.
GUARD = GuardConfig(check_interval=4, bf16_needs_native=False)


def _train(folder: Path, precision: str, steps: int, **kw: Any) -> TrainResult:
    request = TrainRequest(
        agent="rlhf_ppo",
        precision=precision,
        precision_reason="test",
        state_dir=folder,
        checkpoint_dir=folder / "checkpoints",
        steps=steps,
        seed=1,
        options=OPTIONS,
        **kw,
    )
    return plugin.train(request)


def _outlier_policy_logp(self: PPOTask, seqs: torch.Tensor) -> torch.Tensor:
    """policy_logp whose logits pass through a 1e5 x larger activation from FAULT_STEP on.

    The multiply and divide run in the logits' own dtype: fp16 (max 65504) overflows to
    inf and the log-probs become NaN; bf16 and fp32 have the range and barely round.
    """
    p = self.cfg.task.prompt_len
    with torch.no_grad(), autocast_to(self.preset.dtype("policy"), seqs.device.type):
        logits = self.model.policy(seqs)[:, p - 1 : -1]
        assert self.trainer is not None
        if self.trainer.step_count >= FAULT_STEP:
            logits = logits * 1e5 / 1e5
        return token_logprobs(logits, seqs[:, p:])


@pytest.fixture
def outlier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PPOTask, "policy_logp", _outlier_policy_logp)


def _model(result: TrainResult) -> dict[str, torch.Tensor]:
    state = torch.load(result.checkpoint, weights_only=True)  # type: ignore[arg-type]
    assert state["step"] == STEPS
    model: dict[str, torch.Tensor] = state["model"]
    return model


@pytest.mark.usefixtures("outlier")
def test_fp16_overflow_demotes_to_bf16_and_equals_a_clean_resume(tmp_path: Path) -> None:
    """NaN losses from a real fp16 overflow: demoted to bf16 (mixed_recommended), reported,
    and the weights equal an fp16 run to the rollback step resumed in bf16, bit for bit."""
    result = _train(tmp_path / "guarded", "fp16", STEPS, guard=GUARD)
    (record,) = result.demotions
    assert {k: record.to_json()[k] for k in ("from", "to", "reason", "step")} == {
        "from": "fp16", "to": "bf16", "reason": "nonfinite_loss", "step": 12,
    }  # fmt: skip
    rollback = record.rollback_step
    assert rollback <= FAULT_STEP and rollback % 4 == 0  # an iteration boundary (4 steps)
    assert result.precision_used == "bf16" and result.steps == STEPS
    assert result.extra["preset"] == "mixed_recommended"
    assert result.extra["presets_run"] == ["fp16_all", "mixed_recommended"]
    assert "precision guard demoted fp16 -> bf16" in result.precision_reason
    assert len(result.extra["history"]) == STEPS // 4  # rolled-back iterations dropped
    assert result.extra["iterations"] == STEPS // 4
    memory = remember_demotions(None, result.demotions)  # what the daemon writes down
    assert memory is not None and memory.demoted_to == "bf16"

    _train(tmp_path / "reference", "fp16", rollback)
    resumed = _train(tmp_path / "reference", "bf16", STEPS - rollback)
    assert resumed.extra["preset"] == "mixed_recommended" and not resumed.demotions
    guarded, reference = _model(result), _model(resumed)
    for key, tensor in reference.items():
        assert torch.equal(guarded[key], tensor), key


def test_clean_guarded_run_reports_nothing_and_equals_an_unguarded_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a fault the guard never fires, and watching changes no weight."""
    with caplog.at_level("WARNING", logger="genesis_fp16_infrastructure.rl.ppo_guard"):
        guarded = _train(tmp_path / "guarded", "fp16", STEPS, guard=GUARD)
    assert guarded.demotions == () and guarded.precision_used == "fp16"
    assert guarded.extra["presets_run"] == ["fp16_all"]
    # At its defaults the guard's two PPO caveats are no one's to act on: not warned.
    assert "not used by a PPO run" not in caplog.text and "not a multiple" not in caplog.text
    plain = _train(tmp_path / "plain", "fp16", STEPS)
    for key, tensor in _model(plain).items():
        assert torch.equal(_model(guarded)[key], tensor), key


def test_guard_settings_an_operator_chose_are_warned_when_rlhf_ppo_cannot_use_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A divergence factor or a check interval set away from the defaults, which PPO
    cannot honour as set, is one warning each; at the defaults they are DEBUG."""

    def warned(folder: Path, guard: GuardConfig) -> list[str]:
        caplog.clear()
        with caplog.at_level("DEBUG", logger="genesis_fp16_infrastructure.rl.ppo_guard"):
            _train(folder, "fp32", 4, guard=guard)
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    assert warned(tmp_path / "defaults", GuardConfig(bf16_needs_native=False)) == []
    assert "not used by a PPO run" in caplog.text  # said, at DEBUG
    chosen = dataclasses.replace(GUARD, check_interval=5, divergence_factor=4.0)
    lines = warned(tmp_path / "chosen", chosen)
    assert len(lines) == 2, lines
    assert "divergence_factor=4 is not used by a PPO run" in lines[0]
    assert "check_interval=5 is not a multiple" in lines[1]


RUN_SCALER = ScalerConfig(init_scale=1024.0, growth_interval=3, hysteresis=2)


class ScalerSeen(PPOTask):
    """A PPO task that notes the trainer's precision and loss-scaler config each iteration."""

    seen: list[tuple[str, ScalerConfig]]

    def begin_iteration(self, trainer: Trainer, epoch: int) -> None:
        super().begin_iteration(trainer, epoch)
        self.seen.append((trainer.policy.name, trainer.scaler.config))


@pytest.mark.usefixtures("outlier")
def test_a_run_steps_and_demotes_with_its_own_scaler_config() -> None:
    """A non-default ScalerConfig: the fp16 trainer steps with it, and the trainer the
    guard demotes to is built with it too (the default ScalerConfig is never used)."""
    task = ScalerSeen(PPOConfig(**OPTIONS), seed=1, preset="fp16_all")
    task.seen = []
    guard = ppo_guard(GUARD, task.cfg.steps_per_iteration)
    result = fit(task, FitOptions(precision="fp16", steps=STEPS, guard=guard, scaler=RUN_SCALER))
    assert [d.to for d in result.demotions] == ["bf16"]
    assert {config for name, config in task.seen if name == "fp16"} == {RUN_SCALER}
    demoted = {config for name, config in task.seen if name == "bf16"}
    assert demoted == {dataclasses.replace(RUN_SCALER, enabled=False)}
