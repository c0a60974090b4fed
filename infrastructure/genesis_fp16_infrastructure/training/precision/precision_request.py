"""The precision request: what one run asks of its precision, torch-free and JSON-ready.

One :class:`PrecisionRequest` travels from the operator's settings (the daemon builds it
once per job, ``genesis_fp16/jobs/run_request.py``) through the run file to the child
and every torchrun rank (``RunSpec.precision``), to
:func:`~genesis_fp16_infrastructure.training.precision.decide.decide`, which answers it.
Nothing on the way turns ``auto`` into a name: ``auto`` means "decided by ``decide()``"::

    >>> request = PrecisionRequest("auto", mode="measure", floor="bf16", floor_reason="guard")
    >>> PrecisionRequest.from_json(request.to_json()) == request
    True
    >>> PrecisionRequest.from_json("fp16")  # a bare name: the library's shorthand
    PrecisionRequest(requested='fp16', basis=None, mode='rule', excluded={}, note=None, \
floor=None, floor_reason='', cache=None, budget_s=1.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.errors import PrecisionError
from genesis_fp16_infrastructure.precision_names import (
    PRECISIONS,
    REQUESTABLE,
    PrecisionName,
    RequestedName,
    less_robust,
)
from genesis_fp16_infrastructure.record_codec import Record

AUTO_PRECISION_MODES: tuple[str, ...] = ("measure", "rule")
"""How ``auto`` is decided: by timing the candidates, or by the device rule."""

DEFAULT_BUDGET_S = 1.0
"""The most wall clock a measured ``auto`` spends timing, when nothing else bounds it."""


@dataclass(frozen=True)
class PrecisionRequest(Record):
    """What one run asks of its precision, and what bounds the answer.

    - ``requested``: ``fp32``, ``bf16``, ``fp16`` or ``auto``.
    - ``basis``: who named an explicit precision on the operator's behalf (a plugin's
      preset under ``auto``); the answer's reason is then this instead of "requested
      explicitly".
    - ``mode``: how ``auto`` is decided: ``rule`` (the device rule, the library's
      default) or ``measure`` (time the task's own steps, the daemon's default; one
      process only, under torchrun the rule decides and says so).
    - ``excluded``: precisions ``auto`` must not pick, each with why (a red probe
      verdict), by the rule or by measurement; fp32 cannot be excluded.
    - ``note``: what an ``auto``'s reason adds after its pick: why a measurement was
      not taken (one candidate), what was not timed, a cached one.
    - ``floor``: the least robust precision the run may use (the precision guard's next
      rung, or its memory of a demotion): a pick less robust than it, or an ``auto``
      that comes out at it, runs the floor with ``floor_reason``.
    - ``cache``: the file a measurement is kept in (and the captured-step verdicts
      beside it); ``budget_s`` bounds a measurement's wall clock.
    """

    requested: RequestedName = "auto"
    basis: str | None = None
    mode: str = "rule"
    excluded: Mapping[str, str] = field(default_factory=dict)
    note: str | None = None
    floor: PrecisionName | None = None
    floor_reason: str = ""
    cache: Path | None = None
    budget_s: float = DEFAULT_BUDGET_S

    def __post_init__(self) -> None:
        if self.requested not in REQUESTABLE:  # a name from a file, a flag, a plugin
            valid = ", ".join(REQUESTABLE)
            raise PrecisionError(f"unknown precision {self.requested!r}; valid precisions: {valid}")
        if self.mode not in AUTO_PRECISION_MODES:
            raise PrecisionError(
                f"auto precision mode {self.mode!r}: choose from {', '.join(AUTO_PRECISION_MODES)}"
            )
        if self.floor is not None and self.floor not in PRECISIONS:
            raise PrecisionError(
                f"precision floor {self.floor!r}: valid precisions: {', '.join(PRECISIONS)}"
            )
        if not self.budget_s > 0:
            raise PrecisionError(f"calibration budget_s={self.budget_s!r}: must be > 0")

    def __eq__(self, other: object) -> bool:
        # A plugin written when the request was a name (API_VERSION 1) compares it with
        # one: ``request.precision == "bf16"`` would be False whatever was asked, silently.
        if isinstance(other, str):
            raise TypeError(
                f"a PrecisionRequest is compared with the name {other!r}: compare "
                f"request.precision.requested (here {self.requested!r}) with it instead"
            )
        if not isinstance(other, PrecisionRequest):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self))

    @property
    def measures(self) -> bool:
        """Whether ``auto`` here is decided by timing candidates (``mode="measure"``)."""
        return self.requested == "auto" and self.mode == "measure"

    def without_steps(self, last: PrecisionName) -> PrecisionName:
        """The precision a run that takes no step (up to date) reports: the one asked
        now, not ``last`` (the precision its model was trained in), unless ``auto`` leaves
        ``last`` standing; never less robust than the floor::

            >>> PrecisionRequest("fp32").without_steps("bf16")
            'fp32'
            >>> PrecisionRequest("auto", floor="bf16").without_steps("fp16")
            'bf16'
        """
        asked = last if self.requested == "auto" else self.requested
        if self.floor is not None and less_robust(asked, self.floor):
            return self.floor
        return asked

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> PrecisionRequest:
        """The record codec's (the run file's ``precision``); a bare name is
        ``PrecisionRequest(name)``, checked by ``__post_init__`` as any request."""
        if isinstance(data, str):
            return cls(data)  # type: ignore[arg-type]  # __post_init__ names a bad one
        return super().from_json(data, where)


def as_request(value: PrecisionRequest | str) -> PrecisionRequest:
    """``value`` as a request: a bare name (``"bf16"``) is ``PrecisionRequest(name)``."""
    return value if isinstance(value, PrecisionRequest) else PrecisionRequest.from_json(value)
