"""The captured step verified against eager before a run trusts it, and a capture that
raises falling back to eager from the same step boundary: on a CPU, through a stand-in
for the CUDA graphs that runs the trainer's captured path (the GPU side is in
test_cuda_graph.py and tests/gpu_check.py)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from test_fit import RegressionTask

from genesis_fp16_infrastructure.training import FitOptions, PrecisionPolicy, Trainer, fit
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.run import verify_capture
from genesis_fp16_infrastructure.training.run.verify_capture import (
    OVERFLOW_STEP,
    VERIFY_STEPS,
    CaptureVerdict,
    compare_steps,
    read_verdict,
    verification_cache,
    verification_key,
    write_verdict,
)
from genesis_fp16_infrastructure.training.step import trainer as trainer_module
from genesis_fp16_infrastructure.training.step.cuda_graph import CaptureFailed
from genesis_fp16_infrastructure.training.step.execution import ResolvedExecution
from genesis_fp16_infrastructure.training.step.trainer import TrainerConfig

FIT_MODULE = "genesis_fp16_infrastructure.training.run.fit"


class StandInGraphs:
    """StepGraphs' interface on a CPU: 3 warm-up calls, a capture, then replays, each
    running the trainer's device step through its captured path. ``wrong_at`` (1-based
    call) flips the lowest bit of one parameter after that step: a replay one bit wrong;
    ``raise_at`` raises instead of running that call (a capture that fails)."""

    warmup = 3

    def __init__(self, wrong_at: int | None = None, raise_at: int | None = None) -> None:
        self.calls = 0
        self.wrong_at, self.raise_at = wrong_at, raise_at

    def bind(self, loss_fn: Callable[..., Any]) -> None:
        pass

    def captures(self, key: object) -> bool:
        return self.calls == self.warmup

    def run(
        self, body: Callable[[Sequence[Any]], object], micro_batches: Sequence[Any], key: object
    ) -> str:
        self.calls += 1
        if self.calls == self.raise_at:
            raise CaptureFailed("stand-in: operation not permitted when stream is capturing")
        body(micro_batches)
        if self.calls == self.wrong_at:
            with torch.no_grad():
                first = next(iter(self._model.parameters()))
                bits = first.view(-1).view(torch.int32)
                bits[0] ^= 1  # one bit, one step
        return "replayed" if self.calls > self.warmup + 1 else "captured"

    def reset(self) -> None:
        pass

    _model: torch.nn.Module


def _trainer(
    task: RegressionTask, precision: str = "fp32", graphs: StandInGraphs | None = None
) -> Trainer:
    torch.manual_seed(0)
    model = task.build_model()
    policy = PrecisionPolicy.create(precision, "cpu", announce=False)
    trainer = Trainer(model, task.build_optimizers(model), policy, TrainerConfig(cuda_graph="off"))
    if graphs is not None:  # the captured path, on a CPU
        graphs._model = model
        trainer.graphs = graphs  # type: ignore[assignment]
        trainer.execution = ResolvedExecution("auto", "cuda_graph", "stand-in")
    return trainer


def _batches(task: RegressionTask) -> list[Any]:
    return [batch for batch, _ in task.train_batches(0, 0)]


@pytest.mark.parametrize("wrong_at", [4, VERIFY_STEPS])
def test_a_captured_step_one_bit_wrong_at_one_step_is_caught(wrong_at: int) -> None:
    """One flipped bit of one parameter after one step (the capture, or the last replay)
    is caught, and named at that step."""
    task = RegressionTask()
    reference, candidate = _trainer(task), _trainer(task, graphs=StandInGraphs(wrong_at))
    found = compare_steps(reference, candidate, _batches(task), task.loss, overflow_step=None)
    assert found is not None and found.startswith(f"step {wrong_at}: parameters differ")


def test_an_honest_stand_in_equals_eager_through_the_captured_bookkeeping() -> None:
    """The same step through the captured path (device slot, in-place norm) equals eager
    bit for bit: the check does not flag what is right."""
    task = RegressionTask()
    reference, candidate = _trainer(task), _trainer(task, graphs=StandInGraphs())
    assert compare_steps(reference, candidate, _batches(task), task.loss) is None


def test_both_copies_draw_the_same_numbers_from_the_tasks_own_generator() -> None:
    """A loss that draws from the task's own generator (``cuda_generators()``, CUDA-only
    in a real capture; a CPU one through the stand-in here) draws the same numbers in the
    eager and the captured copy: the reference's draws do not move the candidate's."""
    task = RegressionTask()
    own = torch.Generator().manual_seed(7)

    def noisy(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        return task.loss(model, batch) * (1 + torch.rand((), generator=own))

    reference, candidate = _trainer(task), _trainer(task, graphs=StandInGraphs())
    reference.generators = candidate.generators = (own,)
    before = own.get_state()
    assert compare_steps(reference, candidate, _batches(task), noisy) is None
    assert not torch.equal(own.get_state(), before)  # the loss did draw from it


def test_fp16_verification_includes_a_skipped_overflow_step() -> None:
    """In fp16 the boosted step overflows and is skipped in both runs, and a wrong
    replay after it is still caught (tiny model: fp16 is emulated on a CPU)."""
    task = RegressionTask(batches=2, batch_size=4, width=4)
    reference, candidate = _trainer(task, "fp16"), _trainer(task, "fp16", StandInGraphs())
    batches = _batches(task)
    assert compare_steps(reference, candidate, batches, task.loss) is None
    assert reference.summary().skipped_steps >= 1
    before = reference.scaler.get_scale()
    reference, wrong = _trainer(task, "fp16"), _trainer(task, "fp16", StandInGraphs(7))
    found = compare_steps(reference, wrong, batches, task.loss)
    assert found is not None and found.startswith("step 7:"), found
    assert OVERFLOW_STEP < 7 and before < 65536.0  # the overflow backed the scale off


def test_the_key_names_device_torch_shapes_precision_and_execution() -> None:
    """A verdict holds for one key: another precision, batch shape or model is another key,
    and a cached verdict is read back only for its own key."""
    task = RegressionTask()
    trainer = _trainer(task, graphs=StandInGraphs())
    batch = _batches(task)[0]
    key = verification_key(trainer, batch)
    assert key["device"] == "cpu" and key["torch"] == torch.__version__
    assert (key["precision"], key["execution"]) == ("fp32", "cuda_graph")
    assert verification_key(_trainer(task, "bf16", StandInGraphs()), batch) != key
    other = RegressionTask(batch_size=8)
    assert verification_key(trainer, _batches(other)[0])["batch"] != key["batch"]
    wider = _trainer(RegressionTask(width=32), graphs=StandInGraphs())
    assert verification_key(wider, batch)["model"] != key["model"]


def test_verdicts_are_cached_per_key(tmp_path: Path) -> None:
    """write_verdict keeps every key's verdict; read_verdict finds only an exact key."""
    cache = verification_cache(tmp_path / "precision_calibration.json")
    assert cache is not None and cache.parent == tmp_path
    one = CaptureVerdict(True, "equal", {"precision": "fp16"}, 8)
    two = CaptureVerdict(False, "step 3: differs", {"precision": "bf16"}, 8)
    write_verdict(cache, one)
    write_verdict(cache, two)
    found = read_verdict(cache, {"precision": "bf16"})
    assert found is not None and found.cached and not found.passed
    assert read_verdict(cache, {"precision": "bf16", "device": "x"}) is None
    assert len(json.loads(cache.read_text())["verdicts"]) == 2


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[StandInGraphs]]:
    """Make every trainer that would capture on a CUDA device capture on this CPU through
    StandInGraphs (cuda_graph=off stays eager); returns the stand-ins made."""

    def install(wrong_at: int | None = None, raise_at: int | None = None) -> list[StandInGraphs]:
        made: list[StandInGraphs] = []
        real = trainer_module.resolve_execution

        def resolve(requested: str, device: torch.device, *args: Any, **kw: Any) -> Any:
            if requested == "off":
                return real(requested, device, *args, **kw)
            return ResolvedExecution(requested, "cuda_graph", "stand-in capture on a CPU")

        def graphs(device: torch.device, generators: Any = (), **kw: Any) -> StandInGraphs:
            made.append(StandInGraphs(wrong_at, raise_at))
            return made[-1]

        monkeypatch.setattr(trainer_module, "resolve_execution", resolve)
        monkeypatch.setattr(trainer_module, "StepGraphs", graphs)
        real_init = trainer_module.Trainer.__init__

        def init(self: Trainer, model: torch.nn.Module, *args: Any, **kw: Any) -> None:
            real_init(self, model, *args, **kw)
            if isinstance(self.graphs, StandInGraphs):
                self.graphs._model = model

        monkeypatch.setattr(trainer_module.Trainer, "__init__", init)
        return made

    return install


def _eager(steps: int) -> FitOptions:
    return FitOptions(precision="fp32", device="cpu", steps=steps, cuda_graph="off")


def _options(tmp_path: Path, steps: int = 10) -> FitOptions:
    cache = tmp_path / "precision_calibration.json"
    return FitOptions(
        # explicit: no calibration runs
        precision=PrecisionRequest("fp32", mode="measure", cache=cache),
        device="cpu",
        steps=steps,
        cuda_graph="auto",
    )


def test_an_explicit_precision_with_cuda_graph_auto_is_verified(
    tmp_path: Path, stand_in: Callable[..., list[StandInGraphs]]
) -> None:
    """fp32 named explicitly, cuda_graph=auto, no calibration: the captured step is still
    verified before the run, the verdict cached, and the run trains captured."""
    made = stand_in()
    result = fit(RegressionTask(), _options(tmp_path))
    assert result.calibration is None and result.execution.used == "cuda_graph"
    cache = verification_cache(tmp_path / "precision_calibration.json")
    assert cache is not None
    verdicts = json.loads(cache.read_text())["verdicts"]
    (verdict,) = verdicts.values()
    assert verdict["passed"] and verdict["key"]["precision"] == "fp32"
    assert len(made) == 2  # the run's trainer and the captured copy (the eager one has none)
    assert made[0].calls == 10 and made[1].calls == VERIFY_STEPS


def test_a_run_whose_captured_step_differs_goes_eager_with_the_reason(
    tmp_path: Path, stand_in: Callable[..., list[StandInGraphs]]
) -> None:
    """A stand-in one bit wrong at step 5: the run trains eagerly, says why, labels it
    verification_mismatch, and a second run trusts the cached verdict without verifying."""
    stand_in(wrong_at=5)
    task = RegressionTask()
    result = fit(task, _options(tmp_path))
    assert result.execution.used == "eager"
    assert result.execution.fallback == "verification_mismatch"
    assert "step 5: parameters differ" in result.execution.reason
    made = stand_in(wrong_at=5)
    again = fit(RegressionTask(), _options(tmp_path))
    assert again.execution.fallback == "verification_mismatch"
    assert "cached" in again.execution.reason
    assert len(made) == 1  # the run's own trainer: no copies, nothing verified again
    eager = fit(RegressionTask(), _eager(10))
    assert eager.eval == result.eval  # it trained as an eager run does, from the start


def test_a_capture_that_raises_falls_back_from_the_same_step_boundary(
    tmp_path: Path, stand_in: Callable[..., list[StandInGraphs]]
) -> None:
    """A capture raising at the run's step 4: the run finishes all its steps eagerly from
    the state before that step, reports eager with capture_failed, and ends bit for bit
    where a run eager from the start ends."""
    made = stand_in(raise_at=4)
    # The verification's captured copy would raise too (the same stand-in): this test
    # is of the run's own capture, so the verification only records what it was given.
    options = _options(tmp_path, steps=12)
    monkey_verdicts: list[Any] = []

    def trusted(task: Any, trainer: Trainer, seed: int, calibration: Any) -> None:
        monkey_verdicts.append(trainer.execution.used)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(importlib.import_module(FIT_MODULE), "verify_run", trusted)
        task = RegressionTask()
        result = fit(task, options)
    assert monkey_verdicts == ["cuda_graph"]
    assert result.steps_run == 12 and result.execution.used == "eager"
    assert result.execution.fallback == "capture_failed"
    assert "the capture at step 4 raised" in result.execution.reason
    assert made[0].calls == 4  # three warm-ups and the capture that raised; then eager
    eager = fit(RegressionTask(), _eager(12))
    assert (result.summary.train_loss, result.eval) == (eager.summary.train_loss, eager.eval)
    assert result.summary.samples == eager.summary.samples == 12 * 16


def test_verification_leaves_the_run_untouched(
    tmp_path: Path, stand_in: Callable[..., list[StandInGraphs]]
) -> None:
    """A verified run ends where an eager run ends, bit for bit: the copies and the
    restored random state leave no trace (the stand-in computes what eager computes)."""
    stand_in()
    result = fit(RegressionTask(), _options(tmp_path))
    eager = fit(RegressionTask(), _eager(10))
    assert result.execution.used == "cuda_graph"
    assert result.eval == eager.eval and result.summary.train_loss == eager.summary.train_loss


def test_a_failed_capture_in_verification_fails_the_verdict(
    tmp_path: Path, stand_in: Callable[..., list[StandInGraphs]]
) -> None:
    """The verification's captured copy raising is a failed verdict with the error."""
    stand_in(raise_at=4)
    result = fit(RegressionTask(), _options(tmp_path))
    assert result.execution.fallback == "verification_mismatch"
    assert "the captured copy did not run captured" in result.execution.reason
    assert "the capture at step 4 raised" in result.execution.reason


def test_a_capture_that_raised_in_verification_is_not_cached(
    tmp_path: Path, stand_in: Callable[..., list[StandInGraphs]]
) -> None:
    """A verification whose captured copy raised is no verdict to keep: the cache stays
    without it, and the next run verifies again (and, with a capture that works, passes)."""
    stand_in(raise_at=4)
    first = fit(RegressionTask(), _options(tmp_path))
    assert first.execution.fallback == "verification_mismatch"
    cache = verification_cache(tmp_path / "precision_calibration.json")
    assert cache is not None
    assert not cache.exists() or json.loads(cache.read_text())["verdicts"] == {}
    made = stand_in()
    again = fit(RegressionTask(), _options(tmp_path))
    assert again.execution.used == "cuda_graph" and "cached" not in again.execution.reason
    assert len(made) == 2  # verified again: the run's trainer and the captured copy
    (verdict,) = json.loads(cache.read_text())["verdicts"].values()
    assert verdict["passed"]


def test_a_real_difference_is_cached_as_a_failed_verdict(
    tmp_path: Path, stand_in: Callable[..., list[StandInGraphs]]
) -> None:
    """A captured copy that ran and differed is a measured verdict: it is kept."""
    stand_in(wrong_at=5)
    fit(RegressionTask(), _options(tmp_path))
    cache = verification_cache(tmp_path / "precision_calibration.json")
    assert cache is not None
    (verdict,) = json.loads(cache.read_text())["verdicts"].values()
    assert not verdict["passed"] and "step 5" in verdict["detail"]


def test_verify_run_ignores_an_eager_trainer(tmp_path: Path) -> None:
    """An eager run has nothing to verify: no verdict, no cache file."""
    task = RegressionTask()
    calibration = tmp_path / "precision_calibration.json"
    assert verify_capture.verify_run(task, _trainer(task), 0, calibration) is None
    assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------- on a GPU

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class CudaTask(RegressionTask):
    """RegressionTask with a capturable fused AdamW, evaluated where the model is, and an
    eval loss with its standard error (``loss_se``)."""

    def build_optimizers(self, model: torch.nn.Module) -> Sequence[torch.optim.Optimizer]:
        return [torch.optim.AdamW(model.parameters(), lr=self.lr, fused=True, capturable=True)]

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Any, int]]:
        # No (epoch, index) ints in the batch: each would be its own graph signature.
        for (_, _, x, y), size in super().train_batches(epoch, seed):
            yield (0, 0, x, y), size

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        device = next(model.parameters()).device
        with torch.no_grad():
            errors = (model(self.x_eval.to(device)).float() - self.y_eval.to(device)) ** 2
        n = errors.numel()
        return {"loss": errors.mean().item(), "loss_se": (errors.std() / n**0.5).item()}


def _cuda_options(tmp_path: Path, precision: str, **more: Any) -> FitOptions:
    return FitOptions(
        precision=PrecisionRequest(
            precision, mode="measure", cache=tmp_path / "precision_calibration.json"
        ),
        device="cuda",
        steps=20,
        cuda_graph="auto",
        **more,
    )


def _cached_verdict(tmp_path: Path) -> dict[str, Any]:
    cache = verification_cache(tmp_path / "precision_calibration.json")
    assert cache is not None
    (verdict,) = json.loads(cache.read_text())["verdicts"].values()
    return dict(verdict)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_verify_run_on_cuda_passes_bit_for_bit(
    precision: str, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """On this GPU the real captured step equals eager bit for bit over the verification's
    8 steps (fp16: an overflow among them), so the run trains captured."""
    result = fit(CudaTask(), _cuda_options(tmp_path, precision))
    verdict = _cached_verdict(tmp_path)
    record_property("verdict", verdict["detail"])
    assert verdict["passed"], verdict["detail"]
    assert result.execution.used == "cuda_graph" and result.execution.fallback is None


@pytest.mark.gpu
@needs_cuda
def test_compiled_step_within_the_stated_tolerance(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """compile=on, bf16: the compiled captured step's losses against eager uncompiled ones,
    within COMPILED_LOSS_RTOL['bf16']; the largest difference measured is recorded."""
    result = fit(CudaTask(), _cuda_options(tmp_path, "bf16", compile="on"))
    verdict = _cached_verdict(tmp_path)
    record_property("verdict", verdict["detail"])
    assert verdict["passed"], verdict["detail"]
    assert result.execution.used == "cuda_graph_compiled"


@pytest.mark.gpu
@needs_cuda
def test_a_real_capture_that_raises_falls_back_on_cuda() -> None:
    """A loss that reads the device on the host (.item(): fine eagerly, not capturable):
    the capture raises, the trainer goes eager from the state before that step, and ends
    bit for bit where an eager trainer ends."""
    task = CudaTask()

    def syncing(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        loss = task.loss(model, batch)
        if loss.item() < 0:  # a host read: cannot be captured
            raise AssertionError("a mean squared error is never negative")
        return loss

    batches = [
        tuple(t.cuda() if isinstance(t, torch.Tensor) else t for t in batch)
        for batch in _batches(task)
    ]
    ends = []
    for cuda_graph in ("on", "off"):
        torch.manual_seed(0)
        model = task.build_model().cuda()
        policy = PrecisionPolicy.create("fp32", "cuda", announce=False)
        config = TrainerConfig(cuda_graph=cuda_graph)
        trainer = Trainer(model, task.build_optimizers(model), policy, config)
        for step in range(12):
            trainer.step([batches[step % len(batches)]], syncing, 16)
        ends.append(trainer)
    captured, eager = ends
    assert captured.execution.used == "eager" and captured.execution.fallback == "capture_failed"
    assert captured.step_count == 12 and captured.summary().samples == 12 * 16
    for name, tensor in eager.model.state_dict().items():
        assert torch.equal(captured.model.state_dict()[name], tensor), name
