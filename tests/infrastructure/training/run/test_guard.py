"""The precision guard: each trigger demotes and rolls back exactly; the ladder; the memory."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from guard_faults import (
    BASE,
    CASES,
    CHECK,
    DEFAULT_SCALER,
    DEMOTED_AT,
    FAULT_STEP,
    ROLLBACK_TO,
    STEPS,
    FaultTask,
    guarded_run,
)

from genesis_fp16_infrastructure.contract.reports import TrainResult, min_useful_steps
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.training import (
    CheckpointManager,
    FitOptions,
    GuardConfig,
    ScalerConfig,
    fit,
)
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.precision.decide import DeviceCapabilities, next_precision
from genesis_fp16_infrastructure.training.precision.precision_memory import (
    PrecisionMemory,
    remember_demotions,
)
from genesis_fp16_infrastructure.training.reports import Demotion


def _model_of(folder: Path) -> dict[str, torch.Tensor]:
    found = CheckpointManager(folder).load_latest()
    assert found is not None
    return dict(found[0][keys.MODEL])


def _reference(
    task: FaultTask,
    folder: Path,
    rollback: int,
    precision: str,
    scaler: ScalerConfig = DEFAULT_SCALER,
) -> None:
    """A clean run: fp16 up to the rollback step, then ``precision`` from that checkpoint."""
    first = FitOptions(precision="fp16", steps=rollback, checkpoint_dir=folder, scaler=scaler)
    fit(task, first)
    rest = FitOptions(
        precision=precision, steps=STEPS - rollback, checkpoint_dir=folder, scaler=scaler
    )
    fit(task, rest)


def test_a_demotion_removes_the_checkpoints_after_its_rollback_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint every step: the demotion at DEMOTED_AT removes those of the steps
    after ROLLBACK_TO (the troubled trajectory), saying so, and keeps the earlier ones."""
    fault, guard, scaler = CASES["divergence"]
    options = FitOptions(
        precision="fp16",
        steps=DEMOTED_AT,
        checkpoint_dir=tmp_path,
        checkpoint_steps=1,
        keep=100,
        guard=guard,
        scaler=scaler,
    )
    with caplog.at_level("WARNING", logger="genesis_fp16_infrastructure.training.run.fit"):
        result = fit(FaultTask(fault), options)
    assert [(d.step, d.rollback_step) for d in result.demotions] == [(DEMOTED_AT, ROLLBACK_TO)]
    removed = [
        r.getMessage() for r in caplog.records if "after the rollback step" in r.getMessage()
    ]
    stale = range(ROLLBACK_TO + 1, DEMOTED_AT)
    assert [m.split()[3] for m in removed] == [
        str(CheckpointManager(tmp_path).path_for(s)) for s in stale
    ]


def _assert_same_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("reason", sorted(CASES))
def test_fault_demotes_to_bf16_and_equals_a_clean_run_from_the_rollback_point(
    reason: str, tmp_path: Path
) -> None:
    """Each fault ends the run in bf16, recorded, with the params of a clean run from rollback."""
    fault, guard, scaler = CASES[reason]
    result = guarded_run(FaultTask(fault), tmp_path / "guarded", guard, scaler=scaler)

    assert result.precision.used == "bf16"
    assert result.precision.requested == "fp16"
    assert "precision guard demoted fp16 -> bf16" in result.precision.reason
    assert result.summary.step == STEPS and result.steps_run == STEPS
    assert [
        {k: d.to_json()[k] for k in ("from", "to", "reason", "step", "rollback_step")}
        for d in result.demotions
    ] == [
        {
            "from": "fp16",
            "to": "bf16",
            "reason": reason,
            "step": DEMOTED_AT,
            "rollback_step": ROLLBACK_TO,
        }
    ]
    assert torch.isfinite(torch.tensor(result.eval["loss"]))

    _reference(FaultTask(fault), tmp_path / "reference", ROLLBACK_TO, "bf16", scaler=scaler)
    _assert_same_params(_model_of(tmp_path / "guarded"), _model_of(tmp_path / "reference"))


def test_a_fault_in_bf16_too_demotes_twice_to_fp32(tmp_path: Path) -> None:
    """NaN losses in fp16 and bf16 walk the whole ladder, each step rolled back."""
    task = FaultTask("nan", fault_in=(torch.float16, torch.bfloat16))
    result = guarded_run(task, tmp_path / "guarded", BASE)
    assert result.precision.used == "fp32"
    assert [(d.from_, d.to, d.reason, d.rollback_step) for d in result.demotions] == [
        ("fp16", "bf16", "nonfinite_loss", 15),
        ("bf16", "fp32", "nonfinite_loss", 15),
    ]
    _reference(FaultTask(None), tmp_path / "reference", 15, "fp32")
    _assert_same_params(_model_of(tmp_path / "guarded"), _model_of(tmp_path / "reference"))


def test_a_clean_guarded_run_equals_an_unguarded_one(tmp_path: Path) -> None:
    """Without faults the guard changes nothing: no demotion and bit-identical parameters."""
    result = guarded_run(FaultTask(None), tmp_path / "guarded", BASE)
    assert result.demotions == () and result.precision.used == "fp16"
    fit(
        FaultTask(None),
        FitOptions(precision="fp16", steps=STEPS, checkpoint_dir=tmp_path / "plain"),
    )
    _assert_same_params(_model_of(tmp_path / "guarded"), _model_of(tmp_path / "plain"))


def test_nan_losses_do_not_poison_the_divergence_average(tmp_path: Path) -> None:
    """A brief NaN burst (other triggers off) neither feeds the EMA nor fakes a divergence."""
    guard = GuardConfig(
        check_interval=CHECK, nonfinite_limit=None, overflow_rate_limit=None, divergence_warmup=1
    )
    result = guarded_run(FaultTask("nan", until=FAULT_STEP + 2), tmp_path / "run", guard)
    assert result.demotions == ()
    assert result.precision.used == "fp16"
    assert result.summary.nonfinite_losses == 2


def test_a_trigger_in_the_last_rung_is_reported_not_demoted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """fp32 is the end of the default ladder: the run is not guarded and says so."""
    task = FaultTask("nan", fault_in=(torch.float16, torch.bfloat16, torch.float32))
    with caplog.at_level("INFO", logger="genesis_fp16_infrastructure.training.run.guard"):
        result = fit(task, FitOptions(precision="fp32", steps=10, guard=BASE))
    assert result.demotions == () and result.precision.used == "fp32"
    assert "fp32 has no next precision; a persistent non-finite run fails" in caplog.text
    assert result.failure is None  # the fault starts at step 17: these 10 steps learned


ALL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _request(precision: str, folder: Path) -> TrainRequest:
    return TrainRequest(
        agent="t",
        precision=precision,
        precision_reason="test",
        state_dir=folder,
        checkpoint_dir=folder,
    )


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize(
    ("fault", "reason"), [("nan_grad", "nonfinite_gradients"), ("nan", "nonfinite_loss")]
)
def test_a_run_whose_every_step_is_skipped_fails_in_every_precision(
    tmp_path: Path, precision: str, fault: str, reason: str
) -> None:
    """Every step skipped (NaN gradients of a finite loss, or a NaN loss), from any rung:
    the guard walks the ladder, fails at fp32 instead of running on, writes no end
    checkpoint, and the run's result is `failed` with its reason and its own counts."""
    task = FaultTask(fault, fault_step=0, fault_in=ALL_DTYPES)
    options = FitOptions(precision=precision, steps=STEPS, checkpoint_dir=tmp_path, guard=BASE)
    result = fit(task, options)
    assert result.precision.used == "fp32"
    assert result.failure is not None
    assert result.steps_run < STEPS  # ended at the first check that fired at fp32
    assert result.skipped_run == result.steps_run
    assert result.checkpoint is None  # no end-of-run save: periodic ones stay incomplete
    request = _request(precision, tmp_path)
    out = TrainResult.from_fit(request, result).to_json()
    assert (out["outcome"], out["failure"]) == ("failed", reason)
    assert out["skipped_steps"] == out["steps"] == result.steps_run


def test_an_unguarded_run_with_every_step_skipped_is_failed_by_the_bound(
    tmp_path: Path,
) -> None:
    """Without a guard the run runs on, but 0 useful steps of 30 is still `failed`, and its
    skipped_steps are its own, not the resumed chain's running total."""
    task = FaultTask("nan_grad", fault_step=10, fault_in=ALL_DTYPES)
    fit(task, FitOptions(precision="bf16", steps=10, checkpoint_dir=tmp_path))
    result = fit(task, FitOptions(precision="bf16", steps=30, checkpoint_dir=tmp_path, resume=True))
    request = _request("bf16", tmp_path)
    out = TrainResult.from_fit(request, result).to_json()
    assert (out["steps"], out["skipped_steps"], out["chain_skipped_steps"]) == (30, 30, 30)
    assert (out["outcome"], out["failure"]) == ("failed", "nonfinite_gradients")
    assert min_useful_steps(30) == 7 and min_useful_steps(10) == 1 and min_useful_steps(0) == 0


def test_ladder_skips_bf16_without_native_support() -> None:
    """fp16 demotes to fp32 where bf16 would be emulated, unless told otherwise."""
    without = DeviceCapabilities("cpu", native_bf16=False, native_fp16=False, source="test")
    native = DeviceCapabilities("cpu", native_bf16=True, native_fp16=False, source="test")
    assert next_precision("fp16", GuardConfig(), without) == "fp32"
    assert next_precision("fp16", GuardConfig(), native) == "bf16"
    assert next_precision("fp16", GuardConfig(bf16_needs_native=False), without) == "bf16"
    assert next_precision("bf16", GuardConfig(), native) == "fp32"
    assert next_precision("fp32", GuardConfig(), native) is None
    assert next_precision("fp16", GuardConfig(ladder=("fp16", "fp32")), native) == "fp32"
    assert next_precision("bf16", GuardConfig(ladder=("fp16", "fp32")), native) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ladder": ("fp16", "fp8")}, "ladder=['fp16', 'fp8']"),
        ({"ladder": ("fp16", "fp16")}, "distinct precisions"),
        ({"check_interval": 0}, "check_interval=0"),
        ({"overflow_rate_limit": 1.5}, "overflow_rate_limit=1.5"),
        ({"divergence_factor": 0.5}, "divergence_factor=0.5"),
    ],
)
def test_bad_guard_settings_are_refused_by_name(kwargs: dict[str, object], message: str) -> None:
    """An invalid GuardConfig fails at construction with the setting and value named."""
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        GuardConfig(**kwargs)  # type: ignore[arg-type]


def test_precision_memory_floor_clean_runs_and_broken_files(tmp_path: Path) -> None:
    """The memory is a floor on robustness, counts clean runs, and refuses a broken file."""
    demotion = Demotion("fp16", "bf16", "divergence", 9, 5)
    memory = remember_demotions(None, [demotion])
    assert memory is not None
    assert (memory.demoted_from, memory.demoted_to, memory.clean_runs) == ("fp16", "bf16", 0)
    again = remember_demotions(memory, [])
    assert again is not None and again.clean_runs == 1
    assert remember_demotions(None, []) is None
    second = remember_demotions(again, [dataclasses.replace(demotion, from_="bf16", to="fp32")])
    assert isinstance(second, PrecisionMemory)
    assert (second.demoted_from, second.demoted_to, second.clean_runs) == ("fp16", "fp32", 0)
    assert len(second.history) == 2

    folder = AgentFolder(tmp_path, "agent")
    path = folder.precision_state_path
    folder.save_precision_memory(second)
    assert json.loads(path.read_text())["demoted_to"] == "fp32"
    assert folder.precision_memory() == second
    assert [p.name for p in path.parent.iterdir()] == ["precision_state.json"]
    folder.save_precision_memory(None)
    assert folder.precision_memory() is None
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"precision_state\.json: not JSON"):
        folder.precision_memory()


def test_a_memory_file_written_before_the_record_codec_reads_and_rewrites_the_same(
    tmp_path: Path,
) -> None:
    """A precision state file saved by main at ca8d3f00 (its own to_json) reads back and
    is saved again byte for byte; another version is refused naming the file."""
    saved = Path(__file__).with_name("precision_state_ca8d3f00.json")
    folder = AgentFolder(tmp_path, "agent")
    folder.precision_state_path.parent.mkdir(parents=True)
    folder.precision_state_path.write_bytes(saved.read_bytes())
    memory = folder.precision_memory()
    assert memory is not None and memory.demoted_to == "fp32" and len(memory.history) == 2
    folder.save_precision_memory(memory)
    assert folder.precision_state_path.read_bytes() == saved.read_bytes()
    folder.precision_state_path.write_text(
        json.dumps({**json.loads(saved.read_text()), "version": 2})
    )
    with pytest.raises(
        ValueError, match=r"precision_state\.json' is unreadable: .*version 2, expected 1$"
    ):
        folder.precision_memory()
