"""``auto`` by measurement: candidates, the margin rule, real timings, the cache, no trace."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from test_fit import RegressionTask

from genesis_fp16_infrastructure.errors import ExecutionError
from genesis_fp16_infrastructure.training import FitOptions, TrainerConfig, fit
from genesis_fp16_infrastructure.training.precision import decide
from genesis_fp16_infrastructure.training.precision import kept_measurements as records
from genesis_fp16_infrastructure.training.precision.decide import (
    DeviceCapabilities,
    auto_candidates,
    choose,
)
from genesis_fp16_infrastructure.training.precision.loss_scaler import LossScaler, ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.reports import CACHE_VERSION, Measured
from genesis_fp16_infrastructure.training.run import calibration as cal
from genesis_fp16_infrastructure.training.run.task import task_trainer
from genesis_fp16_infrastructure.training.step.trainer import Trainer

NATIVE_BF16 = DeviceCapabilities("cpu", True, False, "test: bf16 taken as native")


@pytest.fixture
def bf16_native(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make bf16 a candidate on any CPU (its arithmetic is real either way; only the
    'is it native?' answer is forced, so the test does not depend on AVX512-BF16)."""
    monkeypatch.setattr(decide, "detect_capabilities", lambda device: NATIVE_BF16)
    yield


def _row(name: str, ms: float, execution: str = "eager") -> Measured:
    return Measured(name, execution, ms, ms, ms, 3)


def test_candidates_are_the_native_precisions_and_fp32_cannot_be_excluded() -> None:
    """fp32 always; bf16/fp16 only where native; an exclusion names its reason."""
    caps = DeviceCapabilities("cuda", True, True, "GPU")
    assert auto_candidates(caps) == (["fp32", "bf16", "fp16"], {})
    names, skipped = auto_candidates(caps, {"fp16": "probe red", "fp32": "ignored"})
    assert names == ["fp32", "bf16"] and skipped == {"fp16": "probe red"}
    names, skipped = auto_candidates(DeviceCapabilities("cpu", False, False, "plain CPU"))
    assert names == ["fp32"] and set(skipped) == {"bf16", "fp16"}


@pytest.mark.parametrize(
    ("times", "chosen"),
    [
        ({"fp32": 10.0, "bf16": 5.0, "fp16": 4.0}, "fp16"),  # fp16 clearly fastest
        ({"fp32": 10.0, "bf16": 5.0, "fp16": 4.9}, "bf16"),  # within 5%: the more robust
        ({"fp32": 10.0, "bf16": 10.4, "fp16": 12.0}, "fp32"),  # 16-bit slower: fp32
        ({"fp32": 10.0, "bf16": 9.8}, "fp32"),  # a 2% gain is not worth bf16
    ],
)
def test_choose_takes_the_most_robust_within_the_margin_of_the_fastest(
    times: dict[str, float], chosen: str
) -> None:
    """The fastest wins unless a more robust precision is within 5% of it."""
    name, execution, reason = choose([_row(n, ms) for n, ms in times.items()])
    assert (name, execution) == (chosen, "eager")
    assert reason.startswith(f"auto -> {chosen}, eager: measured")


def _pairs(*ms: float) -> dict[tuple[str, str], float]:
    """fp32 eager, fp32 captured, bf16 eager, bf16 captured step times."""
    names = [(p, e) for p in ("fp32", "bf16") for e in ("eager", "cuda_graph")]
    return dict(zip(names, ms, strict=True))


@pytest.mark.parametrize(
    ("times", "chosen"),
    [
        # the H100's world model: launch-bound, so every captured step beats every eager one
        (_pairs(11.3, 1.5, 12.0, 1.6), ("fp32", "cuda_graph")),
        # compute-bound: bf16 wins, captured a little faster than eager
        (_pairs(14.6, 14.5, 5.8, 4.0), ("bf16", "cuda_graph")),
        # the graph is slower here (say, a capture that re-allocates): eager wins
        (_pairs(10.0, 10.8, 6.0, 6.6), ("bf16", "eager")),
    ],
)
def test_choose_picks_a_precision_and_an_execution_never_slower_than_fp32_eager(
    times: dict[tuple[str, str], float], chosen: tuple[str, str]
) -> None:
    """With eager and captured rows, the chosen pair is the robust precision in its faster
    execution, never slower than fp32 eager, and the reason names both timings."""
    rows = [_row(name, ms, execution) for (name, execution), ms in times.items()]
    name, execution, reason = choose(rows)
    assert (name, execution) == chosen
    assert times[chosen] <= times[("fp32", "eager")]
    assert reason.startswith(f"auto -> {name}, {execution}: measured")
    other = "eager" if execution == "cuda_graph" else "cuda_graph"
    assert f"{name} {other} {times[(name, other)]:.3f} ms" in reason


@pytest.mark.parametrize(
    ("expected", "timed", "bound"),
    [
        (None, cal.MAX_TIMED, "the run's length is unknown"),
        (10_000, cal.MAX_TIMED, "at most 1000 steps (10% of the run's 10000)"),
        (300, 13, "at most 30 steps (10% of the run's 300)"),  # 2 rows: 15 steps each
        (60, cal.MIN_TIMED, "the minimum, 6 steps a row, is over 10% of this 60-step run"),
    ],
)
def test_calibration_takes_at_most_a_tenth_of_the_run_it_serves(
    bf16_native: None, tmp_path: Path, expected: int | None, timed: int, bound: str
) -> None:
    """Its steps (warm-up and timed, every row) stay within 10% of the run's expected
    steps, or each row's minimum where that is more; the bound is reported."""
    result = cal.calibrate(
        RegressionTask(),
        "cpu",
        0,
        TrainerConfig(),
        PrecisionRequest(budget_s=60.0),
        expected_steps=expected,
    )
    assert result is not None and bound in result.bound
    assert all(r.steps == timed for r in result.rows)  # 60 s: the step bound is what binds
    if expected is not None and expected >= 300:
        assert sum(r.steps + cal.WARMUP for r in result.rows) <= expected * cal.RUN_SHARE


@pytest.mark.parametrize("width", [16, 1024])
def test_auto_chooses_by_real_measurement_and_trains_as_that_precision_named(
    bf16_native: None, width: int, tmp_path: Path
) -> None:
    """Tiny and wide models: the choice follows the timings, and the run is bit for bit
    the run with the chosen precision named explicitly (the calibration leaves no trace)."""
    task = RegressionTask(batches=4, batch_size=64, width=width)
    auto = PrecisionRequest(mode="measure", cache=tmp_path / "cal.json", budget_s=1.0)
    measured = fit(task, FitOptions(steps=6, precision=auto, resume=False))
    calibration = measured.calibration
    assert calibration is not None and not calibration.cached
    assert [r.precision for r in calibration.rows] == ["fp32", "bf16"]
    assert all(
        r.steps >= cal.MIN_TIMED and r.min_ms <= r.median_ms <= r.max_ms for r in calibration.rows
    )
    assert (calibration.chosen, calibration.execution) == choose(calibration.rows)[:2]
    assert calibration.execution == "eager"  # a CPU has no CUDA graphs
    assert "the minimum, 6 steps a row" in calibration.bound  # 10% of 6 steps is less
    fp32 = calibration.rows[0].median_ms
    chosen_row = next(r for r in calibration.rows if r.precision == calibration.chosen)
    assert chosen_row.median_ms <= fp32 * (1 + decide.MARGIN)  # never slower than fp32
    assert measured.precision.used == calibration.chosen
    assert measured.precision.requested == "auto"
    assert "measured" in measured.precision.reason

    named = fit(
        RegressionTask(batches=4, batch_size=64, width=width),
        FitOptions(steps=6, precision=calibration.chosen, resume=False),
    )
    assert named.summary.train_loss == measured.summary.train_loss
    assert named.eval == measured.eval


def test_the_cache_is_reused_until_what_it_depends_on_changes(
    bf16_native: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same model and batches: only the kept winner is timed again, and reused; another
    width: measured again, and the new record names the field that changed."""
    cache = tmp_path / "cal.json"
    config = TrainerConfig()
    first = cal.calibrate(
        RegressionTask(), "cpu", 0, config, PrecisionRequest(cache=cache, budget_s=0.2)
    )
    assert isinstance(first, cal.Calibration) and cache.exists()
    steady = _keep_with_spread(cache, 1.0)  # a loaded host's timing would not be reused
    timed: list[tuple[str, str]] = []
    real_row = cal._time_row

    def spy(bench: Any, name: str, mode: str) -> Any:
        timed.append((name, mode))
        return real_row(bench, name, mode)

    monkeypatch.setattr(cal, "_time_row", spy)
    # Reuse across runs, not the 10% check (test_calibration_clock.py has that, by a fake
    # clock): a shared 2-core host's noise must not decide this test.
    monkeypatch.setattr(cal, "REVALIDATE", 100.0)
    again = cal.calibrate(RegressionTask(), "cpu", 0, config, PrecisionRequest(cache=cache))
    assert isinstance(again, cal.Calibration) and again.cached and again.chosen == first.chosen
    assert again.rows == steady and again.remeasured == ""
    assert timed == [(first.chosen, "auto")]  # the winner only, on a CPU the run's own mode
    assert again.revalidated.startswith(f"the kept {first.chosen} eager")

    wider = cal.calibrate(
        RegressionTask(width=32), "cpu", 0, config, PrecisionRequest(cache=cache, budget_s=0.2)
    )
    assert wider is not None and not wider.cached
    assert json.loads(cache.read_text())["key"]["model"] == wider.key["model"] != first.key["model"]
    kept = json.loads(cache.read_text())["remeasured"]
    assert kept == f"the kept measurement's key changed: model ({first.key['model']} -> " + (
        f"{wider.key['model']}): measured again"
    )


def _keep_with_spread(cache: Path, spread: float) -> tuple[Measured, ...]:
    """Rewrite the kept measurement's rows to p10 = median, p90 = ``spread`` x the slowest
    median (at least ``spread`` x its own: past 1, each row's interval spans every
    median, a choice the noise could flip): the spread injected through the record, not
    by loading the machine."""
    data = json.loads(cache.read_text())
    slowest = max(row["median_ms"] for row in data["rows"])
    for row in data["rows"]:
        high = slowest if spread > 1 else row["median_ms"]
        row["p10_ms"], row["p90_ms"] = row["median_ms"], high * spread
    cache.write_text(json.dumps(data))
    kept = records.read_calibration(cache)
    assert kept is not None
    return kept.rows


def test_a_measurement_taken_under_load_is_measured_again_and_the_reason_says_so(
    bf16_native: None, tmp_path: Path
) -> None:
    """A kept measurement whose p90/p10 is past LOAD_BOUND, its choice not holding across
    its rows' intervals, is not reused: the next run times every row again, keeps the new
    one, and its reason says why."""
    cache = tmp_path / "cal.json"
    auto = PrecisionRequest(mode="measure", cache=cache, budget_s=0.2)
    first = fit(RegressionTask(), FitOptions(steps=2, precision=auto, resume=False))
    assert first.calibration is not None
    _keep_with_spread(cache, 2.0)
    again = fit(RegressionTask(), FitOptions(steps=2, precision=auto, resume=False))
    measured = again.calibration
    assert measured is not None and not measured.cached
    assert measured.measured_at > first.calibration.measured_at
    said = "the kept measurement was taken under load (fp32 eager p90/p10 "
    assert measured.remeasured.startswith(said), measured.remeasured
    assert "and the choice does not hold across its rows' p10-p90" in measured.remeasured
    assert said in again.precision.reason and said in measured.reason
    assert records.read_calibration(cache) == replace(measured, cached=True)


def test_the_reason_names_every_timed_precision_with_its_median_and_spread(
    bf16_native: None,
) -> None:
    """A real (tiny) measurement: the run's reason names fp32 and bf16, each with its
    median and p10-p90, and each row's p10 <= median <= p90."""
    auto = PrecisionRequest(mode="measure", budget_s=0.2)
    result = fit(RegressionTask(), FitOptions(steps=2, precision=auto, resume=False))
    assert result.calibration is not None
    for row in result.calibration.rows:
        assert row.min_ms <= row.p10_ms <= row.median_ms <= row.p90_ms <= row.max_ms
        assert row.describe() in result.precision.reason
    named = re.findall(r"(fp32|bf16) eager [\d.]+ ms \([\d.]+-[\d.]+\)", result.precision.reason)
    assert named == ["fp32", "bf16"]


def test_a_corrupt_cache_is_measured_again(bf16_native: None, tmp_path: Path) -> None:
    """A cache that is not JSON (or another version) is logged and replaced, not trusted."""
    cache = tmp_path / "cal.json"
    cache.write_text("{not json")
    found = cal.calibrate(
        RegressionTask(), "cpu", 0, TrainerConfig(), PrecisionRequest(cache=cache, budget_s=0.2)
    )
    assert found is not None and not found.cached
    assert json.loads(cache.read_text())["version"] == CACHE_VERSION


def test_one_candidate_times_nothing_and_an_excluded_rule_pick_falls_to_fp32(
    bf16_native: None,
) -> None:
    """bf16 excluded (say, a red probe): only fp32 is left, nothing is timed, fp32 runs."""
    auto = PrecisionRequest(mode="measure", excluded={"bf16": "probe red"})
    result = fit(RegressionTask(), FitOptions(steps=2, precision=auto, resume=False))
    assert result.calibration is None
    assert result.precision.used == "fp32"
    assert "bf16 excluded (probe red)" in result.precision.reason


def test_a_measured_auto_with_a_floor_measures_then_runs_the_floor(
    bf16_native: None, tmp_path: Path
) -> None:
    """The guard's remembered floor in the request: fit() still times the candidates (the
    daemon used to decide by the rule and never measure), then decide() raises the pick."""
    asked = PrecisionRequest(
        mode="measure", floor="fp32", floor_reason="remembered", cache=tmp_path / "cal.json"
    )
    result = fit(RegressionTask(), FitOptions(steps=2, precision=asked, resume=False))
    assert result.calibration is not None
    assert [r.precision for r in result.calibration.rows] == ["fp32", "bf16"]
    assert (result.precision.requested, result.precision.used) == ("auto", "fp32")
    assert result.precision.reason == "remembered"  # an auto at the floor says why too


def test_under_torchrun_a_measured_auto_keeps_the_probes_exclusions(
    bf16_native: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over two ranks nothing is timed, and the rule leaves out the red bf16 (it used to
    be decided from a request without the exclusions)."""
    monkeypatch.setattr(cal.distributed, "rank_and_world", lambda: (0, 2))
    asked = PrecisionRequest(mode="measure", excluded={"bf16": "probe red"})
    policy, calibration = cal.policy_for_run(
        RegressionTask(), asked, "cpu", ScalerConfig(), 0, TrainerConfig()
    )
    assert calibration is None and policy.name == "fp32"
    assert "bf16 excluded (probe red)" in policy.resolved.reason
    assert "not measured under torchrun" in policy.resolved.reason


def test_candidates_that_cannot_run_as_asked_are_not_called_one_candidate(
    bf16_native: None,
) -> None:
    """cuda_graph=on on a CPU: fp32 and bf16 are candidates but none can be captured,
    so nothing is timed; the rule decides and its reason says why nothing was timed (it
    said "one candidate" before), and the trainer then refuses the run in one line."""
    asked = PrecisionRequest(mode="measure")
    config = TrainerConfig(cuda_graph="on")
    found = cal.calibrate(RegressionTask(), "cpu", 0, config, PrecisionRequest(budget_s=0.2))
    assert isinstance(found, str)
    policy, calibration = cal.policy_for_run(
        RegressionTask(), asked, "cpu", ScalerConfig(), 0, config
    )
    assert calibration is None and policy.name == "bf16"
    reason = policy.resolved.reason
    assert "; no candidate could be timed as asked (not timed: " in reason
    assert "bf16 captured (CUDA graphs need a CUDA device" in reason
    assert "one candidate" not in reason
    one = cal.calibrate(
        RegressionTask(),
        "cpu",
        0,
        TrainerConfig(),
        PrecisionRequest(excluded={"bf16": "probe red"}),
    )
    assert one == "one candidate, nothing to time"


def test_rule_mode_is_the_device_rule(bf16_native: None) -> None:
    """mode='rule' (the library default) never times: auto is bf16 on a native-bf16 CPU."""
    result = fit(RegressionTask(), FitOptions(steps=2, resume=False))
    assert result.calibration is None and result.precision.used == "bf16"


def test_bad_auto_precision_settings_are_refused() -> None:
    """A misspelt mode or a non-positive budget is one clear error."""
    with pytest.raises(ValueError, match=r"'measured'.*measure, rule"):
        PrecisionRequest(mode="measured")
    with pytest.raises(ValueError, match="budget_s=0"):
        PrecisionRequest(budget_s=0)


def test_auto_on_cuda_times_eager_and_captured_rows_and_elsewhere_the_runs_own() -> None:
    """On CUDA under cuda_graph=auto both executions are timed; on a CPU, or with the
    execution named, only the run's own (nothing is timed that the run could not use)."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert cal._captured_too(cuda, TrainerConfig(cuda_graph="auto"))
    assert not cal._captured_too(cuda, TrainerConfig(cuda_graph="off"))
    assert not cal._captured_too(cpu, TrainerConfig(cuda_graph="auto"))


@pytest.mark.parametrize("request_", [{"cuda_graph": "on"}, {"compile": "on"}])
def test_a_run_that_cannot_be_captured_as_asked_is_refused_in_one_line_after_calibration(
    bf16_native: None, request_: dict[str, str]
) -> None:
    """cuda_graph=on or compile=on on a CPU with a measured auto: the trainer's one-line
    refusal, not a crash in the calibration (cuda_graph=on left it no row to choose from)."""
    auto = PrecisionRequest(mode="measure")
    options = FitOptions(steps=2, precision=auto, resume=False, **request_)  # type: ignore[arg-type]
    with pytest.raises(ExecutionError, match="cannot be captured: CUDA graphs need a CUDA device"):
        fit(RegressionTask(), options)


def test_the_run_follows_the_measured_execution_with_both_timings() -> None:
    """The chosen precision's rows become the run's measured execution and its reason."""
    rows = (
        _row("fp32", 11.3),
        _row("fp32", 1.5, "cuda_graph"),
        _row("bf16", 12.0),
        _row("bf16", 1.6, "cuda_graph"),
    )
    calibration = cal.Calibration("fp32", "r", rows, {}, {}, 0.1, execution="cuda_graph")
    measured = cal.measured_execution(calibration)
    assert measured.used == "cuda_graph"
    assert measured.reason == "measured fp32 steps: eager 11.300 ms, cuda_graph 1.500 ms"


def test_a_train_request_carries_its_precision_request_to_fit(tmp_path: Path) -> None:
    """The daemon's request (mode, red-probe exclusions, floor, cache) reaches FitOptions whole."""
    from genesis_fp16_infrastructure.contract.train_request import TrainRequest

    asked = PrecisionRequest(
        "auto",
        mode="measure",
        excluded={"fp16": "probe red: headroom"},
        floor="bf16",
        floor_reason="remembered",
        cache=tmp_path / "cal.json",
    )
    request = TrainRequest(
        agent="a",
        precision=asked,
        precision_reason="default",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "ckpt",
        steps=1,
    )
    assert request.fit_options().precision == asked


NATIVE_BOTH = DeviceCapabilities("cpu", True, True, "test: bf16 and fp16 taken as native")
RUN_SCALER = ScalerConfig(init_scale=512.0, growth_interval=3, hysteresis=2)


@pytest.fixture
def fp16_native(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make bf16 and fp16 candidates on any CPU (real fp16 arithmetic either way)."""
    monkeypatch.setattr(decide, "detect_capabilities", lambda device: NATIVE_BOTH)
    yield


def test_the_fp16_rows_step_with_the_runs_scaler_config_not_the_default(
    fp16_native: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fit(auto, measure) times fp16 with FitOptions.scaler: its config and its grown scale."""
    scalers: list[LossScaler] = []

    def recording(*args: Any, **kwargs: Any) -> Trainer:
        trainer = task_trainer(*args, **kwargs)  # each row's trainer
        if trainer.policy.name == "fp16":
            scalers.append(trainer.scaler)
        return trainer

    monkeypatch.setattr(cal, "task_trainer", recording)
    auto = PrecisionRequest(mode="measure", budget_s=0.5)
    options = FitOptions(steps=2, precision=auto, scaler=RUN_SCALER, resume=False)
    result = fit(RegressionTask(), options)
    assert result.calibration is not None
    assert [r.precision for r in result.calibration.rows] == ["fp32", "bf16", "fp16"]
    assert len(scalers) == 1 and scalers[0].config == RUN_SCALER
    # 5+ clean steps from 512 with growth every 3: grown at least once, far from 65536.
    assert 1024.0 <= scalers[0].get_scale() < ScalerConfig().init_scale


def test_another_scaler_config_measures_again(fp16_native: None, tmp_path: Path) -> None:
    """The scaler config is part of the cache key: a run with another one is timed afresh."""
    cache = tmp_path / "cal.json"
    first = cal.calibrate(
        RegressionTask(), "cpu", 0, TrainerConfig(), PrecisionRequest(cache=cache, budget_s=0.2)
    )
    other = cal.calibrate(
        RegressionTask(),
        "cpu",
        0,
        TrainerConfig(),
        PrecisionRequest(cache=cache, budget_s=0.2),
        scaler=RUN_SCALER,
    )
    assert first is not None and other is not None and not other.cached
    assert json.loads(other.key["scaler"])["hysteresis"] == RUN_SCALER.hysteresis


def test_a_resident_process_reuses_a_winner_it_timed_itself_untimed(
    bf16_native: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one process with a memory store (a resident run process), a kept winner this
    process timed is reused untimed; it is timed again when the file was rewritten by
    another writer, past RETIME_AFTER_S, in another process (another pid, a fresh store),
    and without a store (``train``); another model is measured again."""
    from genesis_fp16_infrastructure import kept_in_memory

    cache = tmp_path / "cal.json"
    config = TrainerConfig()
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])
    kept_in_memory.process_memory(2**24)
    first = cal.calibrate(
        RegressionTask(), "cpu", 0, config, PrecisionRequest(cache=cache, budget_s=0.2)
    )
    assert isinstance(first, cal.Calibration)
    timed: list[tuple[str, str]] = []
    real_row = cal._time_row

    def spy(bench: Any, name: str, mode: str) -> Any:
        timed.append((name, mode))
        return real_row(bench, name, mode)

    monkeypatch.setattr(cal, "_time_row", spy)
    monkeypatch.setattr(cal, "REVALIDATE", 100.0)  # reuse, not this host's noise, is tested
    winner = [(first.chosen, "auto")]

    def timed_by_one_run(task: RegressionTask | None = None) -> tuple[list[Any], Any]:
        timed.clear()
        request = PrecisionRequest(cache=cache)
        found = cal.calibrate(task or RegressionTask(), "cpu", 0, config, request)
        assert isinstance(found, cal.Calibration)
        return list(timed), found

    _keep_with_spread(cache, 1.0)  # steady, so reusable; and rewritten by another writer
    assert timed_by_one_run()[0] == winner  # a file this process did not time: timed again
    rows, reused = timed_by_one_run()
    assert rows == [] and reused.cached and reused.chosen == first.chosen
    assert reused.revalidated.startswith(f"the kept {first.chosen} eager ")
    assert "not timed again: this process timed it " in reused.revalidated

    bound = records.RETIME_AFTER_S
    monkeypatch.setattr(records, "RETIME_AFTER_S", 0.0)  # past its bound: timed again
    assert timed_by_one_run()[0] == winner
    monkeypatch.setattr(records, "RETIME_AFTER_S", bound)
    assert timed_by_one_run()[0] == []  # the re-time renewed it

    cache.write_bytes(cache.read_bytes())  # the same bytes, written again by another writer
    assert timed_by_one_run()[0] == winner
    assert timed_by_one_run()[0] == []

    monkeypatch.setattr(records.os, "getpid", lambda: -1)  # a fork's copy of the store
    assert timed_by_one_run()[0] == winner
    monkeypatch.setattr(records.os, "getpid", os.getpid)

    wider, measured = timed_by_one_run(RegressionTask(width=32))  # a validator changed
    assert not measured.cached and len(wider) >= 2

    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])  # another process, or `train`
    assert timed_by_one_run(RegressionTask(width=32))[0] != []
