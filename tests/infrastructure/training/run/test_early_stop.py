"""Stop on validation: the best weights are kept and served, patience stops the run, the
record survives a resume bit for bit, and new data starts a new record."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from test_fit import RegressionTask
from torch import nn

from genesis_fp16_infrastructure.training import FitOptions, fit
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
from genesis_fp16_infrastructure.training.run.early_stop import (
    EarlyStopping,
    EarlyStopTracker,
    served_weights,
)


class DriftingTask(RegressionTask):
    """Trains on y and validates on -y: the validation loss falls at first (the output
    moves from its random start towards 0) and then rises for good, so early stopping
    has a real, not scripted, best point to find."""

    def validate(self, model: nn.Module) -> dict[str, float]:
        return {"loss": F.mse_loss(model(self.x_eval).float(), -self.y_eval).item()}


def _options(tmp_path: Path | None, **kw: object) -> FitOptions:
    base: dict[str, object] = {
        # fp32: the test evaluates in fp32 (auto is bf16 on a CPU with AVX512-BF16).
        "precision": "fp32",
        "epochs": 200,
        "early_stop": EarlyStopping(every_steps=2, patience=3),
        "checkpoint_dir": tmp_path,
        "resume": tmp_path is not None,
    }
    return FitOptions(**{**base, **kw})  # type: ignore[arg-type]


def _params(model_state: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    return [v for _, v in sorted(model_state.items())]


def test_patience_stops_the_run_at_the_best_validation_and_serves_its_weights(
    tmp_path: Path,
) -> None:
    """The best step is the history's minimum, the run stops `patience` validations after
    it, the final eval measures the best weights and the checkpoint keeps both sets."""
    task = DriftingTask(width=32, lr=5e-2)
    result = fit(task, _options(tmp_path))
    record = result.early_stop
    assert record is not None and record.stop_reason.startswith("no improvement in 3")
    history = record.history
    best_step, best = min(history, key=lambda h: h[1])
    assert (record.best_step, record.best) == (best_step, best)
    assert history[-1][0] == best_step + 3 * 2 == result.summary.step  # 3 more, every 2 steps
    assert all(step % 2 == 0 for step, _ in history)
    state, _ = CheckpointManager(tmp_path).load_latest() or pytest.fail("no checkpoint")
    best_weights = served_weights(state)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(_params(best_weights), _params(state[keys.MODEL]), strict=True)
    )
    model = task.build_model()
    model.load_state_dict(best_weights)
    assert result.eval["loss"] == pytest.approx(task.evaluate(model)["loss"], rel=1e-6)
    assert state[keys.EARLY_STOP]["stop_reason"] == record.stop_reason


def test_a_run_resumed_across_validations_stops_where_the_whole_run_does(tmp_path: Path) -> None:
    """Cut at step 5 (between validations, mid-patience) and resumed: the same history,
    best step and best and last weights, bit for bit, as one uninterrupted run."""
    whole = fit(DriftingTask(width=32, lr=5e-2), _options(tmp_path / "whole"))
    first = fit(DriftingTask(width=32, lr=5e-2), _options(tmp_path / "cut", steps=5))
    assert first.early_stop is not None and first.early_stop.stop_reason == "budget spent"
    resumed = fit(DriftingTask(width=32, lr=5e-2), _options(tmp_path / "cut"))
    assert resumed.early_stop == whole.early_stop
    assert resumed.summary.step == whole.summary.step
    a, _ = CheckpointManager(tmp_path / "whole").load_latest() or pytest.fail("none")
    b, _ = CheckpointManager(tmp_path / "cut").load_latest() or pytest.fail("none")
    for name in (keys.MODEL,):
        assert all(
            torch.equal(x, y) for x, y in zip(_params(a[name]), _params(b[name]), strict=True)
        )
    best_a, best_b = a[keys.EARLY_STOP]["best_weights"], b[keys.EARLY_STOP]["best_weights"]
    assert all(torch.equal(x, y) for x, y in zip(_params(best_a), _params(best_b), strict=True))
    # Stopped on the same key: another run takes no step and reports the same stop.
    again = fit(DriftingTask(width=32, lr=5e-2), _options(tmp_path / "cut"))
    assert again.steps_run == 0 and again.early_stop is not None
    assert again.early_stop.stop_reason == whole.early_stop.stop_reason


def test_another_key_starts_a_new_record(tmp_path: Path) -> None:
    """New data (another key): the old best is not comparable, so a new window opens."""
    fit(DriftingTask(width=32, lr=5e-2), _options(tmp_path))
    other = EarlyStopping(every_steps=2, patience=3, key="new data")
    result = fit(DriftingTask(width=32, lr=5e-2), _options(tmp_path, early_stop=other))
    assert result.steps_run > 0 and result.early_stop is not None
    first_step = result.summary.step - result.steps_run
    assert all(step > first_step for step, _ in result.early_stop.history)


def test_budget_caps_the_run_and_a_task_without_validate_is_refused() -> None:
    """steps/epochs still end a run; early stopping needs validate(); bad settings fail."""
    result = fit(DriftingTask(), _options(None, epochs=None, steps=4))
    assert result.early_stop is not None and result.early_stop.stop_reason == "budget spent"
    assert [s for s, _ in result.early_stop.history] == [2, 4]
    with pytest.raises(ValueError, match="needs a validate"):
        fit(RegressionTask(), _options(None, epochs=1))
    for bad, message in (
        ({"mode": "up"}, "mode='up'"),
        ({"patience": 0}, "patience=0"),
        ({"every_steps": 0}, "every_steps=0"),
        ({"min_delta": -1.0}, "min_delta=-1.0"),
    ):
        with pytest.raises(ValueError, match=message):
            EarlyStopping(**bad)  # type: ignore[arg-type]


def test_tracker_modes_deltas_nan_and_rollback() -> None:
    """max mode, min_delta, a NaN never improves, and a rollback forgets a later best."""
    model = nn.Linear(1, 1)
    tracker = EarlyStopTracker(EarlyStopping(metric="auc", mode="max", patience=2, min_delta=0.01))
    assert not tracker.record(10, {"auc": 0.70}, model)
    assert not tracker.record(20, {"auc": 0.705}, model)  # within min_delta: no improvement
    assert tracker.best_step == 10 and tracker.since_best == 1
    assert not tracker.record(30, {"auc": 0.80}, model)
    tracker.forget_after(25)
    assert tracker.best is None and tracker.history == [(10, 0.70), (20, 0.705)]
    assert not tracker.record(30, {"auc": float("nan")}, model)
    assert tracker.best is None
    with pytest.raises(ValueError, match="'auc' is not in validate"):
        tracker.record(40, {"loss": 1.0}, model)


def test_each_validation_is_logged_at_debug_not_info(caplog: pytest.LogCaptureFixture) -> None:
    """A validation's line ("3/3 without improvement", or "5" with no patience) is DEBUG:
    at the default INFO it scrolled over the progress bar every few steps."""
    logger = "genesis_fp16_infrastructure.training.run.early_stop"
    with caplog.at_level("DEBUG", logger=logger):
        fit(DriftingTask(width=32, lr=5e-2), _options(None))
    lines = [r for r in caplog.records if "without improvement" in r.getMessage()]
    assert lines and {r.levelname for r in lines} == {"DEBUG"}
    assert lines[-1].getMessage().endswith("3/3 without improvement)")
    caplog.clear()
    patient = EarlyStopping(every_steps=2, patience=None)
    with caplog.at_level("DEBUG", logger=logger):
        fit(DriftingTask(width=32, lr=5e-2), _options(None, epochs=3, early_stop=patient))
    assert "/None" not in caplog.text and " without improvement)" in caplog.text


@pytest.mark.parametrize(
    ("kw", "saves"),
    [({"checkpoint_seconds": 60.0}, 1), ({"checkpoint_seconds": None}, None)],
    ids=["clock", "no-clock"],
)
def test_a_run_with_a_clock_saves_on_it_and_at_its_end_not_at_each_validation(
    tmp_path: Path, kw: dict[str, float | None], saves: int | None
) -> None:
    """Issue 90 item 5: with checkpoint_seconds (the daemon's and train's 60 s) and no
    checkpoint_steps, a run shorter than its clock saves once, at its end, not at each
    of its validations; without a clock it still saves at each validation."""
    manager_saves: list[int] = []
    original = CheckpointManager.save

    def counted(self: CheckpointManager, state: Mapping[str, Any]) -> Path:
        manager_saves.append(int(state[keys.STEP]))
        return original(self, state)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CheckpointManager, "save", counted)
        result = fit(DriftingTask(width=32, lr=5e-2), _options(tmp_path, **kw))
    validations = len(result.early_stop.history) if result.early_stop else 0
    assert validations > 3
    if saves is not None:
        assert manager_saves == [result.summary.step]
    else:
        assert len(manager_saves) >= validations
