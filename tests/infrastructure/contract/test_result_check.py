"""check_result: a plugin's TrainResult with a field of the wrong type is one line naming
the field; a good one, and what from_fit builds, pass unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16_infrastructure.contract.plugin_api import (
    TrainRequestError,
    TrainResultError,
    check_result,
)
from genesis_fp16_infrastructure.contract.reports import GateReport, TrainResult
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.reports import Demotion

DEMOTION = Demotion("fp16", "bf16", "overflow_rate", 40, 30, "12 of 20 steps overflowed")
GOOD = TrainResult(
    agent="my_agent",
    precision_requested="auto",
    precision_used="fp32",
    precision_reason="default",
    device="cpu",
    steps=20,
    skipped_steps=0,
    overflow_rate=0.0,
    loss_scale=1.0,
    final_train_loss=float("nan"),  # NaN is honest: to_json makes it null
    eval={"loss": 0.2, "steps": 3},  # an int is a float here
    samples_per_second=100.0,
    wall_seconds=2.0,
    checkpoint=Path("ckpt.pt"),
    quarantined=0,
    phases={"train": 1.5},
    diagnostics={"kl": 0.01},
    components={"policy": "bf16", "fused": True},
    extra={"notes": ["a", 1, None, {"b": 2.5}]},
    demotions=(DEMOTION,),
    gate=GateReport("promoted", "no worse", precision="fp32"),
)


def test_a_well_typed_result_passes_unchanged() -> None:
    """Every field as declared (None where optional, an int for a float, a str path):
    the same object back, and train --json's dumps of it works."""
    assert check_result(GOOD) is GOOD
    loose = dataclasses.replace(GOOD, checkpoint="ckpt.pt", final_train_loss=1, gate=None)
    assert check_result(loose) is loose
    json.dumps(loose.to_json(), allow_nan=False)


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (
            {"precision_requested": PrecisionRequest("bf16")},
            "my_agent's TrainResult.precision_requested: Literal['auto', 'fp32', 'bf16', "
            "'fp16'] expected, got PrecisionRequest; report request.precision.requested "
            "(plugin API 2)",
        ),
        (
            {"precision_used": "fp8"},
            "my_agent's TrainResult.precision_used: one of 'fp32', 'bf16', 'fp16' expected, "
            "got 'fp8'",
        ),
        (
            {"final_train_loss": torch.tensor(0.5)},
            "my_agent's TrainResult.final_train_loss: float expected, got Tensor",
        ),
        (
            {"eval": {"loss": 0.2, "auc": torch.tensor(0.9)}},
            "my_agent's TrainResult.eval['auc']: float expected, got Tensor",
        ),
        ({"steps": True}, "my_agent's TrainResult.steps: int expected, got bool"),
        ({"steps": 4.0}, "my_agent's TrainResult.steps: int expected, got float"),
        (
            {"phases": {"train": "1.5 s"}},
            "my_agent's TrainResult.phases['train']: float expected, got str",
        ),
        (
            {"extra": {"weights": torch.ones(2)}},
            "my_agent's TrainResult.extra['weights']: Tensor is not JSON",
        ),
        (
            {"demotions": ({"from": "fp16", "to": "bf16"},)},
            "my_agent's TrainResult.demotions[0]: Demotion expected, got dict",
        ),
        (
            {"demotions": (dataclasses.replace(DEMOTION, detail=object()),)},
            "my_agent's TrainResult.demotions[0]: Demotion.detail: str expected, got object",
        ),
        (
            {"gate": {"outcome": "promoted", "reason": "better"}},
            "my_agent's TrainResult.gate: GateReport expected, got dict",
        ),
    ],
    ids=["api1_precision", "fp8", "tensor_loss", "tensor_eval", "bool", "float_steps",
         "str_phase", "tensor_extra", "dict_demotion", "object_in_demotion", "dict_gate"],
)  # fmt: skip
def test_a_field_of_the_wrong_type_is_one_line_naming_it(change: dict[str, Any], line: str) -> None:
    """The first wrong field, at its innermost key, what it should hold and what it held;
    a TrainRequestError, so train and the daemon refuse the run in that one line."""
    with pytest.raises(TrainResultError) as raised:
        check_result(dataclasses.replace(GOOD, **change), "my_agent")
    assert str(raised.value).startswith(line), str(raised.value)
    assert "\n" not in str(raised.value) and isinstance(raised.value, TrainRequestError)


def test_something_else_than_a_result_is_named() -> None:
    """train() returning a dict: one line saying so."""
    with pytest.raises(TrainResultError, match="my_agent's train\\(\\) returned a dict, not a"):
        check_result({"steps": 1}, "my_agent")
