"""``auto`` is decided once per job (issue 66 item 1): a resumed run continues in its
checkpoint's precision, measures nothing, and a killed job ends bit for bit where an
unbroken one does; a change (another precision named) is said at WARNING, with why."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from test_fit import RegressionTask

from genesis_fp16_infrastructure.training import FitOptions, fit
from genesis_fp16_infrastructure.training.precision import decide
from genesis_fp16_infrastructure.training.precision.choice import reuse_refused
from genesis_fp16_infrastructure.training.precision.decide import DeviceCapabilities
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.reports import Measured
from genesis_fp16_infrastructure.training.run import calibration as cal

NATIVE_BF16 = DeviceCapabilities("cpu", True, False, "test: bf16 taken as native")
STEPS = 8


@pytest.fixture
def flipping_load(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """bf16 taken as native, and every measurement read as under load (p90/p10 over 2,
    the rows' p10-p90 overlapping: a choice the noise could flip, so never reused), the
    first choosing bf16 and every later one fp32: a job that measured again at a resume
    would switch. Yields the precisions each measurement chose."""
    monkeypatch.setattr(decide, "detect_capabilities", lambda device: NATIVE_BF16)
    chosen: list[str] = []

    def rows(bench: Any, names: Any, captured_too: bool, skipped: Any) -> list[Measured]:
        fast, slow = ("bf16", "fp32") if not chosen else ("fp32", "bf16")
        chosen.append(fast)
        made = [
            Measured(fast, "eager", 1.0, 1.0, 3.5, 8, 1.0, 3.2, samples=8),
            Measured(slow, "eager", 3.0, 2.0, 6.0, 8, 2.0, 6.0, samples=8),
        ]
        assert reuse_refused(made) is not None
        return sorted(made, key=lambda r: r.precision != "fp32")

    monkeypatch.setattr(cal, "_time_rows", rows)
    yield chosen


def _weights(path: Path | None) -> dict[str, torch.Tensor]:
    assert path is not None
    return dict(torch.load(path, weights_only=True)["model"])


def test_a_killed_auto_job_resumed_under_load_ends_bitwise_where_an_unbroken_run_ends(
    flipping_load: list[str], tmp_path: Path
) -> None:
    """Killed at step 3 and 6 and resumed with auto each time, every measurement under
    load: one measurement (bf16), no switch, and the job's last weights and eval equal,
    bit for bit, those of one unbroken bf16 run."""
    auto = PrecisionRequest(mode="measure", cache=tmp_path / "cal.json")
    folder = tmp_path / "job"
    results = []
    for kill_at in (3, 3, None):  # killed at step 3, then at step 6
        task = RegressionTask()
        stop = (lambda t=task, k=kill_at: len(t.seen) >= k) if kill_at else (lambda: False)
        options = FitOptions(steps=STEPS, precision=auto, checkpoint_dir=folder, should_stop=stop)
        results.append(fit(task, options))
    assert flipping_load == ["bf16"]  # measured once, at the job's start
    assert [r.precision.used for r in results] == ["bf16"] * 3
    assert [r.calibration is not None for r in results] == [True, False, False]
    assert "decided once per job: its checkpoint ran in bf16" in results[1].precision.reason
    assert results[1].precision.requested == "auto"
    end = results[-1]
    assert end.summary.step == STEPS and not end.stopped_early

    unbroken = fit(
        RegressionTask(),
        FitOptions(steps=STEPS, precision="bf16", checkpoint_dir=tmp_path / "unbroken"),
    )
    mine, theirs = _weights(end.checkpoint), _weights(unbroken.checkpoint)
    assert mine.keys() == theirs.keys()
    for name, tensor in mine.items():
        assert torch.equal(tensor, theirs[name]), name
    assert end.eval == unbroken.eval  # the same model, evaluated


def test_a_resume_that_names_another_precision_changes_it_and_says_so_at_warning(
    flipping_load: list[str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An auto job (bf16) resumed with fp32 named: the run changes precision, and the
    resume says so at WARNING with the new precision's reason."""
    auto = PrecisionRequest(mode="measure", cache=tmp_path / "cal.json")
    task = RegressionTask()
    options = FitOptions(
        steps=STEPS, precision=auto, checkpoint_dir=tmp_path, should_stop=lambda: len(task.seen) > 1
    )
    assert fit(task, options).precision.used == "bf16"
    with caplog.at_level(logging.WARNING):
        again = fit(
            RegressionTask(), FitOptions(steps=STEPS, precision="fp32", checkpoint_dir=tmp_path)
        )
    assert again.precision.used == "fp32"
    said = [r for r in caplog.records if "this run trains in fp32" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "ran in bf16" in said[0].getMessage() and "requested explicitly" in said[0].getMessage()


def test_a_resume_whose_precision_is_now_excluded_is_decided_afresh(
    flipping_load: list[str], tmp_path: Path
) -> None:
    """A job's precision excluded since (a red probe): not continued; decided again."""
    auto = PrecisionRequest(mode="measure", cache=tmp_path / "cal.json")
    task = RegressionTask()
    stop = lambda: len(task.seen) > 1  # noqa: E731
    fit(task, FitOptions(steps=STEPS, precision=auto, checkpoint_dir=tmp_path, should_stop=stop))
    red = PrecisionRequest(mode="measure", excluded={"bf16": "probe red"})
    again = fit(RegressionTask(), FitOptions(steps=STEPS, precision=red, checkpoint_dir=tmp_path))
    assert again.precision.used == "fp32" and "decided once per job" not in again.precision.reason


def test_a_run_after_a_finished_job_is_a_new_job_and_decides_again(
    flipping_load: list[str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A finished auto run's checkpoint continued by the next run (steps on top): a new
    job, so auto is decided again (here fp32), and the change is said at WARNING."""
    auto = PrecisionRequest(mode="measure", cache=tmp_path / "cal.json")
    first = fit(RegressionTask(), FitOptions(steps=2, precision=auto, checkpoint_dir=tmp_path))
    assert first.precision.used == "bf16" and not first.stopped_early
    with caplog.at_level(logging.WARNING):
        again = fit(RegressionTask(), FitOptions(steps=2, precision=auto, checkpoint_dir=tmp_path))
    assert flipping_load == ["bf16", "fp32"] and again.precision.used == "fp32"
    assert again.summary.step == 4
    assert any("ran in bf16; this run trains in fp32" in r.getMessage() for r in caplog.records)


def test_a_run_of_no_steps_evaluates_in_its_checkpoints_precision_measuring_nothing(
    flipping_load: list[str], tmp_path: Path
) -> None:
    """steps=0 on a finished job's checkpoint (se_darwin's eval of the served model):
    nothing is measured, the checkpoint's precision runs."""
    auto = PrecisionRequest(mode="measure", cache=tmp_path / "cal.json")
    fit(RegressionTask(), FitOptions(steps=2, precision=auto, checkpoint_dir=tmp_path))
    again = fit(RegressionTask(), FitOptions(steps=0, precision=auto, checkpoint_dir=tmp_path))
    assert flipping_load == ["bf16"] and again.calibration is None
    assert again.precision.used == "bf16" and again.steps_run == 0
