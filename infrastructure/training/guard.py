"""The precision guard: notice when a precision cannot train a model, roll back, demote.

``fit()`` runs the guard when ``FitOptions.guard`` is a :class:`GuardConfig`::

    result = fit(task, FitOptions(precision="fp16", steps=2000, guard=GuardConfig()))
    for d in result.demotions:   # plain dicts
        print(d["from"], "->", d["to"], d["reason"], "at step", d["step"],
              "rolled back to", d["rollback_step"])

Every ``check_interval`` steps the guard reads a handful of device counters in one host
read (overflowing steps, the scaler's ``unstable`` flag, the sum and count of finite
losses, non-finite losses) and tests its triggers. In a multi-rank process group the
counters are first combined over the ranks (one all-gather per check), so every rank
decides the same thing at the same check. When the check interval just ended
was spotless (no overflow, no non-finite loss, no divergence), it keeps an in-memory
snapshot of the trainer state, the data position and the task's extra state: the last
good state, taken before any trouble began. When a trigger fires, ``fit()`` rebuilds
the trainer in the next precision of the ladder, loads that snapshot and runs on to the
same target step.

The precision memory (:class:`PrecisionMemory`) is the small JSON file a daemon keeps
per agent so that a restarted daemon does not go back to the precision that failed.
"""

from __future__ import annotations

import copy
import json
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from infrastructure.atomic import write_json_atomic
from infrastructure.training import distributed
from infrastructure.training.precision import (
    PRECISIONS,
    DeviceCapabilities,
    PrecisionPolicy,
    detect_capabilities,
)
from infrastructure.training.trainer import Trainer

logger = logging.getLogger(__name__)

# The fixed set of reasons a demotion can have (a bounded metric label).
REASONS: tuple[str, ...] = ("scaler_unstable", "nonfinite_loss", "overflow_rate", "divergence")
DEFAULT_LADDER: tuple[str, ...] = ("fp16", "bf16", "fp32")
# From least to most numerically robust; the precision memory is a floor on this order.
ROBUSTNESS: tuple[str, ...] = ("fp16", "bf16", "fp32")
MEMORY_VERSION = 1


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

    ladder: tuple[str, ...] = DEFAULT_LADDER
    bf16_needs_native: bool = True
    check_interval: int = 25
    on_unstable: bool = True
    nonfinite_limit: int | None = 3
    nonfinite_window: int = 100
    overflow_rate_limit: float | None = 0.5
    overflow_window: int = 50
    overflow_warmup: int = 25
    divergence_factor: float | None = 10.0
    divergence_ema_decay: float = 0.9
    divergence_warmup: int = 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "ladder", tuple(self.ladder))
        unknown = [p for p in self.ladder if p not in PRECISIONS]
        if unknown or not self.ladder or len(set(self.ladder)) != len(self.ladder):
            raise ValueError(
                f"guard ladder={list(self.ladder)!r}: needs distinct precisions from "
                f"{', '.join(PRECISIONS)}, e.g. fp16,bf16,fp32"
            )
        checks = [
            (self.check_interval >= 1, f"check_interval={self.check_interval!r} must be >= 1"),
            (self.nonfinite_limit is None or self.nonfinite_limit >= 1, "nonfinite_limit >= 1"),
            (self.nonfinite_window >= 1, f"nonfinite_window={self.nonfinite_window!r} >= 1"),
            (self.overflow_window >= 1, f"overflow_window={self.overflow_window!r} >= 1"),
            (self.overflow_warmup >= 0, f"overflow_warmup={self.overflow_warmup!r} >= 0"),
            (self.divergence_warmup >= 1, f"divergence_warmup={self.divergence_warmup!r} >= 1"),
            (0.0 <= self.divergence_ema_decay < 1.0, "divergence_ema_decay must be in [0, 1)"),
        ]
        rate = self.overflow_rate_limit
        checks.append((rate is None or 0.0 < rate < 1.0, f"overflow_rate_limit={rate!r} in (0, 1)"))
        factor = self.divergence_factor
        checks.append((factor is None or factor > 1.0, f"divergence_factor={factor!r} > 1"))
        for ok, message in checks:
            if not ok:
                raise ValueError(f"invalid precision-guard setting: {message}")


def next_precision(
    current: str, config: GuardConfig, capabilities: DeviceCapabilities
) -> str | None:
    """The precision after ``current`` on the ladder that the device runs, or None.

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


@dataclass(frozen=True)
class Trouble:
    """A trigger that fired: its ``reason`` (one of :data:`REASONS`), at ``step``, why."""

    reason: str
    step: int
    detail: str


@dataclass(frozen=True)
class Snapshot:
    """A good state to roll back to: the trainer's state dict, data position, extra state."""

    step: int
    trainer: dict[str, Any]
    epoch: int
    batch: int
    extra: dict[str, Any]


@dataclass
class _Check:
    step: int
    overflows: float
    nonfinite: float


class PrecisionGuard:
    """Watches one run through device counters and decides when to demote.

    ``fit()`` drives it: :meth:`watch_loss` wraps the task's loss, :meth:`start` takes
    the first snapshot, :meth:`after_step` checks every ``check_interval`` steps,
    :meth:`final_check` checks once more at the end, and :meth:`demote` builds the next
    precision's policy and the demotion record.
    """

    def __init__(
        self, config: GuardConfig, extra_state: Callable[[], Mapping[str, Any]] = dict
    ) -> None:
        self.config = config
        self._extra_state = extra_state
        self.snapshot: Snapshot | None = None
        self.pending: Trouble | None = None
        self._exhausted_warned = False
        self._device = torch.device("cpu")
        self._reset_counters()

    # ------------------------------------------------------------------ loss watching

    def _reset_counters(self) -> None:
        def zero() -> torch.Tensor:
            return torch.zeros((), dtype=torch.float64, device=self._device)

        self._loss_sum, self._loss_count, self._nonfinite = zero(), zero(), zero()

    def watch_loss(
        self, loss_fn: Callable[[nn.Module, Any], torch.Tensor]
    ) -> Callable[[nn.Module, Any], torch.Tensor]:
        """``loss_fn`` that also counts finite and non-finite losses on the device (no sync)."""

        def watched(model: nn.Module, batch: Any) -> torch.Tensor:
            loss = loss_fn(model, batch)
            value = loss.detach().to(torch.float64).reshape(())
            finite = torch.isfinite(value)
            self._loss_sum += torch.where(finite, value, 0.0)
            self._loss_count += finite.to(torch.float64)
            self._nonfinite += (~finite).to(torch.float64)
            return loss

        return watched

    # ------------------------------------------------------------------ the run

    def start(self, trainer: Trainer, epoch: int, batch: int, snapshot: bool = True) -> None:
        """Begin watching ``trainer`` (a new run, or the run after a demotion).

        ``snapshot=False`` keeps the current snapshot (the state just rolled back to).
        """
        self._device = trainer.policy.device
        self._reset_counters()
        self.pending = None
        self._precision = trainer.policy.name
        self._next = next_precision(
            self._precision, self.config, detect_capabilities(trainer.policy.device)
        )
        self._start_step = trainer.step_count
        self._ema: float | None = None
        self._ema_updates = 0
        keep = max(self.config.nonfinite_window, self.config.overflow_window)
        self._history: deque[_Check] = deque(maxlen=keep // self.config.check_interval + 3)
        overflows, _, _, _, nonfinite = self._read(trainer)
        self._history.append(_Check(trainer.step_count, overflows, nonfinite))
        if self._next is None:
            logger.info("precision guard: %s has no next precision; not guarded", self._precision)
        elif snapshot:
            self._take_snapshot(trainer, epoch, batch)

    def after_step(self, trainer: Trainer, epoch: int, batch: int) -> bool:
        """Check when a check interval ends; True when a trigger fired (see ``pending``)."""
        if self._next is None or trainer.step_count % self.config.check_interval:
            return False
        return self._check(trainer, epoch, batch)

    def final_check(self, trainer: Trainer, epoch: int, batch: int) -> Trouble | None:
        """The pending trouble, or a last check of the steps since the previous one."""
        fresh_steps = self._next is not None and trainer.step_count > self._history[-1].step
        if self.pending is None and fresh_steps:
            self._check(trainer, epoch, batch)
        return self.pending

    def _read(self, trainer: Trainer) -> list[float]:
        scaler = trainer.scaler
        parts = [
            scaler.overflow_count_tensor(),
            scaler.unstable_tensor(),
            self._loss_sum,
            self._loss_count,
            self._nonfinite,
        ]
        stacked = torch.stack([p.to(self._device, torch.float64) for p in parts])
        if distributed.is_distributed():
            stacked = _agree(stacked)
        # The one host read of a check: five scalars at once.
        values: list[float] = stacked.tolist()
        return values

    def _check(self, trainer: Trainer, epoch: int, batch: int) -> bool:
        overflows, unstable, loss_sum, loss_count, nonfinite = self._read(trainer)
        step = trainer.step_count
        previous = self._history[-1]
        now = _Check(step, overflows, previous.nonfinite + nonfinite)
        self._history.append(now)
        self._loss_sum.zero_()
        self._loss_count.zero_()
        self._nonfinite.zero_()
        mean = loss_sum / loss_count if loss_count else None
        trouble = (
            self._unstable(unstable, step)
            or self._nonfinite_trouble(now)
            or self._overflow_trouble(now)
            or self._divergence(mean, step)
        )
        if trouble is not None:
            self.pending = trouble
            logger.warning(
                "precision guard: %s at step %d in %s: %s",
                trouble.reason,
                step,
                self._precision,
                trouble.detail,
            )
            return True
        if mean is not None:
            self._update_ema(mean)
        spotless = overflows == previous.overflows and nonfinite == 0 and not unstable
        if spotless:
            self._take_snapshot(trainer, epoch, batch)
        return False

    def _unstable(self, unstable: float, step: int) -> Trouble | None:
        if not (self.config.on_unstable and unstable):
            return None
        scale = "the loss scale sits at its floor and keeps overflowing"
        return Trouble("scaler_unstable", step, scale)

    def _nonfinite_trouble(self, now: _Check) -> Trouble | None:
        limit, window = self.config.nonfinite_limit, self.config.nonfinite_window
        if limit is None:
            return None
        ref = next(c for c in self._history if c.step >= now.step - window)
        if ref is now:  # the window holds only this check: count from the one before
            ref = self._history[-2]
        count = now.nonfinite - ref.nonfinite
        if count < limit:
            return None
        detail = f"{count:.0f} non-finite losses in steps {ref.step}..{now.step} (limit {limit})"
        return Trouble("nonfinite_loss", now.step, detail)

    def _overflow_trouble(self, now: _Check) -> Trouble | None:
        limit, window = self.config.overflow_rate_limit, self.config.overflow_window
        if limit is None:
            return None
        earliest = self._start_step + self.config.overflow_warmup
        candidates = [c for c in self._history if earliest <= c.step <= now.step - window]
        if not candidates:
            return None
        ref = candidates[-1]
        rate = (now.overflows - ref.overflows) / (now.step - ref.step)
        if rate <= limit:
            return None
        detail = f"{rate:.0%} of steps {ref.step}..{now.step} overflowed (limit {limit:.0%})"
        return Trouble("overflow_rate", now.step, detail)

    def _divergence(self, mean: float | None, step: int) -> Trouble | None:
        factor = self.config.divergence_factor
        if factor is None or mean is None or self._ema is None:
            return None
        if self._ema_updates < self.config.divergence_warmup or mean <= factor * self._ema:
            return None
        detail = f"mean loss {mean:.6g} > {factor:g} x its moving average {self._ema:.6g}"
        return Trouble("divergence", step, detail)

    def _update_ema(self, mean: float) -> None:
        decay = self.config.divergence_ema_decay
        self._ema = mean if self._ema is None else decay * self._ema + (1.0 - decay) * mean
        self._ema_updates += 1

    def _take_snapshot(self, trainer: Trainer, epoch: int, batch: int) -> None:
        # A deep copy: the live state dicts alias the parameters and optimizer buffers.
        state = copy.deepcopy(trainer.state_dict())
        extra = copy.deepcopy(dict(self._extra_state()))
        self.snapshot = Snapshot(trainer.step_count, state, epoch, batch, extra)

    # ------------------------------------------------------------------ demotion

    def demote(
        self, policy: PrecisionPolicy, make_policy: Callable[[str], PrecisionPolicy]
    ) -> tuple[PrecisionPolicy, dict[str, Any]]:
        """The next precision's policy (``make_policy(name)``) and the demotion record."""
        trouble, snapshot, target = self.pending, self.snapshot, self._next
        if trouble is None or snapshot is None or target is None:
            raise RuntimeError("demote() needs a fired trigger, a snapshot and a next precision")
        new = make_policy(target)
        reason = (
            f"precision guard demoted {policy.name} -> {target} at step {trouble.step} "
            f"({trouble.reason}: {trouble.detail}), rolled back to step {snapshot.step}; "
            f"first: {policy.resolved.reason}"
        )
        resolved = replace(new.resolved, requested=policy.resolved.requested, reason=reason)
        record = {
            "from": policy.name,
            "to": target,
            "reason": trouble.reason,
            "step": trouble.step,
            "rollback_step": snapshot.step,
            "detail": trouble.detail,
        }
        logger.warning("%s", reason)
        return replace(new, resolved=resolved), record

    def restore(self) -> Snapshot:
        """A fresh deep copy of the snapshot, safe to load into a trainer."""
        if self.snapshot is None:
            raise RuntimeError("no snapshot to roll back to")
        return copy.deepcopy(self.snapshot)


def _agree(counters: torch.Tensor) -> torch.Tensor:
    """The five check counters combined over every rank, identical on each (collective).

    Overflows, the unstable flag and non-finite losses take the MAX over ranks (the
    scaler's two already agree; a NaN seen by one rank counts as it would in one
    process), the finite-loss sum and count the SUM, so the interval's mean loss is the
    mean over every rank's micro-batches. Every rank then makes the same decision at the
    same check: demotes to the same precision and rolls back to the same snapshot.
    One all-gather of five scalars per check.
    """
    sent = counters.to(distributed.collective_device())
    gathered = [torch.empty_like(sent) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, sent)
    table = torch.stack(gathered).to(counters.device)
    peak, total = table.max(dim=0).values, table.sum(dim=0)
    return torch.cat([peak[:2], total[2:4], peak[4:]])


def checkpoints_after(files: Sequence[Path], step_path: Path) -> list[Path]:
    """The checkpoint files whose names sort after ``step_path`` (later steps)."""
    return [f for f in files if f.name > step_path.name]


# ---------------------------------------------------------------------- precision memory


@dataclass(frozen=True)
class PrecisionMemory:
    """What a daemon remembers about one agent's demotions (the precision state file).

    ``demoted_to`` is a floor: later runs of the agent train in ``demoted_to`` whenever
    they would run in a less robust precision (fp16 < bf16 < fp32). ``clean_runs``
    counts runs since that finished without a demotion (for optional promotion).
    """

    demoted_from: str
    demoted_to: str
    reason: str
    step: int
    rollback_step: int
    at: str
    clean_runs: int = 0
    history: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)

    def applies_to(self, precision: str) -> bool:
        """True when ``precision`` is less robust than the remembered floor."""
        if precision not in ROBUSTNESS or self.demoted_to not in ROBUSTNESS:
            return False
        return ROBUSTNESS.index(precision) < ROBUSTNESS.index(self.demoted_to)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["history"] = [dict(h) for h in self.history]
        return {"version": MEMORY_VERSION, **out}


def remember_demotions(
    previous: PrecisionMemory | None, demotions: Sequence[Mapping[str, Any]], keep: int = 10
) -> PrecisionMemory | None:
    """The memory after a run: the last demotion becomes the floor; none counts a clean run."""
    if not demotions:
        if previous is None:
            return None
        return replace(previous, clean_runs=previous.clean_runs + 1)
    last = demotions[-1]
    now = datetime.now(UTC).isoformat(timespec="seconds")
    history = (*(previous.history if previous else ()), *({**d, "at": now} for d in demotions))
    return PrecisionMemory(
        demoted_from=str(demotions[0]["from"]) if previous is None else previous.demoted_from,
        demoted_to=str(last["to"]),
        reason=str(last["reason"]),
        step=int(last["step"]),
        rollback_step=int(last["rollback_step"]),
        at=now,
        clean_runs=0,
        history=history[-keep:],
    )


def read_precision_memory(path: Path) -> PrecisionMemory | None:
    """Load the state file; None when there is none. A broken file raises ValueError."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
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
    """Write the state file atomically (see infrastructure.atomic); None deletes it."""
    path = Path(path)
    if memory is None:
        path.unlink(missing_ok=True)
        return
    write_json_atomic(path, memory.to_json())
