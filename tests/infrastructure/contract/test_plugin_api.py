"""The plugin API's bridges to fit(): requests become FitOptions, fit results become reports."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16_infrastructure.contract.plugin_api import (
    API_CHANGES,
    API_VERSION,
    api_version_error,
)
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.training import GuardConfig, fit
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest


class _Line:
    """y = 3x on 64 fixed points, 8 per batch."""

    def __init__(self) -> None:
        self.x = torch.linspace(-1, 1, 64).unsqueeze(1)

    def build_model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Linear(1, 1)

    def build_optimizers(self, model: torch.nn.Module) -> list[torch.optim.Optimizer]:
        return [torch.optim.SGD(model.parameters(), lr=0.1)]

    def build_schedulers(self, optimizers: Any) -> tuple[()]:
        return ()

    def train_batches(self, epoch: int, seed: int) -> Any:
        for i in range(0, 64, 8):
            yield self.x[i : i + 8], 8

    def loss(self, model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(model(batch).float(), 3 * batch)

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        with torch.no_grad():
            return {"loss": float(self.loss(model, self.x))}

    def extra_state(self) -> dict[str, Any]:
        return {}


def _request(tmp_path: Path, **fields: Any) -> TrainRequest:
    return TrainRequest(
        agent="line",
        precision="bf16",
        precision_reason="--precision",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "ckpt",
        steps=12,
        seed=3,
        log_interval=4,
        guard=GuardConfig(),
        **fields,
    )


def test_fit_options_carry_the_request_and_take_overrides(tmp_path: Path) -> None:
    """Every field the request sets reaches FitOptions; an override replaces just that one."""
    request = _request(tmp_path)
    options = request.fit_options(checkpoint_steps=5, steps=7)
    assert (options.precision.requested, options.device, options.seed) == ("bf16", "cpu", 3)
    assert (options.steps, options.epochs, options.checkpoint_steps) == (7, None, 5)
    assert options.checkpoint_dir == tmp_path / "ckpt"
    assert options.guard == request.guard and options.log_interval == 4


def test_the_bundle_context_is_the_request_made_only_when_a_bundle_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fit_options() does not serialise the request (issue 70: no JSON round trip per run);
    the flight config makes the context when asked: the agent and the request's JSON."""
    request = _request(tmp_path)
    made = []
    plain = TrainRequest.to_json
    monkeypatch.setattr(TrainRequest, "to_json", lambda self: made.append(1) or plain(self))
    flight = request.fit_options().flight
    assert flight is not None and made == []
    context = flight.context_data()
    assert made == [1] and context["agent"] == "line"
    assert context["request"]["seed"] == 3 and "snapshot" not in context["request"]


def test_from_fit_reports_what_ran(tmp_path: Path) -> None:
    """The report's figures are the fit run's own: precision used, steps, eval, checkpoint."""
    request = _request(tmp_path)
    result = fit(_Line(), request.fit_options())
    report = TrainResult.from_fit(request, result, quarantined=2, extra={"note": "x"})
    assert report.precision_requested == "bf16" and report.precision_used == "bf16"
    assert report.precision_reason.startswith("--precision; ")
    assert report.steps == 12 == result.steps_run
    assert report.eval == result.eval and report.checkpoint == result.checkpoint
    assert report.quarantined == 2 and report.extra == {"note": "x"}
    assert report.final_train_loss == result.summary.train_loss


class _SlowEval(_Line):
    """_Line whose evaluation takes five seconds on a clock the test moves."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = [0.0]

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        self.clock[0] += 5.0
        return super().evaluate(model)


def test_from_fit_reports_the_runs_wall_time_not_the_steps_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wall_seconds`` is the fit call's whole time, its final evaluation included
    (rlhf_ppo's greedy completion of every eval prompt was left out: a third of its run at
    25,000 prompts); ``summary.wall_seconds`` stays the steps' clock."""
    task, real = _SlowEval(), time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: real() + task.clock[0])
    request = _request(tmp_path)
    result = fit(task, request.fit_options())
    report = TrainResult.from_fit(request, result, quarantined=0)
    assert result.summary.wall_seconds < 5.0 <= report.wall_seconds == result.seconds
    assert report.wall_seconds >= 5.0 + result.summary.wall_seconds


def test_agent_option_parses_text_and_refuses_wrong_types() -> None:
    """Text from the CLI/.env becomes the declared type; a wrong type or choice is refused."""
    from genesis_fp16_infrastructure.contract.plugin_api import (
        AgentOption,
        TrainRequestError,
        parse_options,
    )

    declared = [
        AgentOption("lr", "float", 0.1, "step size"),
        AgentOption("steps", "int", 3, "count"),
        AgentOption("fast", "bool", False, "flag"),
        AgentOption("mode", "str", "a", "mode", choices=("a", "b")),
    ]
    given = {"LR": "0.5", "steps": 4, "fast": "yes", "mode": "b"}
    assert parse_options("x", declared, given) == {
        "lr": 0.5,
        "steps": 4,
        "fast": True,
        "mode": "b",
    }
    for bad, fragment in (
        ({"steps": "1.5"}, "'1.5' is not an int"),
        ({"steps": True}, "True is not an int"),
        ({"fast": "maybe"}, "not a boolean"),
        ({"mode": "c"}, "'c' is not one of a, b"),
        ({"nope": 1}, "unknown option 'nope'; valid options: lr, steps, fast, mode"),
    ):
        with pytest.raises(TrainRequestError, match=fragment):
            parse_options("x", declared, bad)


def test_a_request_without_a_budget_trains_the_documented_default(tmp_path: Path) -> None:
    """No steps and no epochs: fit_options() gives DEFAULT_STEPS, not a ValueError."""
    from genesis_fp16_infrastructure.contract.train_request import DEFAULT_STEPS

    request = dataclasses.replace(_request(tmp_path), steps=None)
    assert request.steps is None and request.epochs is None
    assert request.fit_options().steps == DEFAULT_STEPS
    assert request.fit_options(epochs=2).steps is None  # a budget the plugin names wins
    result = fit(_Line(), request.fit_options(precision="fp32", device="cpu"))
    assert result.steps_run == DEFAULT_STEPS


def test_the_plugin_import_path_has_everything_a_plugin_needs() -> None:
    """genesis_fp16.plugin_api names the contract, fit, to_device, the task and the errors."""
    import genesis_fp16.plugin_api as api
    from genesis_fp16_infrastructure import training

    for name in ("AgentPlugin", "TrainRequest", "TrainResult", "TrainRequestError", "ProbeSetup"):
        assert name in api.__all__
    for name in ("fit", "to_device", "TrainingTask", "FitOptions", "PrecisionError"):
        assert getattr(api, name) is getattr(training, name)
    assert api.DEFAULT_STEPS > 0


def test_a_precision_request_compared_with_a_name_raises_naming_requested() -> None:
    """request.precision == "bf16" (API version 1's habit) raises a TypeError naming
    request.precision.requested instead of being False whatever was asked; requests
    still compare with requests."""
    asked = PrecisionRequest("bf16", floor="bf16")
    for compare in (
        lambda: asked == "bf16",
        lambda: asked != "fp16",
        lambda: "bf16" == asked,  # noqa: SIM300 (the reflected comparison raises too)
        lambda: asked in ("fp16", "bf16"),
    ):
        with pytest.raises(TypeError, match=r"request\.precision\.requested \(here 'bf16'\)"):
            compare()
    assert asked.requested == "bf16"
    assert asked == PrecisionRequest.from_json(asked.to_json())
    assert asked != PrecisionRequest("bf16") and asked != 1


def test_every_api_version_after_the_first_says_what_it_changed() -> None:
    """A bump of API_VERSION comes with its API_CHANGES line, which the refusal quotes."""
    assert set(API_CHANGES) == set(range(2, API_VERSION + 1))
    assert API_CHANGES[2] in api_version_error(1)
    assert api_version_error(API_VERSION + 1).endswith(f"supports 2 and {API_VERSION}")
