"""The flight recorder's fault bundles: real fp16 runs on the CPU through ``fit()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from guard_faults import BASE, STEPS, CudaFaultTask, FaultTask, graph_steps, the_runs_steps

from genesis_fp16_infrastructure.errors import BundleError
from genesis_fp16_infrastructure.training import (
    FitOptions,
    FitResult,
    GuardConfig,
    ScalerConfig,
    StepTuning,
    fit,
)
from genesis_fp16_infrastructure.training.flight import bundle_files
from genesis_fp16_infrastructure.training.flight.bundle import load_bundle, save_bundle
from genesis_fp16_infrastructure.training.flight.bundle_files import (
    BundleLimits,
    FlightConfig,
    list_bundles,
)
from genesis_fp16_infrastructure.training.flight.recorded_step import plain_batch, rebuilt_batch
from genesis_fp16_infrastructure.training.flight.replay import ReplayTarget, replay, reproduces

# No overflow-rate trigger: a lone overflow (or the start-up calibration) does not demote.
QUIET = GuardConfig(check_interval=5, overflow_rate_limit=None, bf16_needs_native=False)


DEFAULT = ScalerConfig()


def _run(
    task: FaultTask, folder: Path, guard: GuardConfig, scaler: ScalerConfig = DEFAULT
) -> FitResult:
    options = FitOptions(
        precision="fp16",
        steps=STEPS,
        log_interval=10,
        guard=guard,
        scaler=scaler,
        flight=FlightConfig(folder=folder, context={"agent": "toy"}),
    )
    return fit(task, options)


def test_a_lone_overflow_is_bundled_at_its_own_step(tmp_path: Path) -> None:
    """One overflowing step (batch 17, the run's step 18) with no demotion writes one
    first_nonfinite bundle for exactly that step, holding its batch and the state before it."""
    result = _run(FaultTask("overflow", until=18), tmp_path, QUIET)
    assert not result.demotions
    assert [(b.reason, b.step) for b in result.fault_bundles] == [("first_nonfinite", 18)]
    bundle = load_bundle(Path(result.fault_bundles[0].path))
    assert bundle["recorded"]["skipped"] is True and bundle["recorded"]["loss_finite"] == [True]
    assert bundle["state"]["step"] == 17  # the state before the step
    assert rebuilt_batch(bundle["batches"][0])[0] == 17  # the batch's own index
    assert bundle["precision"] == "fp16" and bundle["context"] == {"agent": "toy"}


def test_the_re_run_groups_the_batches_as_the_run_did(tmp_path: Path) -> None:
    """Two micro-batches a step: the faulting batches 34 and 35 are the run's step 18, and
    its bundle holds both (the re-run groups by the live trainer's grad_accum_steps)."""
    options = FitOptions(
        precision="fp16",
        steps=STEPS,
        log_interval=10,
        guard=QUIET,
        trainer=StepTuning(grad_accum_steps=2),
        flight=FlightConfig(folder=tmp_path),
    )
    result = fit(FaultTask("overflow", fault_step=34, until=36), options)
    assert [(b.reason, b.step) for b in result.fault_bundles] == [("first_nonfinite", 18)]
    bundle = load_bundle(Path(result.fault_bundles[0].path))
    assert [rebuilt_batch(b)[0] for b in bundle["batches"]] == [34, 35]


def test_start_up_calibration_skips_write_no_bundle(tmp_path: Path) -> None:
    """A scale that starts far too high overflows the first steps (expected calibration):
    no bundle; a real overflow later in the same run still is one."""
    high = ScalerConfig(init_scale=2.0**24)
    clean = _run(FaultTask(None), tmp_path / "clean", QUIET, high)
    assert clean.summary.skipped_steps > 0  # the calibration did skip steps
    assert clean.fault_bundles == ()
    faulty = _run(FaultTask("overflow", until=18), tmp_path / "faulty", QUIET, high)
    assert [(b.reason, b.step) for b in faulty.fault_bundles] == [("first_nonfinite", 18)]


def test_recording_changes_nothing_in_the_run(tmp_path: Path) -> None:
    """A run that demotes ends with the same weights, skips and demotions with recording
    on as off (the re-run happens in a scratch trainer, and every generator is put back)."""
    on = _run(FaultTask("nan"), tmp_path / "on", BASE)
    options = FitOptions(precision="fp16", steps=STEPS, log_interval=10, guard=BASE)
    off = fit(FaultTask("nan"), options)
    assert [b.reason for b in on.fault_bundles] == ["demotion"]
    assert on.demotions == off.demotions
    assert on.summary.skipped_steps == off.summary.skipped_steps
    assert on.summary.train_loss == off.summary.train_loss
    assert on.eval == off.eval


def test_bundle_folder_keeps_its_bounds(tmp_path: Path) -> None:
    """Saving past the bounds removes the oldest first, by count and by bytes."""
    limits = BundleLimits(max_count=3, max_bytes=10**9)
    for step in range(6):
        save_bundle(tmp_path, _tiny_bundle(step), limits)
    assert [r["step"] for r in list_bundles(tmp_path)] == ["3", "4", "5"]
    one = list_bundles(tmp_path)[0]["bytes"]
    save_bundle(tmp_path, _tiny_bundle(6), BundleLimits(max_count=10, max_bytes=2 * one))
    assert [r["step"] for r in list_bundles(tmp_path)] == ["5", "6"]


def test_bundles_list_in_the_order_saved_whatever_the_clock_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saves in one nanosecond, and a save after the clock stepped back, list and trim in
    the order they were saved: a new bundle never sorts before an older one."""
    monkeypatch.setattr(bundle_files.time, "time_ns", lambda: 1_795_000_000_123_456_789)
    for step in (9, 10, 11):
        save_bundle(tmp_path, _tiny_bundle(step), BundleLimits())
    assert [r["step"] for r in list_bundles(tmp_path)] == ["9", "10", "11"]
    # A name of digits that are no time, sorting last: passed over, not a crash.
    (tmp_path / "20261399T999999-000000000-step0-x.fault.pt").write_bytes(b"")
    monkeypatch.setattr(bundle_files.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    save_bundle(tmp_path, _tiny_bundle(12), BundleLimits(max_count=3))
    rows = list_bundles(tmp_path)
    assert [r["step"] for r in rows] == ["11", "12", "0"]
    assert rows[1]["name"].startswith("20261118T110640-123456792-")  # 1 ns after 11


def test_a_damaged_bundle_is_refused_in_one_line(tmp_path: Path) -> None:
    """A truncated bundle, a foreign pickle and a folder are each refused with one line."""
    path = save_bundle(tmp_path, _tiny_bundle(1), BundleLimits())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    foreign = tmp_path / "foreign.fault.pt"
    torch.save({"x": Path("/")}, foreign)  # a class weights_only refuses
    for bad in (path, foreign, tmp_path):
        with pytest.raises(BundleError) as caught:
            load_bundle(bad)
        assert "\n" not in str(caught.value) and str(bad) in str(caught.value)
    with pytest.raises(BundleError, match="byte bound"):
        load_bundle(foreign, max_bytes=10)


def test_batches_round_trip_through_plain_data() -> None:
    """A batch of named tuples, dicts and tensors comes back equal and of the same types."""
    batch = {"a": torch.arange(3), "t": (torch.ones(2, dtype=torch.float16), 4)}
    back = rebuilt_batch(plain_batch(batch))
    assert torch.equal(back["a"], batch["a"]) and back["t"][1] == 4
    assert back["t"][0].dtype == torch.float16


def _tiny_bundle(step: int) -> dict[str, object]:
    return {
        "reason": "first_nonfinite",
        "step": step,
        "precision": "fp16",
        "execution": "eager",
        "device": "cpu",
        "torch": str(torch.__version__),
        "config": {},
        "state": {"w": torch.zeros(16)},
        "batches": [],
        "recorded": {},
    }


class _BigInput(FaultTask):
    """Batch 17's inputs scaled by 1e5: fp16's first Linear overflows in the forward."""

    def loss(self, model: torch.nn.Module, batch: tuple[int, torch.Tensor, torch.Tensor]):  # type: ignore[override]
        step, x, y = batch
        return super().loss(model, (step, x * 1e5 if step == 17 else x, y))


def test_replay_reproduces_bit_for_bit_and_names_the_module(tmp_path: Path) -> None:
    """A bundle of an fp16 forward overflow replays on the CPU with the recorded non-finite
    pattern, names module 0's forward output, and shows fp32 and bf16 finite there;
    a lone backward overflow of the loss names the loss's backward, with the loss bits equal."""
    forward = _run(_BigInput(None), tmp_path / "fwd", QUIET)
    bundle = load_bundle(Path(forward.fault_bundles[0].path))
    task = _BigInput(None)
    report = replay(bundle, ReplayTarget.of_task(task))
    assert report["reproduced"] is True
    assert report["first_nonfinite"] == {"module": "0", "phase": "forward", "tensor": "output"}
    assert report["precisions"]["fp32"]["loss_finite"] == [True]
    assert report["precisions"]["bf16"]["loss_finite"] == [True]
    assert report["per_module"]["0"]["nonfinite"] > 0

    def no_bf16(model: torch.nn.Module, batch: tuple[int, torch.Tensor, torch.Tensor]) -> Any:
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16:
            raise RuntimeError("bf16 is not here\nsecond line")
        return task.loss(model, batch)

    report = replay(bundle, ReplayTarget(task.build_model, no_bf16, task.build_optimizers))
    assert report["precisions"]["bf16"] == {"error": "not run: bf16 is not here"}
    assert report["precisions"]["fp32"]["loss_finite"] == [True]

    backward = _run(FaultTask("overflow", until=18), tmp_path / "bwd", QUIET)
    bundle = load_bundle(Path(backward.fault_bundles[0].path))
    report = replay(
        bundle,
        ReplayTarget(FaultTask("overflow").build_model, FaultTask("overflow", until=18).loss),
    )
    assert report["reproduced"] is True and report["recorded"]["loss_finite"] == [True]
    assert report["replayed"]["loss"] == report["recorded"]["loss"]
    assert report["first_nonfinite"] == {"module": "loss", "phase": "backward", "tensor": "grad"}


def test_reproduced_compares_pattern_and_bits() -> None:
    """A changed finite loss's bits, or a different skip, is not a reproduction; the bits of
    a non-finite loss are not compared."""
    recorded = {"loss_bits": [1, 2], "loss_finite": [True, False], "skipped": True}
    assert reproduces(recorded, {**recorded, "loss_bits": [1, 99]})
    assert not reproduces(recorded, {**recorded, "loss_bits": [3, 2]})
    assert not reproduces(recorded, {**recorded, "skipped": False})


def test_a_cuda_bundle_asks_for_a_device_here(tmp_path: Path) -> None:
    """A bundle recorded on CUDA replays on the CPU when told (and says it is another
    setup); without a GPU and without --device it is refused in one line."""
    result = _run(FaultTask("overflow", until=18), tmp_path, QUIET)
    bundle = load_bundle(Path(result.fault_bundles[0].path))
    bundle["device"] = "cuda:0"
    task = FaultTask("overflow", until=18)
    report = replay(bundle, ReplayTarget.of_task(task), device="cpu")
    assert report["same_setup"] is False and report["reproduced"] is True
    if not torch.cuda.is_available():
        with pytest.raises(BundleError, match="no CUDA device here"):
            replay(bundle, ReplayTarget.of_task(task))


def _captured_overflow(
    folder: Path, device: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[FitResult, list[tuple[int, bool]]]:
    """``CudaFaultTask``'s lone overflow at batch 17 (the run's step 18), in fp16, with
    the recorder on; the run and its own trainer's steps (step, ran from a graph)."""
    found = graph_steps(monkeypatch)
    options = FitOptions(
        precision="fp16",
        device=device,
        steps=STEPS,
        log_interval=10,
        guard=QUIET,
        cuda_graph="on" if device == "cuda" else "off",
        flight=FlightConfig(folder=folder),
    )
    result = fit(CudaFaultTask("overflow", until=18, device=device), options)
    return result, the_runs_steps(found)


def _assert_bundle_replays(result: FitResult, device: str) -> None:
    assert [(b.reason, b.step) for b in result.fault_bundles] == [("first_nonfinite", 18)]
    bundle = load_bundle(Path(result.fault_bundles[0].path))
    assert bundle["state"]["step"] == 17  # the state before the step
    task = CudaFaultTask("overflow", until=18, device=device)
    report = replay(bundle, ReplayTarget.of_task(task))
    assert report["reproduced"] is True and report["same_setup"] is True
    assert report["recorded"]["loss_finite"] == [True]
    assert report["first_nonfinite"] == {"module": "loss", "phase": "backward", "tensor": "grad"}


def test_the_capturable_task_faults_by_its_batchs_value_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CudaFaultTask's control flow on the CPU: the fault rides in the batch as a tensor
    (no Python step number), so batch 17 alone overflows; its bundle replays it."""
    result, steps = _captured_overflow(tmp_path, "cpu", monkeypatch)
    assert result.execution.used == "eager" and result.skipped_run == 1
    assert len(steps) == STEPS and not any(graphed for _, graphed in steps)
    _assert_bundle_replays(result, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_captured_task_bundles_its_overflow_and_replay_reproduces_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a capturable task (fused capturable AdamW, data and fault on the device) the
    run really replays, the overflowing step 18 itself runs from the graph, the recorder
    bundles it from its eager scratch trainer, the run stays captured after it, and
    replay reproduces the bundle."""
    result, steps = _captured_overflow(tmp_path, "cuda", monkeypatch)
    assert result.execution.used == "cuda_graph", result.execution
    graphed = [number for number, from_graph in steps if from_graph]
    assert graphed, f"no step ran from a graph: {steps}"
    assert 18 in graphed and STEPS in graphed, steps
    _assert_bundle_replays(result, "cuda")
