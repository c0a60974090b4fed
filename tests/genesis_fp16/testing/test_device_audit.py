"""The device audit: on a CPU it raises where a GPU run would mix devices, and only there."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from genesis_fp16.testing.device_audit import DeviceAudit, DeviceAuditError


def test_a_host_generator_feeding_a_run_device_op_is_caught() -> None:
    """torch.multinomial on run-device probabilities with a generator built without
    device= is refused, naming the op and this file's line (rlhf_ppo's CUDA defect)."""
    with DeviceAudit(), pytest.raises(DeviceAuditError) as caught:
        probs = torch.ones(4, 3).to("cpu")  # moved to the run's device
        torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(0))
    assert "torch.multinomial draws from a host generator" in str(caught.value)
    assert "test_device_audit.py:" in str(caught.value)


def test_a_generator_on_the_run_device_and_host_draws_on_the_host_pass() -> None:
    """A generator built with device= for run-device ops, and a host generator for host
    draws that are then moved, are what a GPU accepts: no error."""
    with DeviceAudit():
        probs = torch.ones(4, 3, device="cpu")
        run_gen = torch.Generator(device="cpu").manual_seed(0)
        drawn = torch.multinomial(probs, 1, generator=run_gen)
        order = torch.randperm(4, generator=torch.Generator().manual_seed(1)).to("cpu")
        assert (drawn[order] < 3).all()


def test_a_run_generator_drawing_a_host_tensor_is_caught() -> None:
    """torch.randn without device= but with a run-device generator fails on CUDA too."""
    gen = None
    with DeviceAudit(), pytest.raises(DeviceAuditError, match=r"torch\.randn draws from a run"):
        gen = torch.Generator(device="cpu")
        torch.randn(3, generator=gen)
    assert gen is not None


def test_a_factory_without_device_added_to_run_tensors_is_caught() -> None:
    """torch.arange(n) (host) times a run-device tensor is the mix CUDA refuses."""
    with DeviceAudit(), pytest.raises(DeviceAuditError, match="mixes host tensors"):
        s = torch.ones(5, device="cpu")
        s * torch.arange(5)


def test_a_model_never_moved_to_the_device_is_caught() -> None:
    """A Linear built on the host, fed a run-device batch, fails: parameters are tracked."""
    with DeviceAudit(), pytest.raises(DeviceAuditError, match="mixes host tensors"):
        model = nn.Linear(3, 2)
        model(torch.ones(4, 3, device="cpu"))


def test_what_cuda_lets_through_passes() -> None:
    """A moved model, host scalars, host index tensors, copy_ across devices and a
    checkpoint loaded to the host then copied into the model are all accepted."""
    buffer = io.BytesIO()
    torch.save({"weight": torch.full((2, 3), 0.5)}, buffer)
    with DeviceAudit():
        model = nn.Linear(3, 2).to("cpu")
        x = torch.ones(4, 3, device="cpu")
        y = model(x) * torch.tensor(2.0)  # a 0-dim host tensor is a scalar
        picked = y[torch.tensor([0, 2])]  # host indices into run-device data
        buffer.seek(0)
        state = torch.load(buffer, map_location="cpu", weights_only=True)
        with torch.no_grad():
            model.weight.copy_(state["weight"])
        model(x).sum().backward()
        torch.optim.AdamW(model.parameters()).step()
    assert picked.shape == (2, 2)
    assert not torch.equal(model.weight.detach(), torch.full((2, 3), 0.5))  # it stepped


def test_leaving_the_audit_restores_torch() -> None:
    """torch.Generator, torch.load and Parameter construction are torch's own again."""
    before = (torch.Generator, torch.load, torch.nn.Parameter.__dict__["__new__"])
    with pytest.raises(DeviceAuditError), DeviceAudit():
        torch.ones(2, device="cpu") + torch.ones(2)
    after = (torch.Generator, torch.load, torch.nn.Parameter.__dict__["__new__"])
    assert after == before
    assert type(torch.Generator()) is torch._C.Generator


def test_moving_and_casting_a_model_in_one_call_is_a_move() -> None:
    """Module.to(device, dtype) swaps each parameter's data: the parameters are on the
    run's device afterwards, and a host batch fed to them is caught."""
    with DeviceAudit():
        model = nn.Linear(3, 2).to("cpu", torch.float64)
        model(torch.ones(4, 3, device="cpu", dtype=torch.float64))
    with DeviceAudit(), pytest.raises(DeviceAuditError, match="mixes host tensors"):
        model = nn.Linear(3, 2).to("cpu", torch.float64)
        model(torch.ones(4, 3, dtype=torch.float64))
