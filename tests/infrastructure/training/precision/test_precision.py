"""Precision resolution, policies, autocast dtypes and misuse errors."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from genesis_fp16_infrastructure.errors import PrecisionError
from genesis_fp16_infrastructure.training import (
    PRECISIONS,
    REQUESTABLE,
    DeviceCapabilities,
    PrecisionPolicy,
)
from genesis_fp16_infrastructure.training.precision import decide as decide_module
from genesis_fp16_infrastructure.training.precision import precision as precision_module
from genesis_fp16_infrastructure.training.precision.decide import decide
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest


@pytest.fixture(autouse=True)
def _fresh_cpu_detection() -> Iterator[None]:
    decide_module.cpu_capabilities.cache_clear()
    yield
    decide_module.cpu_capabilities.cache_clear()


def _fake(
    monkeypatch: pytest.MonkeyPatch, device_type: str, bf16: bool, fp16: bool
) -> DeviceCapabilities:
    caps = DeviceCapabilities(device_type, bf16, fp16, f"fake {device_type}")
    monkeypatch.setattr(decide_module, "detect_capabilities", lambda device: caps)
    return caps


def test_names() -> None:
    """The precision names are the contract's, in its order."""
    assert PRECISIONS == ("fp32", "bf16", "fp16")
    assert REQUESTABLE == ("fp32", "bf16", "fp16", "auto")


def test_unknown_precision_names_value_and_valid_choices() -> None:
    """An unknown name is a ValueError quoting it and listing every valid name."""
    with pytest.raises(ValueError, match=r"unknown precision 'fp8'.*fp32, bf16, fp16, auto"):
        decide(PrecisionRequest("fp8"), "cpu")
    with pytest.raises(ValueError, match="unknown precision 'FP16'"):
        PrecisionPolicy.create("FP16", "cpu")


@pytest.mark.parametrize("name", PRECISIONS)
def test_explicit_names_run_as_asked_on_cpu(name: str) -> None:
    """fp32, bf16 and fp16 requested on this CPU are what is used, with a reason."""
    resolved = decide(PrecisionRequest(name), "cpu")
    assert (resolved.requested, resolved.used, resolved.device_type) == (name, name, "cpu")
    assert "explicitly" in resolved.reason


def _flags_from_cpuinfo() -> set[str] | None:
    path = Path("/proc/cpuinfo")
    if not path.exists():
        return None
    return {
        f
        for line in path.read_text().splitlines()
        if line.startswith("flags")
        for f in line.split()
    }


def test_auto_on_this_machine_follows_the_detected_capability() -> None:
    """auto on this CPU is bf16 exactly when the CPU reports avx512_bf16 or amx_bf16."""
    flags = _flags_from_cpuinfo()
    if flags is None:
        pytest.skip("no /proc/cpuinfo on this machine")
    native = bool(flags & {"avx512_bf16", "amx_bf16"})
    resolved = decide(PrecisionRequest("auto"), "cpu")
    assert resolved.used == ("bf16" if native else "fp32")
    assert resolved.requested == "auto" and resolved.reason.startswith(f"auto -> {resolved.used}")


def test_cpuinfo_and_torch_probe_agree_on_this_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without /proc/cpuinfo the torch CPUID probe is used and finds the same bf16/fp16."""
    from_cpuinfo = decide_module.cpu_capabilities()
    decide_module.cpu_capabilities.cache_clear()
    monkeypatch.setattr(decide_module, "_cpuinfo_flags", lambda path=None: None)
    from_torch = decide_module.cpu_capabilities()
    assert from_torch.source.startswith("torch CPUID probe")
    if not decide_module._torch_cpu_flags():
        pytest.skip("this torch build has no CPUID probe")
    assert (from_torch.native_bf16, from_torch.native_fp16) == (
        from_cpuinfo.native_bf16,
        from_cpuinfo.native_fp16,
    )


def test_cpuinfo_parsing_reads_flags(tmp_path: Path) -> None:
    """The flags line of a cpuinfo file decides native bf16/fp16; a missing file gives None."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f amx_bf16 amx_fp16\n")
    assert decide_module._cpuinfo_flags(info) == {
        "fpu",
        "sse2",
        "avx512f",
        "amx_bf16",
        "amx_fp16",
    }
    assert decide_module._cpuinfo_flags(tmp_path / "absent") is None


@pytest.mark.parametrize(
    ("device_type", "bf16", "fp16", "expected"),
    [
        ("cpu", True, False, "bf16"),
        ("cpu", True, True, "bf16"),
        ("cpu", False, False, "fp32"),
        ("cpu", False, True, "fp32"),
        ("cuda", True, True, "fp16"),
        ("cuda", False, True, "fp16"),
    ],
)
def test_auto_rule_over_a_capability_table(
    monkeypatch: pytest.MonkeyPatch, device_type: str, bf16: bool, fp16: bool, expected: str
) -> None:
    """auto: CUDA -> fp16; CPU with native bf16 -> bf16; otherwise fp32 (never fp16 on CPU)."""
    caps = _fake(monkeypatch, device_type, bf16, fp16)
    resolved = decide(PrecisionRequest("auto"), device_type)
    assert resolved.used == expected and resolved.warning is None
    assert resolved.device_type == device_type
    if device_type == "cpu":
        assert caps.source in resolved.reason


def test_fp16_on_cpu_without_native_fp16_runs_with_the_measured_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Explicit fp16 on such a CPU is used as asked, and warns with the 1.46 s vs 0.059 s figure."""
    _fake(monkeypatch, "cpu", bf16=True, fp16=False)
    with caplog.at_level(logging.WARNING, logger=precision_module.__name__):
        policy = PrecisionPolicy.create("fp16", "cpu")
    assert policy.name == "fp16" and policy.compute_dtype == torch.float16
    warning = policy.resolved.warning
    assert warning is not None
    for fragment in ("10-100x", "1.46 s", "0.059 s", "bf16"):
        assert fragment in warning
    assert warning in caplog.text


def test_fp16_on_a_cpu_with_native_fp16_has_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU with AVX512-FP16/AMX-FP16 runs fp16 without a slowdown warning."""
    _fake(monkeypatch, "cpu", bf16=True, fp16=True)
    assert decide(PrecisionRequest("fp16"), "cpu").warning is None


def test_fp16_on_this_cpu_warns_when_it_lacks_native_fp16() -> None:
    """On the real CPU, the fp16 warning is present exactly when no native fp16 was detected."""
    caps = decide_module.cpu_capabilities()
    assert (decide(PrecisionRequest("fp16"), "cpu").warning is None) == caps.native_fp16


def test_bf16_on_cuda_without_bf16_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Explicit bf16 on a CUDA device without bf16 fails with the valid choices, no fallback."""
    _fake(monkeypatch, "cuda", bf16=False, fp16=True)
    with pytest.raises(PrecisionError, match=r"'bf16' is not supported.*fp32, fp16, auto"):
        decide(PrecisionRequest("bf16"), "cuda")


def test_bf16_on_cpu_without_native_bf16_runs_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Explicit bf16 on a CPU without native bf16 is used as asked, with a warning."""
    _fake(monkeypatch, "cpu", bf16=False, fp16=False)
    resolved = decide(PrecisionRequest("bf16"), "cpu")
    assert resolved.used == "bf16" and resolved.warning and "emulated" in resolved.warning


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_without_cuda_is_a_clear_error() -> None:
    """Asking for a CUDA device where there is none fails at resolution."""
    with pytest.raises(PrecisionError, match="CUDA is not available"):
        decide(PrecisionRequest("auto"), "cuda")


def test_unsupported_device_type_lists_valid_ones() -> None:
    """A device type other than cpu/cuda is refused with the valid types."""
    with pytest.raises(PrecisionError, match=r"unsupported device type 'meta'.*cpu, cuda"):
        decide(PrecisionRequest("fp32"), "meta")


@pytest.mark.parametrize(
    ("name", "dtype"), [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)]
)
def test_autocast_really_computes_in_the_policy_dtype(name: str, dtype: torch.dtype) -> None:
    """A Linear inside policy.autocast() outputs compute_dtype, even nested in another autocast."""
    policy = PrecisionPolicy.create(name, "cpu")
    assert policy.compute_dtype == dtype
    layer = torch.nn.Linear(8, 8)
    x = torch.randn(2, 8)
    with policy.autocast():
        assert layer(x).dtype == dtype
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    with torch.autocast("cpu", dtype=other), policy.autocast():
        assert layer(x).dtype == dtype
    assert layer(x).dtype == torch.float32


@pytest.mark.parametrize(("name", "enabled"), [("fp32", False), ("bf16", False), ("fp16", True)])
def test_scaler_always_exists_and_is_enabled_only_for_fp16(name: str, enabled: bool) -> None:
    """Every policy has a scaler on its device; only fp16 scales losses."""
    policy = PrecisionPolicy.create(name, "cpu")
    assert policy.scaler.is_enabled() is enabled
    assert policy.scaler.device == policy.device == torch.device("cpu")
    assert policy.scaler.state_dict()["scale"] == 65536.0


@pytest.mark.parametrize("name", ["fp16", "bf16"])
@pytest.mark.parametrize("cast", ["half", "bfloat16"])
def test_already_cast_model_is_refused_with_the_master_weights_explanation(
    name: str, cast: str
) -> None:
    """A model after .half()/.bfloat16() is refused: AMP keeps FP32 master weights."""
    model = getattr(torch.nn.Linear(4, 4), cast)()
    policy = PrecisionPolicy.create(name, "cpu")
    with pytest.raises(PrecisionError, match=r"'weight'.*FP32 master weights.*model\.float\(\)"):
        policy.check_model(model)


def test_model_on_another_device_is_refused() -> None:
    """A model whose parameters live on another device fails check_model, naming both devices."""
    model = torch.nn.Linear(4, 4, device="meta")
    policy = PrecisionPolicy.create("fp32", "cpu")
    with pytest.raises(PrecisionError, match=r"'weight' is on meta.*policy is for cpu"):
        policy.check_model(model)


def test_float32_model_on_the_right_device_passes() -> None:
    """A float32 CPU model passes check_model for every precision."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    for name in PRECISIONS:
        PrecisionPolicy.create(name, "cpu").check_model(model)
