"""GENESIS_FP16_GUARD_*: generated from GuardConfig's fields, read back as a typed GuardConfig."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

import pytest

from genesis_fp16.config.guard_settings import config_from, settings_model
from genesis_fp16.config.settings import SettingsError, load_settings, setting_variables
from genesis_fp16_infrastructure.config_bounds import Bounds
from genesis_fp16_infrastructure.training.precision.guard_config import GuardConfig

pytestmark = pytest.mark.usefixtures("clean_env")  # conftest.py


def _other_value(item: dataclasses.Field[Any], default: Any) -> tuple[str, Any]:
    """A valid value other than the default: as the variable's text, and as the field's."""
    if isinstance(default, bool):
        return str(not default).lower(), not default
    if isinstance(default, tuple):
        return "fp16,fp32", ("fp16", "fp32")
    if isinstance(default, int):
        return str(default + 1), default + 1
    limits = GuardConfig.bounds().get(item.name)
    upper = limits.lt if limits is not None else None
    value = (default + upper) / 2 if upper is not None else default * 2
    return repr(value), value


@pytest.mark.parametrize("item", dataclasses.fields(GuardConfig), ids=lambda f: f.name)
def test_every_guard_config_field_is_a_setting_that_reaches_the_run(
    item: dataclasses.Field[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each GuardConfig field has its GENESIS_FP16_GUARD_<FIELD>, and the value set there is
    the field's value in settings.guard (a field added to GuardConfig is one more case)."""
    variable = f"GENESIS_FP16_GUARD_{item.name.upper()}"
    assert variable in setting_variables()
    text, expected = _other_value(item, getattr(GuardConfig(), item.name))
    monkeypatch.setenv(variable, text)
    guard = load_settings().guard
    assert guard is not None
    assert getattr(guard, item.name) == expected
    assert dataclasses.replace(guard, **{item.name: getattr(GuardConfig(), item.name)}) == (
        GuardConfig()
    )


_GUARD = "invalid precision-guard setting: "
_OFF = "(or 0 to turn the trigger off)"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CHECK_INTERVAL", "0", f"{_GUARD}check_interval=0 must be >= 1"),
        ("NONFINITE_LIMIT", "-1", f"{_GUARD}nonfinite_limit=-1 must be >= 1 {_OFF}"),
        ("OVERFLOW_RATE_LIMIT", "1", f"{_GUARD}overflow_rate_limit=1.0 must be > 0 and < 1 {_OFF}"),
        ("DIVERGENCE_FACTOR", "0.5", f"{_GUARD}divergence_factor=0.5 must be > 1 {_OFF}"),
        (
            "LADDER",
            "fp16,fp16",
            "guard ladder=['fp16', 'fp16']: needs distinct precisions from fp32, bf16, fp16, "
            "e.g. fp16,bf16,fp32",
        ),
        (
            "ON_UNSTABLE",
            "abc",
            "Input should be a valid boolean, unable to interpret input (got 'abc')",
        ),
    ],
)
def test_a_bad_guard_setting_is_one_line_naming_the_variable(
    variable: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GuardConfig's own message (one check, the library's), after the variable's name."""
    monkeypatch.setenv(f"GENESIS_FP16_GUARD_{variable}", value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == f"GENESIS_FP16_GUARD_{variable}: {message}"


def test_the_guard_is_read_as_a_typed_config_or_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """settings.guard is GuardConfig's defaults untouched, None with the guard off, and an
    optional trigger's 0 is None there."""
    assert load_settings().guard == GuardConfig()
    monkeypatch.setenv("GENESIS_FP16_GUARD_DIVERGENCE_FACTOR", "0")
    guard = load_settings().guard
    assert guard is not None and guard.divergence_factor is None
    monkeypatch.setenv("GENESIS_FP16_GUARD_ENABLED", "false")
    assert load_settings().guard is None


@dataclass(frozen=True)
class _LargerGuard(GuardConfig):
    """GuardConfig with one more trigger, as a future change would add it."""

    spike_limit: int | None = field(default=2, metadata={"bounds": Bounds(ge=2)})


def test_a_field_added_to_guard_config_becomes_a_setting_with_its_default_and_range() -> None:
    """The settings are generated: a new field gets its setting, default, 0 for off, and
    its range, with nothing written for it in the daemon."""
    model = settings_model(_LargerGuard)
    assert model.model_fields["guard_spike_limit"].default == 2
    assert config_from(model(), _LargerGuard) == _LargerGuard()
    assert config_from(model(guard_spike_limit=0), _LargerGuard).spike_limit is None
    assert config_from(model(guard_spike_limit=5), _LargerGuard).spike_limit == 5
    with pytest.raises(
        ValueError, match=r"spike_limit=1 must be >= 2 \(or 0 to turn the trigger off\)"
    ):
        model(guard_spike_limit=1)


def test_a_field_without_a_setting_form_fails_at_import_naming_it() -> None:
    """A field type the environment cannot spell is refused when the model is generated,
    not ignored."""

    @dataclass(frozen=True)
    class Odd(GuardConfig):
        weights: dict[str, float] = field(default_factory=dict)

    assert "weights" in typing.get_type_hints(Odd)
    with pytest.raises(TypeError, match=r"GuardConfig.weights: dict\[str, float\] has no setting"):
        settings_model(Odd)
