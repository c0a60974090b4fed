"""resolve_execution(): eager, cuda_graph or cuda_graph_compiled, decided once with a reason;
'on' (cuda_graph or compile) never falls back."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.errors import ExecutionError
from genesis_fp16_infrastructure.training import (
    FitOptions,
    PrecisionPolicy,
    Trainer,
    TrainerConfig,
    fit,
)
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.precision.execution_names import (
    COMPILE_MODE,
    EXECUTION_MODES,
)
from genesis_fp16_infrastructure.training.step.cuda_graph import flatten_tensors, signature
from genesis_fp16_infrastructure.training.step.execution import MeasuredExecution, resolve_execution

CUDA = torch.device("cuda", 0)  # resolve_execution only reads .type: no GPU needed


def _adamw(**kwargs: object) -> torch.optim.Optimizer:
    return torch.optim.AdamW(torch.nn.Linear(2, 1).parameters(), **kwargs)  # type: ignore[arg-type]


def test_off_is_eager_whatever_the_run() -> None:
    """cuda_graph=off runs eagerly and says it was asked to."""
    resolved = resolve_execution("off", CUDA, [_adamw(capturable=True)])
    assert (resolved.used, resolved.reason) == ("eager", "cuda_graph=off: eager steps requested")


@pytest.mark.parametrize(
    ("device", "optimizer", "schedulers", "sync", "world", "why"),
    [
        (torch.device("cpu"), {"capturable": True}, 0, False, 1, "need a CUDA device"),
        (CUDA, {}, 0, False, 1, "optimizer 0 (AdamW) is not capturable"),
        (CUDA, {"capturable": True}, 1, False, 1, "1 LR scheduler(s)"),
        (CUDA, {"capturable": True}, 0, True, 1, "reads the overflow flag on the host"),
        (CUDA, {"capturable": True}, 0, False, 2, "2 ranks under torchrun"),
    ],
)
def test_each_obstacle_is_named_by_auto_and_refused_by_on(
    device: torch.device,
    optimizer: dict[str, object],
    schedulers: int,
    sync: bool,
    world: int,
    why: str,
) -> None:
    """auto runs eagerly with the obstacle as its reason; on raises one line naming it."""
    opt = _adamw(**optimizer)
    scheds = [torch.optim.lr_scheduler.StepLR(opt, 1)] * schedulers
    auto = resolve_execution(
        "auto", device, [opt], scheds, host_sync_per_step=sync, world_size=world
    )
    assert auto.used == "eager" and why in auto.reason
    with pytest.raises(ExecutionError, match=re.escape(why)) as raised:
        resolve_execution("on", device, [opt], scheds, host_sync_per_step=sync, world_size=world)
    assert "\n" not in str(raised.value) and "cuda_graph=on" in str(raised.value)


def test_a_capturable_run_is_captured_under_auto_and_on() -> None:
    """A capturable CUDA run: 'auto' and 'on' capture (the captured step passed its GPU
    tests on an H100, benchmarks/results/h100-2026-11-23.md); 'off' stays the escape hatch."""
    opt = _adamw(capturable=True)
    assert resolve_execution("on", CUDA, [opt]).used == "cuda_graph"
    auto = resolve_execution("auto", CUDA, [opt])
    assert auto.used == "cuda_graph" and "captured" in auto.reason
    assert resolve_execution("off", CUDA, [opt]).used == "eager"


def test_auto_follows_a_measurement_but_never_past_an_obstacle() -> None:
    """A measured 'auto' runs what timed faster, with the timings as its reason; a run
    that cannot be captured stays eager with the obstacle whatever was measured."""
    timings = "measured fp32 steps: eager 1.0 ms, cuda_graph 1.2 ms"
    faster_eager = MeasuredExecution("eager", timings)
    auto = resolve_execution("auto", CUDA, [_adamw(capturable=True)], measured=faster_eager)
    assert auto.used == "eager" and auto.reason == f"auto: {faster_eager.reason}"
    graph = MeasuredExecution("cuda_graph", "measured")
    stuck = resolve_execution("auto", CUDA, [_adamw()], measured=graph)
    assert stuck.used == "eager" and "not capturable" in stuck.reason
    on = resolve_execution("on", CUDA, [_adamw(capturable=True)], measured=faster_eager)
    assert on.used == "cuda_graph"  # an explicit request is not second-guessed


def test_compile_on_runs_the_compiled_model_in_the_captured_step_as_its_own_mode() -> None:
    """compile=on on a capturable CUDA run is cuda_graph_compiled under auto and on, even
    where auto measured eager faster; compile=off leaves the execution as it was."""
    opt = _adamw(capturable=True)
    faster_eager = MeasuredExecution("eager", "measured fp32 steps: eager 1.0 ms")
    for requested in ("auto", "on"):
        resolved = resolve_execution(requested, CUDA, [opt], measured=faster_eager, compile="on")
        assert resolved.used == "cuda_graph_compiled" and resolved.requested == requested
        assert resolved.reason.startswith("compile=on") and COMPILE_MODE in resolved.reason
    assert resolve_execution("on", CUDA, [opt], compile="off").used == "cuda_graph"
    assert "cuda_graph_compiled" in EXECUTION_MODES  # exported by genesis_fp16_execution


@pytest.mark.parametrize(
    ("requested", "device", "optimizer", "why"),
    [
        ("auto", torch.device("cpu"), {"capturable": True}, "CUDA graphs need a CUDA device"),
        ("on", CUDA, {}, "optimizer 0 (AdamW) is not capturable"),
        ("off", CUDA, {"capturable": True}, "cuda_graph=off asks for eager steps"),
    ],
)
def test_compile_on_without_a_captured_step_is_one_line_naming_why(
    requested: str, device: torch.device, optimizer: dict[str, object], why: str
) -> None:
    """compile=on never runs compiled-but-eager: where the step is not captured, one line
    names compile=on and the obstacle (auto does not fall back either)."""
    with pytest.raises(ExecutionError) as raised:
        resolve_execution(requested, device, [_adamw(**optimizer)], compile="on")
    message = str(raised.value)
    assert "\n" not in message and message.startswith("compile=on") and why in message
    assert raised.value.obstacle.startswith(why) and message.endswith("set compile to off")


class Pair(NamedTuple):
    x: torch.Tensor
    step: int


def test_batch_signature_covers_shapes_and_leaf_values_not_tensor_values() -> None:
    """Same shapes and leaves: same graph; another shape, dtype or int leaf: another graph."""
    base = signature([Pair(torch.zeros(4, 2), 1)])
    assert base is not None
    assert signature([Pair(torch.randn(4, 2), 1)]) == base
    assert signature([Pair(torch.zeros(3, 2), 1)]) != base  # an epoch's last partial batch
    assert signature([Pair(torch.zeros(4, 2, dtype=torch.float64), 1)]) != base
    assert signature([Pair(torch.zeros(4, 2), 2)]) != base  # an int is baked into a graph
    assert signature([Pair(torch.zeros(4, 2), 1), Pair(torch.zeros(4, 2), 1)]) != base
    assert signature([{"x": torch.zeros(1), "meta": ["unhashable", {}]}]) is not None
    assert signature([{"x": torch.zeros(1), "obj": bytearray(b"x")}]) is None  # never captured


def test_flatten_walks_the_same_order_for_copies() -> None:
    """The static buffers and a fresh batch flatten in the same order."""
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    assert [t.numel() for t in flatten_tensors([(a, {"k": b}), [c, 5]])] == [1, 2, 3]


def _cpu_trainer(cuda_graph: str) -> Trainer:
    model = torch.nn.Linear(2, 1)
    policy = PrecisionPolicy.create("fp32", "cpu")
    opt = torch.optim.AdamW(model.parameters(), capturable=True)
    return Trainer(model, [opt], policy, TrainerConfig(cuda_graph=cuda_graph))


def test_trainer_reports_what_ran_and_refuses_on_before_the_first_step() -> None:
    """On a CPU: auto is eager with the reason; on fails at construction; a typo names choices."""
    trainer = _cpu_trainer("auto")
    assert trainer.execution.used == "eager" and trainer.graphs is None
    assert "need a CUDA device" in trainer.execution.reason
    with pytest.raises(ExecutionError, match="cuda_graph=on, but this run cannot be captured"):
        _cpu_trainer("on")
    with pytest.raises(ValueError, match="choose from auto, on, off"):
        TrainerConfig(cuda_graph="yes")


def test_trainer_refuses_compile_on_a_cpu_at_construction() -> None:
    """TrainerConfig(compile='on') on a CPU fails before the first step; a typo names choices."""
    model = torch.nn.Linear(2, 1)
    policy = PrecisionPolicy.create("fp32", "cpu")
    opt = torch.optim.AdamW(model.parameters(), capturable=True)
    with pytest.raises(ExecutionError, match=r"^compile=on .* cannot be captured: CUDA graphs"):
        Trainer(model, [opt], policy, TrainerConfig(compile="on"))
    assert TrainerConfig().compile == "off"
    with pytest.raises(ValueError, match="compile='yes': choose from off, on"):
        TrainerConfig(compile="yes")


def test_compile_travels_from_the_request_to_fit_which_refuses_it_before_any_step(
    tmp_path: Path,
) -> None:
    """TrainRequest.compile survives JSON and reaches FitOptions; fit() on a CPU raises
    before building a checkpoint folder, and compile=off trains as before."""
    request = TrainRequest(
        agent="t",
        precision="fp32",
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "c",
        compile="on",
    )
    assert TrainRequest.from_json(request.to_json()).compile == "on"
    options = request.fit_options(steps=2)
    assert options.compile == "on"
    with pytest.raises(ExecutionError, match=r"^compile=on"):
        fit(_Task(), options)
    assert not (tmp_path / "c").exists()
    assert fit(_Task(), request.fit_options(steps=2, compile="off")).execution.used == "eager"


def test_fit_result_train_json_and_checkpoint_carry_the_execution(tmp_path: Path) -> None:
    """fit() reports the execution; TrainResult.to_json() and the checkpoint config keep it."""
    task = _Task()
    options = FitOptions(precision="fp32", steps=2, cuda_graph="auto", checkpoint_dir=tmp_path)
    result = fit(task, options)
    assert result.execution.used == "eager" and "CUDA device" in result.execution.reason
    request = TrainRequest(
        agent="t",
        precision="fp32",
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path,
        cuda_graph="auto",
    )
    out = TrainResult.from_fit(request, result).to_json()
    assert out["execution"] == "eager" and out["execution_reason"] == result.execution.reason
    assert result.checkpoint is not None
    saved = torch.load(result.checkpoint, weights_only=True)[keys.CONFIG]
    assert saved["execution"] == {"requested": "auto", "used": "eager"}


class _Task:
    def build_model(self) -> torch.nn.Module:
        return torch.nn.Linear(2, 1)

    def build_optimizers(self, model: torch.nn.Module) -> list[torch.optim.Optimizer]:
        return [torch.optim.AdamW(model.parameters(), fused=True)]

    def build_schedulers(self, optimizers: object) -> tuple[()]:
        return ()

    def train_batches(self, epoch: int, seed: int) -> list[tuple[torch.Tensor, int]]:
        return [(torch.ones(4, 2), 4)]

    def loss(self, model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch).float().pow(2).mean()

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        return {"loss": 0.0}

    def extra_state(self) -> dict[str, object]:
        return {}
