"""The loss scale carried between an agent's fp16 runs: what is carried, what forgets it,
the clamp, and a second run (real fp16 on the CPU, tiny) that starts where the first ended."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run"))  # the tasks of run/'s tests
from test_fit import RegressionTask

from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.training import FitOptions, ScalerConfig, TrainingSummary, fit
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import (
    CarriedScale,
    carry_after_run,
    clamp_scale,
)


def test_only_an_undemoted_fp16_run_with_a_finite_scale_is_carried() -> None:
    """A demotion, another precision or a non-finite scale forget the scale."""
    carried = carry_after_run("fp16", "fp16", 2048.0, demoted=False)
    assert carried is not None and carried.scale == 2048.0
    assert carry_after_run("fp16", "fp16", 2048.0, demoted=True) is None
    assert carry_after_run("fp16", "bf16", 1.0, demoted=False) is None
    assert carry_after_run("auto", "fp16", float("nan"), demoted=False) is None
    assert carried.for_request("fp16") == 2048.0 and carried.for_request("auto") is None


def test_the_scale_is_clamped_to_the_floor_and_ceiling() -> None:
    """A carried scale outside the next run's floor and ceiling starts at the bound."""
    config = ScalerConfig(min_scale=4.0, max_scale=1024.0, init_scale=512.0)
    assert [clamp_scale(s, config) for s in (1.0, 64.0, 2.0**20)] == [4.0, 64.0, 1024.0]


def test_the_file_round_trips_and_a_broken_one_is_a_fresh_start(tmp_path: Path) -> None:
    """save/read keep the value; None deletes; garbage reads as nothing carried."""
    folder = AgentFolder(tmp_path, "agent")
    path = folder.loss_scale_path
    folder.save_carried_scale(CarriedScale("fp16", 256.0, "now"))
    assert folder.carried_scale() == CarriedScale("fp16", 256.0, "now")
    folder.save_carried_scale(None)
    assert not path.exists() and folder.carried_scale() is None
    path.write_text("{not json")
    assert folder.carried_scale() is None


def _run(scale: float | None, first: list[TrainingSummary]) -> tuple[int, float]:
    task = RegressionTask(batches=2, batch_size=4, width=4)
    options = FitOptions(
        precision="fp16",
        device="cpu",
        steps=12,
        log_interval=1,
        scaler=ScalerConfig(init_scale=2.0**24),  # far too high: the first steps overflow
        initial_loss_scale=scale,
        on_log=lambda s: first.append(s) if not first else None,
    )
    summary = fit(task, options).summary
    return summary.skipped_steps, summary.loss_scale


def test_a_second_fp16_run_starts_from_the_carried_scale() -> None:
    """Run 1 skips steps finding its scale; run 2, started at run 1's last scale, skips
    none and its first step runs at that scale (real fp16 arithmetic, a 4-wide model)."""
    first_one: list[TrainingSummary] = []
    skipped_one, scale_one = _run(None, first_one)
    assert skipped_one >= 1 and scale_one < 2.0**24
    first_two: list[TrainingSummary] = []
    skipped_two, _ = _run(scale_one, first_two)
    assert skipped_two == 0
    assert first_two[0].loss_scale == scale_one


def test_a_carried_scale_above_the_ceiling_starts_at_the_ceiling() -> None:
    """initial_loss_scale beyond max_scale is clamped, not refused."""
    first: list[TrainingSummary] = []
    task = RegressionTask(batches=1, batch_size=4, width=4)
    fit(
        task,
        FitOptions(
            precision="fp16",
            device="cpu",
            steps=1,
            log_interval=1,
            scaler=ScalerConfig(init_scale=1.0, max_scale=8.0),
            initial_loss_scale=2.0**30,
            on_log=first.append,
        ),
    )
    assert first[0].loss_scale in (8.0, 4.0)  # 8, or 4 after an overflow at 8


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_carried_scale_skips_at_most_one_step_in_the_first_50(tmp_path: Path) -> None:
    """fp16 on the GPU: run 1 from a scale too high skips steps; run 2 from run 1's last
    scale skips at most 1 of its first 50, and its eval loss equals run 1's within their
    standard error (the issue's criterion)."""
    from test_verify_capture import CudaTask

    def run(scale: float | None) -> tuple[int, dict[str, float], float]:
        options = FitOptions(
            precision="fp16",
            device="cuda",
            steps=50,
            scaler=ScalerConfig(init_scale=2.0**24),
            initial_loss_scale=scale,
        )
        result = fit(CudaTask(), options)
        return result.summary.skipped_steps, dict(result.eval), result.summary.loss_scale

    skipped_one, eval_one, scale_one = run(None)
    skipped_two, eval_two, _ = run(scale_one)
    assert skipped_one >= 1 and skipped_two <= 1
    se = (eval_one["loss_se"] ** 2 + eval_two["loss_se"] ** 2) ** 0.5
    assert abs(eval_one["loss"] - eval_two["loss"]) <= se


def test_a_carried_scale_written_before_the_record_codec_reads_and_rewrites_the_same(
    tmp_path: Path,
) -> None:
    """A loss_scale.json saved by main at ca8d3f00 (its own to_json) reads back and is
    saved again byte for byte; another version is a fresh start, a non-positive scale an
    unusable file (set aside)."""
    saved = Path(__file__).with_name("loss_scale_ca8d3f00.json")
    folder = AgentFolder(tmp_path, "agent")
    folder.loss_scale_path.parent.mkdir(parents=True)
    folder.loss_scale_path.write_bytes(saved.read_bytes())
    carried = folder.carried_scale()
    assert carried is not None and (carried.requested, carried.scale) == ("auto", 2048.0)
    folder.save_carried_scale(carried)
    assert folder.loss_scale_path.read_bytes() == saved.read_bytes()
    folder.loss_scale_path.write_text(saved.read_text().replace('"version": 1', '"version": 2'))
    assert folder.carried_scale() is None and folder.loss_scale_path.exists()
    folder.loss_scale_path.write_text(saved.read_text().replace("2048.0", "-1.0"))
    assert folder.carried_scale() is None and not folder.loss_scale_path.exists()
