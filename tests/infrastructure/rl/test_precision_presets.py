"""How decide()'s answer to the request and options["preset"] pick the preset that runs."""

from __future__ import annotations

import pytest

from genesis_fp16_infrastructure.rl.precision_presets import (
    DEFAULT_PRESET,
    PRESETS,
    PresetError,
    preset_request,
    resolve_preset,
)
from genesis_fp16_infrastructure.training.precision import decide as decide_module
from genesis_fp16_infrastructure.training.precision.decide import DeviceCapabilities, decide
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest

SEED_MATRIX = {  # the seed's table: policy, ref, reward, value, kl
    "bf16_pure": ("bf16", "bf16", "bf16", "bf16", "bf16"),
    "bf16_fp32_kl": ("bf16", "bf16", "bf16", "bf16", "fp32"),
    "bf16_fp32_value": ("bf16", "bf16", "bf16", "fp32", "bf16"),
    "bf16_fp32_reward": ("bf16", "bf16", "fp32", "bf16", "bf16"),
    "bf16_fp32_ref": ("bf16", "fp32", "bf16", "bf16", "bf16"),
    "mixed_recommended": ("bf16", "bf16", "bf16", "fp32", "fp32"),
    "fp32_baseline": ("fp32",) * 5,
    "fp16_all": ("fp16",) * 5,
}


def test_presets_match_the_matrix_and_keep_fp32_master_weights() -> None:
    """Every preset's components are as in the issue's table; master weights are fp32."""
    assert set(PRESETS) == set(SEED_MATRIX)
    for name, dtypes in SEED_MATRIX.items():
        p = PRESETS[name]
        assert (p.policy, p.reference, p.reward, p.value, p.kl) == dtypes
        assert p.master_weights == "fp32"
        assert p.loss_scaling == (name == "fp16_all")


@pytest.mark.parametrize("preset", [None, "bf16_pure", "fp16_all", "mixed_recommended"])
def test_fp32_request_forces_the_baseline(preset: str | None) -> None:
    """The rollback (precision fp32) wins over any preset and over a rollout override."""
    choice = resolve_preset("fp32", preset, rollout="bf16")
    assert choice.preset == PRESETS["fp32_baseline"]
    assert ("overridden" in choice.reason) == (preset is not None)


def test_bf16_runs_the_named_preset_or_the_default() -> None:
    """bf16 runs options["preset"], else mixed_recommended; fp16 selects fp16_all."""
    assert resolve_preset("bf16", None).preset.name == DEFAULT_PRESET == "mixed_recommended"
    assert resolve_preset("bf16", "bf16_fp32_ref").preset.name == "bf16_fp32_ref"
    assert resolve_preset("fp16", None).preset.name == "fp16_all"
    assert resolve_preset("bf16", "bf16_pure", rollout="fp32").preset.rollout == "fp32"


@pytest.mark.parametrize(
    ("native_bf16", "preset", "expected"),
    [(True, DEFAULT_PRESET, "bf16"), (False, "fp32_baseline", "fp32")],
)
def test_auto_without_a_preset_follows_the_decision(
    monkeypatch: pytest.MonkeyPatch, native_bf16: bool, preset: str, expected: str
) -> None:
    """auto is decide()'s (here the device rule: bf16 where native, else fp32), and the
    preset follows the decision, its reason first; the request's mode is kept (a measured
    auto is fit()'s to time)."""
    caps = DeviceCapabilities("cpu", native_bf16, False, "test")
    monkeypatch.setattr(decide_module, "detect_capabilities", lambda device: caps)
    assert preset_request(PrecisionRequest("auto", mode="measure"), None).mode == "measure"
    request = preset_request(PrecisionRequest("auto"), None)
    decision = decide(request, "cpu")
    choice = resolve_preset(decision, None)
    assert (decision.used, choice.preset.name) == (expected, preset)
    assert choice.reason.startswith(f"auto -> {expected}: ")


def test_a_named_preset_under_auto_names_the_precision_and_the_floor_still_wins() -> None:
    """auto with preset fp16_all asks decide() for fp16 on the preset's behalf; a remembered
    bf16 floor raises it, and the preset follows to bf16 (fp16_all overridden)."""
    asked = preset_request(PrecisionRequest("auto"), "fp16_all")
    assert (asked.requested, asked.basis) == ("fp16", "preset fp16_all trains the policy in fp16")
    floored = preset_request(
        PrecisionRequest("auto", floor="bf16", floor_reason="memory"), "fp16_all"
    )
    decision = decide(floored, "cpu")
    assert (decision.used, decision.reason) == ("bf16", "memory")
    choice = resolve_preset(decision, "fp16_all")
    assert choice.preset.name == DEFAULT_PRESET and "overridden" in choice.reason


def test_an_excluded_precision_is_not_the_preset_under_auto(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A red probe's exclusion reaches the preset's decision: auto on a native-bf16 CPU with
    bf16 excluded runs fp32_baseline."""
    caps = DeviceCapabilities("cpu", True, False, "test")
    monkeypatch.setattr(decide_module, "detect_capabilities", lambda device: caps)
    request = preset_request(PrecisionRequest("auto", excluded={"bf16": "probe red"}), None)
    assert resolve_preset(decide(request, "cpu"), None).preset.name == "fp32_baseline"


def test_bf16_request_overrides_fp16_all() -> None:
    """bf16 (e.g. the guard's memory after an fp16 demotion) beats preset fp16_all."""
    choice = resolve_preset("bf16", "fp16_all")
    assert choice.preset.name == DEFAULT_PRESET and "overridden" in choice.reason


@pytest.mark.parametrize(
    ("precision", "preset", "message"),
    [
        ("fp16", "bf16_pure", "conflicts with precision 'fp16'"),
        ("bf16", "fp32_baseline", "conflicts with precision 'bf16'"),
        ("bf16", "bf8", "'bf8' is not one of"),
        ("int8", None, "'int8' is not one of"),
    ],
)
def test_bad_combinations_fail_with_one_clear_line(
    precision: str, preset: str | None, message: str
) -> None:
    """Conflicts and unknown names raise PresetError (a ValueError) naming the value and
    the choices, and naming no agent (the plugin adds its own name)."""
    with pytest.raises(PresetError, match=message) as info:
        resolve_preset(precision, preset)
    assert isinstance(info.value, ValueError) and "rlhf_ppo" not in str(info.value)
