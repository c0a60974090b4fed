"""``auto`` by measurement: candidates, the margin rule, real timings, the cache, no trace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_fit import RegressionTask

from infrastructure.training import FitOptions, TrainerConfig, fit
from infrastructure.training import calibration as cal
from infrastructure.training import precision as precision_module
from infrastructure.training.calibration import AutoPrecision, Measured, auto_candidates, choose
from infrastructure.training.precision import DeviceCapabilities

NATIVE_BF16 = DeviceCapabilities("cpu", True, False, "test: bf16 taken as native")


@pytest.fixture
def bf16_native(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make bf16 a candidate on any CPU (its arithmetic is real either way; only the
    'is it native?' answer is forced, so the test does not depend on AVX512-BF16)."""
    monkeypatch.setattr(cal, "detect_capabilities", lambda device: NATIVE_BF16)
    monkeypatch.setattr(precision_module, "detect_capabilities", lambda device: NATIVE_BF16)
    yield


def _row(name: str, ms: float) -> Measured:
    return Measured(name, "eager", ms, ms, ms, 3)


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
    name, reason = choose([_row(n, ms) for n, ms in times.items()])
    assert name == chosen
    assert reason.startswith(f"auto -> {chosen}: measured")


@pytest.mark.parametrize("width", [16, 1024])
def test_auto_chooses_by_real_measurement_and_trains_as_that_precision_named(
    bf16_native: None, width: int, tmp_path: Path
) -> None:
    """Tiny and wide models: the choice follows the timings, and the run is bit for bit
    the run with the chosen precision named explicitly (the calibration leaves no trace)."""
    task = RegressionTask(batches=4, batch_size=64, width=width)
    auto = AutoPrecision(mode="measure", cache=tmp_path / "cal.json", budget_s=1.0)
    measured = fit(task, FitOptions(steps=6, auto_precision=auto, resume=False))
    calibration = measured.calibration
    assert calibration is not None and not calibration.cached
    assert [r.precision for r in calibration.rows] == ["fp32", "bf16"]
    assert all(
        r.steps >= cal.MIN_TIMED and r.min_ms <= r.median_ms <= r.max_ms for r in calibration.rows
    )
    assert calibration.chosen == choose(calibration.rows)[0]
    fp32 = calibration.rows[0].median_ms
    chosen_row = next(r for r in calibration.rows if r.precision == calibration.chosen)
    assert chosen_row.median_ms <= fp32 * (1 + cal.MARGIN)  # never slower than fp32
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
    bf16_native: None, tmp_path: Path
) -> None:
    """Same model and batches: no timing at all; another width: measured again."""
    cache = tmp_path / "cal.json"
    config = TrainerConfig()
    first = cal.calibrate(RegressionTask(), "cpu", 0, config, cache=cache, budget_s=0.2)
    assert first is not None and cache.exists()

    def no_clock() -> float:
        raise AssertionError("a cached calibration must not time anything")

    again = cal.calibrate(RegressionTask(), "cpu", 0, config, cache=cache, clock=no_clock)
    assert again is not None and again.cached and again.chosen == first.chosen
    assert again.rows == first.rows

    wider = cal.calibrate(RegressionTask(width=32), "cpu", 0, config, cache=cache, budget_s=0.2)
    assert wider is not None and not wider.cached
    assert json.loads(cache.read_text())["key"]["model"] == wider.key["model"] != first.key["model"]
    assert cal.forget(cache) and not cal.forget(cache)


def test_a_corrupt_cache_is_measured_again(bf16_native: None, tmp_path: Path) -> None:
    """A cache that is not JSON (or another version) is logged and replaced, not trusted."""
    cache = tmp_path / "cal.json"
    cache.write_text("{not json")
    found = cal.calibrate(RegressionTask(), "cpu", 0, TrainerConfig(), cache=cache, budget_s=0.2)
    assert found is not None and not found.cached
    assert json.loads(cache.read_text())["version"] == cal.CACHE_VERSION


def test_one_candidate_times_nothing_and_an_excluded_rule_pick_falls_to_fp32(
    bf16_native: None,
) -> None:
    """bf16 excluded (say, a red probe): only fp32 is left, nothing is timed, fp32 runs."""
    auto = AutoPrecision(mode="measure", excluded={"bf16": "probe red"})
    result = fit(RegressionTask(), FitOptions(steps=2, auto_precision=auto, resume=False))
    assert result.calibration is None
    assert result.precision.used == "fp32"
    assert "bf16 excluded (probe red)" in result.precision.reason


def test_rule_mode_is_the_device_rule(bf16_native: None) -> None:
    """mode='rule' (the library default) never times: auto is bf16 on a native-bf16 CPU."""
    result = fit(RegressionTask(), FitOptions(steps=2, resume=False))
    assert result.calibration is None and result.precision.used == "bf16"


def test_bad_auto_precision_settings_are_refused() -> None:
    """A misspelt mode or a non-positive budget is one clear error."""
    with pytest.raises(ValueError, match=r"'measured'.*measure, rule"):
        AutoPrecision(mode="measured")
    with pytest.raises(ValueError, match="budget_s=0"):
        AutoPrecision(budget_s=0)


def test_the_table_names_every_candidate_and_the_choice() -> None:
    """precision show prints each row with its ratio to fp32 and marks the chosen one."""
    rows = (_row("fp32", 2.0), _row("bf16", 1.0))
    calibration = cal.Calibration("bf16", "r", rows, {"fp16": "no native fp16"}, {}, 0.1)
    table = calibration.table()
    assert "2.00x  <- chosen" in table and "fp16      not timed: no native fp16" in table


def test_a_train_request_carries_its_exclusions_to_fit(tmp_path: Path) -> None:
    """The daemon's red-probe exclusions reach FitOptions.auto_precision unchanged."""
    from infrastructure.plugin_api import TrainRequest

    request = TrainRequest(
        agent="a",
        precision="auto",
        precision_reason="default",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "ckpt",
        auto_precision="measure",
        calibration_path=tmp_path / "cal.json",
        auto_excluded={"fp16": "probe red: headroom"},
        steps=1,
    )
    auto = request.fit_options().auto_precision
    assert auto == AutoPrecision("measure", {"fp16": "probe red: headroom"}, tmp_path / "cal.json")
