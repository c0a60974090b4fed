"""When the precision guard demotes a run, and to what (its config and its ladder), and
what it remembers of the demotions across runs (its memory).

Importable without torch, so that a daemon can check its guard settings at start-up
without loading it (the guard itself is :mod:`genesis_fp16_infrastructure.training.run.guard`)::

    config = GuardConfig(ladder=("fp16", "fp32"), check_interval=10)

The next rung a demotion runs is decided with every other precision choice, by
:func:`~genesis_fp16_infrastructure.training.precision.decide.next_precision`.

What a daemon remembers of an agent's demotions, so that a restarted daemon does not go
back to the precision that failed, is the guard's too: :class:`PrecisionMemory`, a small
JSON file per agent (the precision state file)::

    memory = remember_demotions(read_precision_memory(path), result.demotions)
    write_precision_memory(path, memory)
    if memory is not None:  # the request's floor: decide() runs nothing less robust
        floor = memory.demoted_to
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import Field, asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import PRECISION_STATE
from genesis_fp16_infrastructure.training.precision.precision_names import (
    DEFAULT_LADDER,
    PRECISIONS,
    PrecisionName,
)
from genesis_fp16_infrastructure.training.reports import Demotion

# The fixed set of reasons a demotion can have (a bounded metric label).
REASONS: tuple[str, ...] = ("scaler_unstable", "nonfinite_loss", "overflow_rate", "divergence")


@dataclass(frozen=True)
class Bounds:
    """The range a numeric guard field must lie in (None: no bound on that side); the
    daemon's settings read it too, so a range is declared once, on the field."""

    ge: float | None = None
    gt: float | None = None
    lt: float | None = None

    def hold(self, value: float) -> bool:
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.lt is None or value < self.lt)
        )

    def describe(self) -> str:
        """``>= 1``, ``> 0 and < 1``: the range as the error messages say it."""
        parts = [(">=", self.ge), (">", self.gt), ("<", self.lt)]
        return " and ".join(f"{sign} {bound:g}" for sign, bound in parts if bound is not None)


def _bounded(
    default: Any, *, ge: float | None = None, gt: float | None = None, lt: float | None = None
) -> Any:
    """A dataclass field with its :class:`Bounds` in the field's metadata."""
    return field(default=default, metadata={"bounds": Bounds(ge, gt, lt)})


def bounds_of(item: Field[Any]) -> Bounds | None:
    """The :class:`Bounds` of one of ``GuardConfig``'s fields, None when it has none."""
    found = item.metadata.get("bounds")
    return found if isinstance(found, Bounds) else None


@dataclass(frozen=True)
class GuardConfig:
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
    check_interval: int = _bounded(25, ge=1)
    on_unstable: bool = True
    nonfinite_limit: int | None = _bounded(3, ge=1)
    nonfinite_window: int = _bounded(100, ge=1)
    overflow_rate_limit: float | None = _bounded(0.5, gt=0.0, lt=1.0)
    overflow_window: int = _bounded(50, ge=1)
    overflow_warmup: int = _bounded(25, ge=0)
    divergence_factor: float | None = _bounded(10.0, gt=1.0)
    divergence_ema_decay: float = _bounded(0.9, ge=0.0, lt=1.0)
    divergence_warmup: int = _bounded(4, ge=1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ladder", tuple(self.ladder))
        unknown = [p for p in self.ladder if p not in PRECISIONS]
        if unknown or not self.ladder or len(set(self.ladder)) != len(self.ladder):
            raise ValueError(
                f"guard ladder={list(self.ladder)!r}: needs distinct precisions from "
                f"{', '.join(PRECISIONS)}, e.g. fp16,bf16,fp32"
            )
        for item in fields(self):
            value, limits = getattr(self, item.name), bounds_of(item)
            if limits is not None and value is not None and not limits.hold(value):
                raise ValueError(
                    f"invalid precision-guard setting: {item.name}={value!r} must be "
                    f"{limits.describe()}"
                )


MEMORY_VERSION = 1


@dataclass(frozen=True)
class PrecisionMemory:
    """What a daemon remembers about one agent's demotions (the precision state file).

    ``demoted_to`` is a floor: later runs of the agent train in ``demoted_to`` whenever
    they would run in a less robust precision (fp16 < bf16 < fp32). ``clean_runs``
    counts runs since that finished without a demotion (for optional promotion).
    """

    demoted_from: PrecisionName | Literal["unknown"]  # unknown: set after an unusable file
    demoted_to: PrecisionName
    reason: str
    step: int
    rollback_step: int
    at: str
    clean_runs: int = 0
    history: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["history"] = [dict(h) for h in self.history]
        return {"version": MEMORY_VERSION, **out}


def remember_demotions(
    previous: PrecisionMemory | None, demotions: Sequence[Demotion], keep: int = 10
) -> PrecisionMemory | None:
    """The memory after a run: the last demotion becomes the floor; none counts a clean run."""
    if not demotions:
        if previous is None:
            return None
        return replace(previous, clean_runs=previous.clean_runs + 1)
    last = demotions[-1]
    now = datetime.now(UTC).isoformat(timespec="seconds")
    past = previous.history if previous else ()
    history = (*past, *({**d.to_json(), "at": now} for d in demotions))
    return PrecisionMemory(
        demoted_from=demotions[0].from_ if previous is None else previous.demoted_from,
        demoted_to=last.to,
        reason=last.reason,
        step=last.step,
        rollback_step=last.rollback_step,
        at=now,
        clean_runs=0,
        history=history[-keep:],
    )


def read_precision_memory(path: Path) -> PrecisionMemory | None:
    """Load the state file; None when there is none. A broken file raises ValueError
    (:class:`~genesis_fp16_infrastructure.agent_folder.files.UnusableStateFile` for a folder, FIFO,
    link, a file over ``PRECISION_STATE.limit`` (64 KiB: ten demotions are about 3 KB) or
    bytes that are not UTF-8)."""
    data = files.read_json(Path(path), PRECISION_STATE)  # UnusableStateFile: unusable
    if data is None:
        return None
    try:
        if data.get("version") != MEMORY_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {MEMORY_VERSION}")
        fields = {k: data[k] for k in PrecisionMemory.__dataclass_fields__ if k in data}
        fields["history"] = tuple(fields.get("history", ()))
        memory = PrecisionMemory(**fields)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"precision state file {str(path)!r} is unreadable: {exc}") from None
    if memory.demoted_to not in PRECISIONS:
        raise ValueError(
            f"precision state file {str(path)!r}: demoted_to={memory.demoted_to!r} is not "
            f"one of {', '.join(PRECISIONS)}"
        )
    return memory


def write_precision_memory(path: Path, memory: PrecisionMemory | None) -> None:
    """Write the state file atomically (see agent_folder.files.write_atomic); None deletes it."""
    path = Path(path)
    if memory is None:
        path.unlink(missing_ok=True)
        return
    files.write_json(path, PRECISION_STATE, memory.to_json())
