"""The precision and execution vocabulary of the whole project, importable without torch.

Every list or map of precision names elsewhere (the daemon's settings and metric
labels, the probe gate, the guard's ladder, a plugin's presets) is derived from these;
a new precision is added here once. Configuration checks names against these tuples
at start-up without paying for the torch import. The names are declared once, as the
``Literal`` types :data:`PrecisionName` and :data:`RequestedName` (what mypy and
pydantic check a field against); the tuples are read from them.

    >>> PRECISIONS          # most robust first
    ('fp32', 'bf16', 'fp16')
    >>> DEFAULT_LADDER      # a guarded run demotes along this
    ('fp16', 'bf16', 'fp32')

The other half of what a run requests, and of what a measured ``auto`` chooses with its
precision, is how its step executes (``cuda_graph``, :data:`CUDA_GRAPH_REQUESTS`); its
names are here too, for the same reasons:

- ``auto``: a captured CUDA-graph step where the run can be captured, eager otherwise,
  with the reason; a measured ``auto``
  (``genesis_fp16_infrastructure.training.run.calibration``) times both on CUDA and keeps
  the faster.
- ``on``: the captured step, or a clear error before the first step where it cannot be.
- ``off``: eager steps.

``compile`` is a second, separate request: ``on`` compiles the model's forward and
backward with ``torch.compile(mode=COMPILE_MODE)`` (Inductor kernels, CUDA graphs left to
us) and captures the whole step around them, reported as ``cuda_graph_compiled``; it
needs a step that can be captured and is an error before the first step where it cannot.
``off`` (the default until it is measured on a GPU) compiles nothing.
"""

from __future__ import annotations

from typing import Literal, get_args

PrecisionName = Literal["fp32", "bf16", "fp16"]
"""What a run can compute in, in order of robustness (fp32 never overflows; bf16 has
fp32's range with fewer mantissa bits; fp16 needs loss scaling). The one place a
precision's name is written: every tuple below, and the settings' field types, come
from it."""

RequestedName = Literal["auto", PrecisionName]
"""What a run may request, the default first: a precision, or ``auto`` (decided by
``decide``). A settings field typed with it is checked by mypy and by pydantic."""

PRECISIONS: tuple[PrecisionName, ...] = get_args(PrecisionName)
""":data:`PrecisionName`'s values, most robust first."""

LOW_PRECISIONS: tuple[PrecisionName, ...] = PRECISIONS[1:]
"""The 16-bit precisions: what the probe checks and the guard can demote from."""

REQUESTABLE: tuple[RequestedName, ...] = (*PRECISIONS, "auto")
"""What a run may request: a precision, or ``auto`` (resolved on the device)."""

CHOICES: tuple[RequestedName, ...] = get_args(RequestedName)
""":data:`REQUESTABLE` with the default first: how the daemon's settings and CLI list it."""

ROBUSTNESS: tuple[PrecisionName, ...] = tuple(reversed(PRECISIONS))
"""From least to most numerically robust: the order the precision memory floors on."""


def less_robust(precision: PrecisionName, than: PrecisionName) -> bool:
    """True when ``precision`` is less robust than ``than`` (fp16 < bf16 < fp32); False
    when either is not a precision (a floor read from a broken file means nothing)::

        >>> less_robust("fp16", "bf16"), less_robust("fp32", "bf16"), less_robust("fp8", "bf16")
        (True, False, False)
    """
    if precision not in ROBUSTNESS or than not in ROBUSTNESS:
        return False
    return ROBUSTNESS.index(precision) < ROBUSTNESS.index(than)


DEFAULT_LADDER: tuple[PrecisionName, ...] = ROBUSTNESS
"""The precision guard's default demotion order: down the robustness order to fp32."""

DTYPE_NAMES: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""The ``torch`` dtype attribute of each precision (``precision.dtype_of`` returns the dtype)."""

LOSS_SCALED: tuple[PrecisionName, ...] = ("fp16",)
"""Precisions whose gradients need dynamic loss scaling (fp16's narrow exponent)."""
INITIAL_LOSS_SCALE = 65536.0
"""The scale their first run starts from (``ScalerConfig.init_scale``'s default)."""


def precision_name(value: object, what: str = "precision") -> PrecisionName:
    """``value`` as a :data:`PrecisionName` (a name read from a file, a flag, a plugin),
    or a one-line ``ValueError`` naming ``what`` and the choices.

    >>> precision_name("bf16")
    'bf16'
    """
    for name in get_args(PrecisionName):
        if value == name:
            found: PrecisionName = name
            return found
    raise ValueError(f"{what} {value!r}: choose from {', '.join(PRECISIONS)}")


def requested_name(value: object, what: str = "precision") -> RequestedName:
    """``value`` as a :data:`RequestedName`, or a one-line ``ValueError`` (the choices)."""
    if value == "auto":
        return "auto"
    try:
        return precision_name(value, what)
    except ValueError:
        raise ValueError(f"{what} {value!r}: choose from {', '.join(CHOICES)}") from None


CUDA_GRAPH_REQUESTS: tuple[str, ...] = ("auto", "on", "off")
COMPILE_REQUESTS: tuple[str, ...] = ("off", "on")
# Inductor's kernels without its own CUDA graphs: the captured step is the graph.
COMPILE_MODE = "max-autotune-no-cudagraphs"
EXECUTION_MODES: tuple[str, ...] = ("eager", "cuda_graph", "cuda_graph_compiled")
# Why a run resolved to a captured step ran eagerly after all (ResolvedExecution.fallback,
# the daemon's genesis_fp16_execution_fallbacks_total{reason}): its first captured steps
# differed from eager ones from the same state (step/verify.py), or a capture raised.
FALLBACK_REASONS: tuple[str, ...] = ("verification_mismatch", "capture_failed")
