"""``decide()``: the one function that picks the precision a run computes in.

Every precision choice of the project is made here, from one :class:`PrecisionRequest`:

- an explicit name runs as asked, or fails with an error naming the device (bf16 on a
  GPU without it); on a CPU without native 16-bit arithmetic it runs with a warning;
- ``auto`` by the device rule (fp16 on CUDA, bf16 on a CPU with native bf16, else fp32),
  less the precisions the request excludes (a red probe verdict);
- ``auto`` by measurement (``mode="measure"``): given the timed rows of a calibration
  (only those of the precisions the request would time, :func:`auto_candidates`: a row
  of any other is never read), the most robust precision within :data:`MARGIN` of the
  fastest row, in its faster execution (eager or captured), which the answer carries as
  ``execution`` (``choice.choose``); under
  torchrun, or with nothing timed, the rule, with the same exclusions;
- the floor: the precision guard's next rung after a demotion (:func:`next_precision`,
  along its ladder), or its memory of one across runs, raises a less robust pick to the
  floor, with the floor's reason.

Callers build a :class:`~.precision.PrecisionPolicy` from the answer
(``PrecisionPolicy.from_decision``) and never patch it afterwards::

    >>> decide(PrecisionRequest("fp32"), "cpu").used
    'fp32'
    >>> decide(PrecisionRequest("fp16", floor="bf16", floor_reason="guard"), "cpu").reason
    'guard'

What a device computes natively, the facts it decides from, are found here too: a CPU's
native bf16/fp16 comes from its ``/proc/cpuinfo`` flags (or, without that file, torch's
CPUID probe); a CUDA device's from torch (:func:`detect_capabilities`; a test patches it
here, and every caller sees the patch: they call it through this module)::

    >>> detect_capabilities(torch.device("cpu")).device_type
    'cpu'
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from genesis_fp16_infrastructure.errors import PrecisionError
from genesis_fp16_infrastructure.precision_names import (
    PRECISIONS,
    PrecisionName,
    RequestedName,
    less_robust,
)

# The choice from timed rows is torch-free (precision show follows it); decided here.
from genesis_fp16_infrastructure.training.precision.choice import MARGIN as MARGIN
from genesis_fp16_infrastructure.training.precision.choice import among
from genesis_fp16_infrastructure.training.precision.choice import choose as choose
from genesis_fp16_infrastructure.training.precision.guard_config import GuardConfig
from genesis_fp16_infrastructure.training.precision.kept_measurements import read_calibration
from genesis_fp16_infrastructure.training.precision.precision_request import (
    PrecisionRequest as PrecisionRequest,
)
from genesis_fp16_infrastructure.training.reports import Measured

DEVICE_TYPES: tuple[str, ...] = ("cpu", "cuda")

CPU_FP16_SLOWDOWN = (
    "fp16 matmuls on a CPU without native fp16 (AVX512-FP16 or AMX-FP16) are 10-100x "
    "slower than fp32: measured on this project's machines, one step of a 1024-wide MLP "
    "took 1.46 s in fp16 against 0.059 s in fp32"
)


@dataclass(frozen=True)
class DeviceCapabilities:
    """What a device does natively, and how we know (``source``)."""

    device_type: str
    native_bf16: bool
    native_fp16: bool
    source: str


def cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, str] | None:
    """Each field of ``/proc/cpuinfo`` with its first value (the first processor's:
    ``flags``, ``model name``); None without the file."""
    try:
        text = path.read_text()
    except OSError:
        return None
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        found.setdefault(key.strip(), value.strip())
    return found


def _cpuinfo_flags(path: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    info = cpuinfo(path)  # x86 says flags, Arm Features
    return None if info is None else set(info.get("flags", info.get("Features", "")).split())


def _torch_cpu_flags() -> set[str]:
    # Private torch API (present in 2.x): a dict of CPUID feature booleans.
    probe = getattr(getattr(torch._C, "_cpu", None), "_get_cpu_capability", None)
    if probe is None:
        return set()
    return {name for name, value in probe().items() if value is True}


@functools.lru_cache(maxsize=1)
def cpu_capabilities() -> DeviceCapabilities:
    """Native bf16/fp16 of this CPU, from /proc/cpuinfo flags or, without it, torch's CPUID."""
    flags = _cpuinfo_flags()
    source = "/proc/cpuinfo"
    if flags is None:
        flags, source = _torch_cpu_flags(), "torch CPUID probe"
    bf16 = sorted(flags & {"avx512_bf16", "amx_bf16"})
    fp16 = sorted(flags & {"avx512_fp16", "amx_fp16"})
    found = ", ".join(bf16 + fp16) or "no avx512_bf16, amx_bf16, avx512_fp16 or amx_fp16"
    return DeviceCapabilities("cpu", bool(bf16), bool(fp16), f"{source}: {found}")


def detect_capabilities(device: torch.device) -> DeviceCapabilities:
    """Native low-precision support of ``device`` (cpu or cuda)."""
    if device.type == "cpu":
        return cpu_capabilities()
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise PrecisionError(f"device {str(device)!r} requested but CUDA is not available")
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        name = torch.cuda.get_device_name(device)
        return DeviceCapabilities("cuda", bf16, True, f"CUDA device {name}")
    raise PrecisionError(
        f"unsupported device type {device.type!r}; valid device types: {', '.join(DEVICE_TYPES)}"
    )


def as_device(device: torch.device | str) -> torch.device:
    """``device`` as a :class:`torch.device`; a bad name is a :class:`PrecisionError`."""
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise PrecisionError(f"invalid device {device!r}: {exc}") from None


def same_device(a: torch.device, b: torch.device) -> bool:
    """Whether ``a`` and ``b`` are one device: a device without an index matches every
    index of its type."""
    if a.type != b.type:
        return False
    return a.index is None or b.index is None or a.index == b.index


@dataclass(frozen=True)
class ResolvedPrecision:
    """The answer to a precision request: ``used`` is what runs, ``reason`` says why.

    ``warning`` is set when the request runs as asked but badly (fp16 on a CPU
    without native fp16); it is None otherwise. ``execution`` is the execution a
    measured ``auto`` chose with the precision (``eager`` or ``cuda_graph``); None when
    nothing was measured, and the run's ``cuda_graph`` setting decides.
    """

    requested: RequestedName
    used: PrecisionName
    device_type: str
    reason: str
    warning: str | None = None
    execution: str | None = None


def decide(
    request: PrecisionRequest,
    device: torch.device | str,
    timings: Sequence[Measured] | None = None,
    ranks: int = 1,
) -> ResolvedPrecision:
    """What runs for ``request`` on ``device``, with the reason; see the module docstring.

    ``timings`` are a calibration's rows (``auto`` only): the measured choice then picks
    the precision and its execution. ``ranks`` is the run's process count: a measured
    ``auto`` over several ranks is decided by the rule (each rank would time its own
    steps and could choose differently), the exclusions kept. Raises
    :class:`PrecisionError` for a request that cannot run here; it never falls back
    silently.
    """
    caps = detect_capabilities(as_device(device))
    if request.requested != "auto":
        if timings:
            raise ValueError(f"timings are for precision 'auto', not {request.requested!r}")
        pick = _explicit(request.requested, caps, request.basis)
    elif timings:
        pick = _measured(request, timings, caps)
    elif request.measures and ranks > 1:
        why = "not measured under torchrun (ranks could choose differently)"
        pick = _by_rule(replace(request, note=_joined(why, request.note)), caps)
    elif request.measures and request.note is None:  # a caller that timed nothing says why
        why = "measuring was asked, but nothing was timed here: decided by the rule"
        pick = _by_rule(replace(request, note=why), caps)
    else:
        pick = _by_rule(request, caps)
    floor = request.floor
    if floor is None or not runs_at_floor(request.requested, pick.used, floor):
        return pick
    raised = _explicit(floor, caps, request.floor_reason)
    return replace(raised, requested=request.requested)


def decide_continued(
    request: PrecisionRequest, device: torch.device | str, saved: str | None
) -> ResolvedPrecision | None:
    """The answer for a run that continues an interrupted job whose checkpoint ran in
    ``saved``: for ``auto``, ``saved`` again (``auto`` is decided once per job), unless
    this run may not use it (excluded since, below the guard's floor, or not runnable on
    ``device``); None: decide afresh (an explicit request always is).

    >>> decide_continued(PrecisionRequest("auto"), "cpu", "fp32").reason
    'auto, decided once per job: its checkpoint ran in fp32, and so does this run'
    """
    if request.requested != "auto" or saved not in PRECISIONS or saved in request.excluded:
        return None
    if request.floor is not None and runs_at_floor("auto", saved, request.floor):
        return None  # the guard's floor moves it: decided afresh, said at the resume
    name = PRECISIONS[PRECISIONS.index(saved)]  # saved, as a PrecisionName
    why = f"auto, decided once per job: its checkpoint ran in {name}, and so does this run"
    try:
        pick = _explicit(name, detect_capabilities(as_device(device)), why)
    except PrecisionError:  # resumed on a device that cannot run it
        return None
    return replace(pick, requested="auto")


def measures_here(request: PrecisionRequest, ranks: int) -> bool:
    """Whether a run of ``request`` over ``ranks`` processes times its candidates before
    :func:`decide` answers: a measured ``auto`` in one process.

    >>> measures_here(PrecisionRequest("auto", mode="measure"), 2)
    False
    """
    return request.measures and ranks == 1


def _joined(first: str, then: str | None) -> str:
    return f"{first}; {then}" if then else first


def next_precision(
    current: PrecisionName, config: GuardConfig, capabilities: DeviceCapabilities
) -> PrecisionName | None:
    """The precision after ``current`` on the guard's ladder that the device runs, or
    None (``current`` is not on the ladder, or is its last rung). bf16 is passed over where
    it is emulated, unless ``config.bf16_needs_native`` is False.

    >>> caps = DeviceCapabilities("cpu", native_bf16=False, native_fp16=False, source="test")
    >>> next_precision("fp16", GuardConfig(), caps)
    'fp32'
    """
    if current not in config.ladder:
        return None
    for candidate in config.ladder[config.ladder.index(current) + 1 :]:
        if candidate == "bf16" and config.bf16_needs_native and not capabilities.native_bf16:
            continue
        return candidate
    return None


def auto_candidates(
    caps: DeviceCapabilities, excluded: Mapping[str, str] | None = None
) -> tuple[list[PrecisionName], dict[str, str]]:
    """The precisions a measured ``auto`` times on a device, and why each other one is not:
    fp32 always, bf16 and fp16 where native and not excluded (emulated 16-bit arithmetic
    is never faster, so it is not timed)."""
    native = {"fp32": True, "bf16": caps.native_bf16, "fp16": caps.native_fp16}
    candidates: list[PrecisionName] = []
    skipped: dict[str, str] = {}
    for name in PRECISIONS:
        if excluded and name in excluded and name != "fp32":
            skipped[name] = excluded[name]
        elif not native[name]:
            skipped[name] = f"no native {name} ({caps.source})"
        else:
            candidates.append(name)
    return candidates, skipped


def planned_precision(
    request: PrecisionRequest,
    device: torch.device | str,
    timings: Sequence[Measured] | None = None,
) -> PrecisionName | None:
    """What a run of ``request`` will compute in, as far as it is known before it starts
    (the daemon's gauge): :func:`decide`'s answer, ``timings`` being a kept measurement
    (None: a measured ``auto``'s rows kept at its ``cache``, read here; an unusable file
    is set aside, as the run's read does); None for a measured ``auto`` with none. An
    explicit name is floored by name, without the device (no CUDA context in the daemon
    for it).

    >>> planned_precision(PrecisionRequest("fp16", floor="bf16"), "cuda")
    'bf16'
    """
    if request.requested != "auto":
        return request.without_steps(request.requested)  # the floor's rule, by name
    if timings is None:
        kept = None
        if request.measures and request.cache is not None:
            kept = read_calibration(request.cache)
        timings = () if kept is None else kept.rows
    if request.measures and not timings:
        return None
    return decide(request, device, timings).used


def _measured(
    request: PrecisionRequest, timings: Sequence[Measured], caps: DeviceCapabilities
) -> ResolvedPrecision:
    # Only the rows of what this request would time: never a row of a precision the device
    # lacks (a kept file's planted fp16 row on a CPU without it), nor one the probe has
    # since excluded (fp32 never is).
    rows = among(timings, auto_candidates(caps, request.excluded)[0])
    used, execution, why = choose(rows)
    reason = _joined(why, request.note)
    return ResolvedPrecision("auto", used, caps.device_type, reason, execution=execution)


def _by_rule(request: PrecisionRequest, caps: DeviceCapabilities) -> ResolvedPrecision:
    used: PrecisionName
    if caps.device_type == "cuda":
        used, why = "fp16", "CUDA device: fp16 autocast with dynamic loss scaling"
    elif caps.native_bf16:
        used, why = "bf16", f"CPU with native bf16 ({caps.source})"
    else:
        used, why = "fp32", f"CPU without native bf16 ({caps.source}); fp16 would be slow"
    reason = f"auto -> {used}: {why}"
    if used in request.excluded and used != "fp32":  # fp32 always may run
        reason = f"auto -> fp32: {used} excluded ({request.excluded[used]})"
        used = "fp32"
    return ResolvedPrecision("auto", used, caps.device_type, _joined(reason, request.note))


def _explicit(
    requested: PrecisionName, caps: DeviceCapabilities, basis: str | None
) -> ResolvedPrecision:
    reason = basis or f"{requested} requested explicitly on {caps.device_type} ({caps.source})"
    warning = None
    if requested == "bf16" and not caps.native_bf16:
        if caps.device_type == "cuda":
            raise PrecisionError(
                f"precision 'bf16' is not supported by {caps.source} (needs compute "
                "capability 8.0 or newer); valid precisions here: fp32, fp16, auto"
            )
        warning = (
            f"bf16 on a CPU without native bf16 ({caps.source}): it runs, but bf16 "
            "matmuls are emulated and may be slower than fp32"
        )
    if requested == "fp16" and caps.device_type == "cpu" and not caps.native_fp16:
        alternative = "bf16 (native here)" if caps.native_bf16 else "fp32"
        warning = f"{CPU_FP16_SLOWDOWN} ({caps.source}); consider {alternative}"
    return ResolvedPrecision(requested, requested, caps.device_type, reason, warning)


def runs_at_floor(requested: RequestedName, used: PrecisionName, floor: PrecisionName) -> bool:
    """Whether a pick of ``used`` (for ``requested``) runs at ``floor`` instead: it is less
    robust than the floor, or an ``auto`` that lands on it (the plugin may run ``auto``
    below it, as a plugin's all-fp16 preset; an explicit name at the floor may not).
    Needs no device: the daemon asks it of an explicit request without probing one.

    >>> runs_at_floor("fp16", "fp16", "bf16"), runs_at_floor("bf16", "bf16", "bf16")
    (True, False)
    """
    return less_robust(used, floor) or (requested == "auto" and used == floor)
