"""``replay --against fp32``'s comparison: real fp16 and fp32 steps of a tiny model,
traced module by module, the first departure named with both values, and the advice."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

from genesis_fp16_infrastructure.errors import BundleError
from genesis_fp16_infrastructure.training.flight.bundle import FaultBundle, data_signature
from genesis_fp16_infrastructure.training.flight.recorded_step import (
    allowed_types,
    plain_batch,
    rebuilt_batch,
)
from genesis_fp16_infrastructure.training.flight.step_trace import Trace, advise, compare


def _traced(model: nn.Module, x: torch.Tensor, dtype: torch.dtype | None) -> Trace:
    """One forward and backward of ``model`` on ``x``, in autocast ``dtype`` (None: fp32)."""
    trace = Trace(model)
    with trace, torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        loss = trace.wrap_loss(lambda m, b: m(b).float().square().mean())(model, x)
    loss.backward()
    return trace


def _model(second_scale: float) -> nn.Sequential:
    """Two linear layers; the second's weights scaled (its output's range)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    with torch.no_grad():
        model[1].weight.mul_(second_scale)
    return model


def test_an_fp16_overflow_in_one_module_is_named_with_both_values_and_bf16_advised() -> None:
    """The second layer's output reaches ~1e5 in fp32 (its weights, ~3.5e4 at most, fit
    fp16): fp16 gives inf there, the first layer stays within the tolerance, and the
    advice is bf16 (its range holds 1e5)."""
    x = torch.full((3, 4), 3.0)
    fp32 = _traced(_model(1e5), x, None)
    low = _traced(_model(1e5), x, torch.float16)
    report = compare(low, fp32, tolerance=0.1)
    first = report["first_departure"]
    assert (first["module"], first["phase"], first["tensor"]) == ("1", "forward", "output")
    assert math.isinf(first["low"]) and 65504 < abs(first["fp32"]) < 1e7
    assert report["forward_max"]["fp32"]["0"] == report["forward_max"]["low"]["0"] or (
        abs(report["forward_max"]["low"]["0"] / report["forward_max"]["fp32"]["0"] - 1) < 0.01
    )
    advice = advise("fp16", first, report["forward_max"]["fp32"], fp32_finite=True)
    assert advice["action"] == "bf16" and "65504" in advice["why"]


def test_the_same_step_within_range_has_no_departure() -> None:
    """Unscaled weights: fp16 stays within 10% of fp32 everywhere, forward and backward."""
    x = torch.ones(3, 4)
    report = compare(_traced(_model(1.0), x, torch.float16), _traced(_model(1.0), x, None))
    assert report["first_departure"] is None
    assert advise("fp16", None, report["forward_max"]["fp32"], True)["action"] == "none"


def test_a_tighter_tolerance_finds_bf16s_rounding_in_the_first_module() -> None:
    """bf16 keeps 8 bits of mantissa: at a tolerance of 1e-6 its first layer departs
    (lost precision, finite), and the advice is that module kept in fp32."""
    x = torch.full((3, 4), 0.3333)
    low = _traced(_model(1.0), x, torch.bfloat16)
    report = compare(low, _traced(_model(1.0), x, None), tolerance=1e-6)
    first = report["first_departure"]
    assert first["module"] == "0" and first["kind"] == "beyond the tolerance"
    assert math.isfinite(first["low"]) and first["relative_error"] > 1e-6
    advice = advise("bf16", first, report["forward_max"]["fp32"], True)
    assert advice["action"] == "fp32_exception" and "keep 0 in fp32" in advice["why"]


@pytest.mark.parametrize(
    ("fp32_max", "finite"),
    [({"a": 1.0, "b": 2.0}, False), ({"a": 1e6, "b": 1e7, "c": 1.0}, True)],
    ids=["fp32_not_finite", "most_modules_beyond_range"],
)
def test_values_that_grow_everywhere_advise_a_lower_learning_rate(
    fp32_max: dict[str, float], finite: bool
) -> None:
    """fp32 itself not finite, or most modules beyond fp16's range in fp32 too: no
    precision holds it, and the advice says the learning rate."""
    first = {"module": "a", "phase": "forward", "tensor": "output", "low": math.inf, "fp32": 1e6}
    advice = advise("fp16", first, fp32_max, finite)
    assert advice["action"] == "learning_rate" and "grow everywhere" in advice["why"]


class _Pair(NamedTuple):
    a: torch.Tensor
    b: int


def test_batch_types_resolve_only_against_the_declared_ones() -> None:
    """A declared named tuple comes back; a name outside the declared ones is refused,
    and the module it names is not imported (it stays out of sys.modules)."""
    plain = plain_batch(_Pair(torch.ones(2), 3))
    back = rebuilt_batch(plain, allowed_types([_Pair]))
    assert isinstance(back, _Pair) and back.b == 3
    with pytest.raises(BundleError, match="not one this agent declares"):
        rebuilt_batch(plain, {})
    hostile = {"__bundle_type__": "antigravity:x", "fields": {}}
    with pytest.raises(BundleError, match="nothing was imported"):
        rebuilt_batch(hostile, allowed_types([_Pair]))
    assert "antigravity" not in sys.modules
    with pytest.raises(ValueError, match="only named tuples and dataclasses"):
        allowed_types([dict])


def test_data_signature_tells_unchanged_changed_and_gone(tmp_path: Path) -> None:
    """The same file is unchanged; one byte more is changed; deleted, it is gone; a
    folder is hashed over its files; a device is never read."""
    data = tmp_path / "pool.json"
    data.write_text("[1, 2]")
    recorded = data_signature(data)

    def data_change(signature: dict[str, Any] | None) -> str | None:
        return FaultBundle(data=signature).data_change()

    assert data_change(recorded) is None
    data.write_text("[1, 2, 3]")
    assert "has changed" in str(data_change(recorded))
    data.unlink()
    assert "is gone" in str(data_change(recorded))
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.jsonl").write_text("{}\n")
    folder = data_signature(tmp_path / "folder")
    assert folder is not None and folder["bytes"] == 3 and data_change(folder) is None
    assert data_signature("/dev/zero") == {"path": "/dev/zero", "error": "not a file or folder"}
    assert "no data signature" in str(data_change(None))
