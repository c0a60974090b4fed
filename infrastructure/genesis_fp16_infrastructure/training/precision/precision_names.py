"""The execution vocabulary, and the request a run makes of its precision, importable
without torch; the precisions' names are the library root's
(:mod:`genesis_fp16_infrastructure.precision_names`).

The other half of what a run requests, and of what a measured ``auto`` chooses with its
precision, is how its step executes (``cuda_graph``, :data:`CUDA_GRAPH_REQUESTS`); its
names are here, torch-free for the same reasons as the precisions':

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
``off`` (the default until it is measured on a GPU) compiles nothing. With the log
interval, the two are the fields every step shares
(:class:`~genesis_fp16_infrastructure.training.step_spec.StepSpec`).

The precision request, here beside the names it is made of: what one run asks of its
precision, torch-free and JSON-ready.

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

The precision guard's config and memory, here beside the names they are made of and the
request they feed: :class:`GuardConfig` (when a run demotes, and along which ladder;
``decide`` takes it with the request) and :class:`PrecisionMemory` (an agent's remembered
demotion, whose floor a request carries as ``floor``). The guard itself is
:mod:`genesis_fp16_infrastructure.training.run.guard`; the memory's file is the agent
folder's (``AgentFolder.precision_memory``, ``remember_run``). Torch-free, so that a
daemon checks its guard settings at start-up without loading torch::

    config = GuardConfig(ladder=("fp16", "fp32"), check_interval=10)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from genesis_fp16_infrastructure.config_bounds import Bounded, bounded
from genesis_fp16_infrastructure.errors import PrecisionError
from genesis_fp16_infrastructure.precision_names import (
    DEFAULT_LADDER,
    PRECISIONS,
    REQUESTABLE,
    PrecisionName,
    RequestedName,
    less_robust,
)
from genesis_fp16_infrastructure.record_codec import Record

CUDA_GRAPH_REQUESTS: tuple[str, ...] = ("auto", "on", "off")
COMPILE_REQUESTS: tuple[str, ...] = ("off", "on")
# Inductor's kernels without its own CUDA graphs: the captured step is the graph.
COMPILE_MODE = "max-autotune-no-cudagraphs"
EXECUTION_MODES: tuple[str, ...] = ("eager", "cuda_graph", "cuda_graph_compiled")
# Why a run resolved to a captured step ran eagerly after all (ResolvedExecution.fallback,
# the daemon's genesis_fp16_execution_fallbacks_total{reason}): its first captured steps
# differed from eager ones from the same state (run/verify_capture.py), or a capture raised.
FALLBACK_REASONS: tuple[str, ...] = ("verification_mismatch", "capture_failed")


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


# The fixed set of reasons a demotion can have (a bounded metric label).
REASONS: tuple[str, ...] = ("scaler_unstable", "nonfinite_loss", "overflow_rate", "divergence")


@dataclass(frozen=True)
class GuardConfig(Record, Bounded):
    """When the precision guard demotes a run, and to what. Every trigger can be turned off.

    - ``ladder``: precisions from first to last resort; a run demotes to the next entry
      (default fp16 -> bf16 -> fp32). A run whose precision is not on the ladder, or is
      its last entry, is not guarded.
    - ``bf16_needs_native``: skip bf16 on a device without native bf16 (a CPU without
      AVX512-BF16/AMX, a CUDA GPU older than compute capability 8.0). Default True.
    - ``check_interval``: steps between two checks; each check is one host read of the
      device counters (default 25). Also the spacing of the good-state snapshots.
    - ``on_unstable``: demote when the loss scaler reports ``unstable`` (its scale sat
      at ``min_scale`` while ``unstable_after`` consecutive steps overflowed). Default True.
    - ``nonfinite_limit`` / ``nonfinite_window``: demote when this many micro-batch losses
      were NaN or inf within the last ``nonfinite_window`` steps (default 3 within 100).
      None turns the trigger off.
    - ``overflow_rate_limit`` / ``overflow_window`` / ``overflow_warmup``: demote when more
      than this share of the steps of a window of ``overflow_window`` steps overflowed
      (default 0.5 over 50 steps). Windows start ``overflow_warmup`` steps (default 25)
      after the precision began in this run, so that the scale's first calibration from
      65536 down (at most 16 overflowing steps) does not count. None turns it off.
    - ``divergence_factor`` / ``divergence_ema_decay`` / ``divergence_warmup``: demote
      when the mean finite loss of a check interval exceeds ``divergence_factor`` times
      the exponential moving average of the previous intervals' means (default 10x, decay
      0.9), once ``divergence_warmup`` intervals (default 4) have fed the average. NaN and
      inf losses never enter the average. None turns it off.

    ::

        GuardConfig(check_interval=10, overflow_rate_limit=None)  # unstable/NaN/divergence
    """

    ladder: tuple[PrecisionName, ...] = DEFAULT_LADDER
    bf16_needs_native: bool = True
    check_interval: int = bounded(25, ge=1)
    on_unstable: bool = True
    nonfinite_limit: int | None = bounded(3, ge=1)
    nonfinite_window: int = bounded(100, ge=1)
    overflow_rate_limit: float | None = bounded(0.5, gt=0.0, lt=1.0)
    overflow_window: int = bounded(50, ge=1)
    overflow_warmup: int = bounded(25, ge=0)
    divergence_factor: float | None = bounded(10.0, gt=1.0)
    divergence_ema_decay: float = bounded(0.9, ge=0.0, lt=1.0)
    divergence_warmup: int = bounded(4, ge=1)

    SETTING = "precision-guard"

    def __post_init__(self) -> None:
        object.__setattr__(self, "ladder", tuple(self.ladder))
        unknown = [p for p in self.ladder if p not in PRECISIONS]
        if unknown or not self.ladder or len(set(self.ladder)) != len(self.ladder):
            raise ValueError(
                f"guard ladder={list(self.ladder)!r}: needs distinct precisions from "
                f"{', '.join(PRECISIONS)}, e.g. fp16,bf16,fp32"
            )
        super().__post_init__()  # the fields' ranges


@dataclass(frozen=True)
class PrecisionMemory(Record):
    """What a daemon remembers about one agent's demotions (the precision state file,
    with its ``version``: ``to_json`` and ``from_json`` are the record codec's).

    ``demoted_to`` is a floor: later runs of the agent train in ``demoted_to`` whenever
    they would run in a less robust precision (fp16 < bf16 < fp32). ``clean_runs``
    counts runs since that finished without a demotion (for optional promotion).
    """

    VERSION = 1

    demoted_from: PrecisionName | Literal["unknown"]  # unknown: set after an unusable file
    demoted_to: PrecisionName
    reason: str
    step: int
    rollback_step: int
    at: str
    clean_runs: int = 0
    history: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
