"""The precision vocabulary of the whole project: the precisions' names, torch-free.

Every list or map of precision names elsewhere (the daemon's settings and metric
labels, the probe gate, the guard's ladder, a plugin's presets, the lifecycle's and the
runs' records) is derived from these; a new precision is added here once. Configuration
checks names against these tuples at start-up without paying for the torch import. The
names are declared once, as the ``Literal`` types :data:`PrecisionName` and
:data:`RequestedName` (what mypy and pydantic check a field against); the tuples are read
from them. They sit at the library's root, beneath every component that names a
precision (the agent folder's records among them: tests/test_layering.py).

    >>> PRECISIONS          # most robust first
    ('fp32', 'bf16', 'fp16')
    >>> DEFAULT_LADDER      # a guarded run demotes along this
    ('fp16', 'bf16', 'fp32')
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
