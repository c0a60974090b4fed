"""PrecisionPolicy owns every precision-specific part of a step; one vocabulary of names."""

from __future__ import annotations

import inspect
from typing import get_args

import pytest
import torch
from torch import nn

from genesis_fp16.config import agent_settings, settings
from genesis_fp16.jobs import probe_gate
from genesis_fp16.metrics import metric_names as metrics
from genesis_fp16_infrastructure import precision_names as names
from genesis_fp16_infrastructure.errors import PrecisionError
from genesis_fp16_infrastructure.precision_names import ROBUSTNESS
from genesis_fp16_infrastructure.probe import build_variants, verdict
from genesis_fp16_infrastructure.training import (
    GuardConfig,
    PrecisionPolicy,
    ScalerConfig,
    autocast_to,
    dtype_of,
)
from genesis_fp16_infrastructure.training.precision.loss_scaler import LOW_DTYPES
from genesis_fp16_infrastructure.training.run import verify_capture
from genesis_fp16_infrastructure.training.step import trainer


def _model_with_grads(grad: float) -> tuple[nn.Linear, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    for p in model.parameters():
        p.grad = torch.full_like(p, grad)
    return model, model.weight.detach().clone()


def test_every_list_of_precision_names_is_the_vocabulary() -> None:
    """Settings, metrics, the probe gate, the guard and the memory use precision_names."""
    assert settings.PRECISION_CHOICES is names.CHOICES
    assert agent_settings.Precision is names.RequestedName  # the Literal itself, not a copy
    assert names.CHOICES == get_args(names.RequestedName) == ("auto", *names.PRECISIONS)
    assert get_args(names.PrecisionName) == names.PRECISIONS
    assert metrics.PRECISION_LABELS is names.PRECISIONS
    assert probe_gate.LOW_PRECISIONS is names.LOW_PRECISIONS
    assert GuardConfig().ladder is names.DEFAULT_LADDER
    assert ROBUSTNESS is names.ROBUSTNESS
    assert set(names.DTYPE_NAMES) == set(names.PRECISIONS)
    # The two tolerance tables a new precision must extend (docs/architecture.md's recipe).
    assert set(verify_capture.COMPILED_LOSS_RTOL) == set(names.PRECISIONS)
    assert set(verdict.DEFAULT_LOSS_RTOL) == set(names.PRECISIONS)
    assert [dtype_of(p) for p in names.PRECISIONS] == [torch.float32, torch.bfloat16, torch.float16]
    assert tuple(dtype_of(p) for p in names.LOW_PRECISIONS) == LOW_DTYPES  # a cast model refused


def test_the_probe_tries_the_vocabularys_low_precisions_and_scales_its_loss_scaled_ones() -> None:
    """The probe's variants come from precision_names: each low precision, loss scaled
    exactly where LOSS_SCALED says, so a new precision is probed without editing it."""
    variants = build_variants({})
    assert [v.precision for v in variants if v.family == "pure"] == list(names.LOW_PRECISIONS)
    assert {v.precision for v in variants if v.scaled} == set(names.LOSS_SCALED)
    assert all(v.dtype == dtype_of(v.precision) for v in variants)


def test_dtype_of_an_unknown_name_lists_the_choices() -> None:
    """A misspelt precision is one error naming the value and the valid names."""
    with pytest.raises(PrecisionError, match=r"'fp8'.*fp32, bf16, fp16"):
        dtype_of("fp8")


def test_trainer_never_asks_whether_loss_scaling_is_on() -> None:
    """The trainer's source neither asks the scaler's state nor scales a loss itself."""
    source = inspect.getsource(trainer)
    for forbidden in ("is_enabled", "scaler.scale(", "scaler.unscale_", "found_inf_tensor"):
        assert forbidden not in source, forbidden


@pytest.mark.parametrize("name", ["fp32", "bf16"])
def test_unscaled_precisions_skip_a_nonfinite_gradient_with_a_host_read(name: str) -> None:
    """fp32/bf16, non-fused SGD: the check with a scale of 1 flags an inf; one host read skips."""
    policy = PrecisionPolicy.create(name, "cpu")
    model, before = _model_with_grads(float("inf"))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    assert policy.needs_host_read([sgd])
    found_inf = policy.unscale([sgd])
    assert found_inf.item() == 1.0
    assert policy.overflowed(found_inf) is None  # no loss-scale window to keep
    assert policy.step([sgd], found_inf, host_read=True) is False
    assert torch.equal(model.weight, before)


@pytest.mark.parametrize("name", ["fp32", "bf16"])
def test_unscaled_precisions_skip_on_the_device_and_keep_finite_gradients(name: str) -> None:
    """fp32/bf16, fused AdamW: no host read, a NaN gradient skips on the device, a finite
    gradient is checked without changing a bit and stepped."""
    policy = PrecisionPolicy.create(name, "cpu")
    model, before = _model_with_grads(float("nan"))
    adamw = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    assert not policy.needs_host_read([adamw])
    assert policy.needs_host_read([adamw], [torch.optim.lr_scheduler.StepLR(adamw, 1)])
    flag = torch.zeros(())
    assert policy.unscale([adamw], flag) is flag and flag.item() == 1.0
    assert policy.step([adamw], flag, host_read=False) is True  # decided on the device
    assert torch.equal(model.weight, before)
    model.weight.grad = grad = torch.randn(2, 4)
    model.bias.grad = torch.randn(2)
    kept = grad.clone()
    assert policy.unscale([adamw]).item() == 0.0
    assert torch.equal(model.weight.grad, kept)
    policy.step([adamw], torch.zeros(()), host_read=False)
    assert not torch.equal(model.weight, before)


def test_fp16_skips_an_overflowing_step_with_a_host_read() -> None:
    """fp16 with a non-fused optimizer: one host read, the step is skipped and says so."""
    policy = PrecisionPolicy.create("fp16", "cpu")
    model, before = _model_with_grads(float("inf"))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    assert policy.needs_host_read([sgd])
    found_inf = policy.unscale([sgd])
    overflow = policy.overflowed(found_inf)
    assert overflow is not None and bool(overflow)
    assert policy.step([sgd], found_inf, host_read=True) is False
    assert torch.equal(model.weight, before)
    scale = policy.scaler.get_scale()
    policy.update()
    assert policy.scaler.get_scale() < scale  # the scale backed off


def test_fp16_skips_an_overflowing_step_on_the_device_with_a_fused_optimizer() -> None:
    """fp16 with fused AdamW and no scheduler: no host read; the fused kernel skips itself."""
    policy = PrecisionPolicy.create("fp16", "cpu")
    model, before = _model_with_grads(float("nan"))
    adamw = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    assert not policy.needs_host_read([adamw])
    assert policy.needs_host_read([adamw], [torch.optim.lr_scheduler.StepLR(adamw, 1)])
    found_inf = policy.unscale([adamw])
    assert policy.step([adamw], found_inf, host_read=False) is True  # decided on the device
    assert torch.equal(model.weight, before)
    assert not hasattr(adamw, "found_inf")  # the hand-over attributes are cleaned up


def test_fp16_takes_a_finite_step() -> None:
    """fp16 with finite gradients: the scaled backward and the step change the weights."""
    policy = PrecisionPolicy.create("fp16", "cpu", ScalerConfig(init_scale=1024.0))
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    before = model.weight.detach().clone()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with policy.autocast():
        loss = model(torch.full((1, 4), 0.5)).float().sum()
    policy.backward(loss)
    assert model.weight.grad is not None
    # The gradient is scaled until unscale: 1024 times the true one (0.5 per weight).
    assert torch.allclose(model.weight.grad, torch.full_like(before, 0.5 * 1024))
    found_inf = policy.unscale([sgd])
    assert torch.allclose(model.weight.grad, torch.full_like(before, 0.5))
    assert policy.step([sgd], found_inf, host_read=True)
    assert torch.allclose(model.weight, before - 0.05)


@pytest.mark.parametrize(
    ("name", "param_dtype"), [("fp32", None), ("bf16", torch.bfloat16), ("fp16", torch.float16)]
)
def test_fsdp_dtypes_come_from_the_policy(name: str, param_dtype: torch.dtype | None) -> None:
    """FSDP2 casts parameters to the compute dtype (none in fp32) and reduces in fp32."""
    mixed = PrecisionPolicy.create(name, "cpu").fsdp_mixed_precision()
    assert mixed.param_dtype == param_dtype
    assert mixed.reduce_dtype == torch.float32


def test_autocast_for_a_given_dtype_overrides_the_policy() -> None:
    """policy.autocast(dtype) computes in that dtype; float32 switches an outer autocast off."""
    policy = PrecisionPolicy.create("bf16", "cpu")
    a = torch.ones(2, 2)
    with policy.autocast():
        assert (a @ a).dtype == torch.bfloat16
        with policy.autocast(torch.float32):
            assert (a @ a).dtype == torch.float32
    with autocast_to(torch.bfloat16, "cpu"):
        assert (a @ a).dtype == torch.bfloat16
