"""The precision guard: notice when a precision cannot train a model, roll back, demote.

``fit()`` runs the guard when ``FitOptions.guard`` is a :class:`GuardConfig`::

    result = fit(task, FitOptions(precision="fp16", steps=2000, guard=GuardConfig()))
    for d in result.demotions:   # training.reports.Demotion
        print(d.from_, "->", d.to, d.reason, "at step", d.step,
              "rolled back to", d.rollback_step)

Every ``check_interval`` steps the guard reads a handful of device counters in one host
read (overflowing steps, the scaler's ``unstable`` flag, the sum and count of finite
losses, non-finite losses) and tests its triggers. In a multi-rank process group the
counters are first combined over the ranks (one all-gather per check), so every rank
decides the same thing at the same check. When the check interval just ended
was spotless (no overflow, no non-finite loss, no divergence), it keeps a snapshot of
the trainer state, the data position and the task's extra state: the last good state,
taken before any trouble began. The snapshot stays on the GPU while it is small there
and goes to pinned host memory when it is not (decided once per run; the costs are in
:class:`SnapshotStore`, below). When a trigger fires, ``fit()`` rebuilds
the trainer in the next precision of the ladder, loads that snapshot and runs on to the
same target step.

This module is the runtime that watches a run and needs torch. What a run is guarded
with, :class:`GuardConfig` and the ladder, is in
:mod:`genesis_fp16_infrastructure.training.precision.guard_config`, and the per-agent
precision memory a daemon keeps (:class:`PrecisionMemory`) in ``precision_memory``. Both
are importable without torch; only :class:`GuardConfig` is re-exported here.

Where the guard keeps its last good state, and what keeping it costs: the guard copies
the trainer's state (weights, optimizer moments, scaler, RNG) and the
task's extra state at every spotless check, every ``check_interval`` steps (25 by
default), and loads it back on a demotion. A copy on the GPU costs the model and its
optimizer once more in device memory (12 bytes a parameter with fp32 AdamW: 151 MB for
the 12.6M-parameter world model) but little time; a copy on the host costs no device
memory but one device-to-host transfer per check. So :class:`SnapshotStore` decides once,
at the first snapshot of a run, and says why::

    store = SnapshotStore()
    store.save(trainer.state_dict())   # copies into buffers it keeps and reuses
    state = store.load()               # a fresh copy, safe to load into a trainer
    store.where, store.reason          # 'host', 'the state is 6.1 GiB, over 5% of ...'

- **on the device** while the state's CUDA tensors take at most :data:`DEVICE_SHARE`
  (5%) of the GPU's memory: a device-to-device copy, for the world model about 0.1 ms
  (151 MB read and written at ~3 TB/s; an estimate);
- **on the host** above that, in pinned buffers allocated at the first snapshot and
  written in place afterwards (no allocation per check): one transfer per check, about
  3-6 ms for 151 MB at 25-50 GB/s (PCIe 5; an estimate), which for a model that size
  would be some 15% of 25 captured 1 ms steps, and is a few percent of a large model's
  slower steps. The copies are queued without a host wait; ``load`` waits for them.
- on a CPU run the host is the device: a copy in memory, as before.

The buffers are reused: a ``save`` overwrites the previous snapshot in place, and
``load`` returns a copy (an optimizer's ``load_state_dict`` keeps tensors already on
its device as they are, so loading the buffers themselves would alias them).
"""

from __future__ import annotations

import copy
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from genesis_fp16_infrastructure.training import distributed

# The module too: its detect_capabilities is looked up on each call (a test's one patch).
from genesis_fp16_infrastructure.training.precision import decide as decide_module
from genesis_fp16_infrastructure.training.precision.decide import decide, next_precision
from genesis_fp16_infrastructure.training.precision.guard_config import GuardConfig
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.reports import Demotion
from genesis_fp16_infrastructure.training.step.cuda_graph import flatten_tensors
from genesis_fp16_infrastructure.training.step.trainer import Trainer

logger = logging.getLogger(__name__)

DEVICE_SHARE = 0.05
IN_HOST_MEMORY = "the run's tensors are in host memory: a copy there"  # no CUDA tensor


class SnapshotStore:
    """One snapshot of a state tree (dicts, lists, tuples of tensors and plain values)."""

    def __init__(self) -> None:
        self.where: str | None = None  # "device" or "host", decided by the first save
        self.reason = ""
        self.saved: Any = None  # the buffers themselves, overwritten by the next save: read only
        self._copied: torch.cuda.Event | None = None

    def save(self, state: Mapping[str, Any]) -> None:
        """Copy ``state`` into the store (queued on the current stream; no host wait)."""
        if self.where is None:
            self.where, self.reason = placement(state)  # one walk of the state's tensors
            # On a CPU run device and host are one memory: nothing to know (DEBUG).
            said = logger.info if self.reason != IN_HOST_MEMORY else logger.debug
            said("precision guard: snapshots on the %s (%s)", self.where, self.reason)
        self.saved = _copy_into(state, self.saved, self.where == "host")
        self._copied = None
        if self.where == "host":  # only CUDA state goes there, pinned: record when it lands
            self._copied = torch.cuda.Event()
            self._copied.record()

    def load(self) -> Any:
        """A fresh copy of the saved state, once every queued copy has landed."""
        if self.saved is None:
            raise RuntimeError("no snapshot saved")
        if self._copied is not None:
            self._copied.synchronize()
        return copy.deepcopy(self.saved)


def placement(state: Any, share: float | None = None) -> tuple[str, str]:
    """``("device" | "host", why)`` for a state tree (``share``: :data:`DEVICE_SHARE`)."""
    share = DEVICE_SHARE if share is None else share
    tensors = [t for t in flatten_tensors(state) if t.is_cuda]
    if not tensors:
        return "device", IN_HOST_MEMORY
    size = sum(t.numel() * t.element_size() for t in tensors)
    total = torch.cuda.get_device_properties(tensors[0].device).total_memory
    measure = f"the state is {_gib(size)}, {size / total:.1%} of the GPU's {_gib(total)}"
    if size <= share * total:
        return "device", f"{measure}: at most {share:.0%}, a device copy is the fast one"
    return "host", f"{measure}: over {share:.0%}, pinned host memory keeps the GPU's free"


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB"


def _copy_into(value: Any, previous: Any, to_host: bool) -> Any:
    """``value`` copied into ``previous``'s tensors where they match, else into new ones."""
    if isinstance(value, torch.Tensor):
        return _copy_tensor(value.detach(), previous, to_host)
    if isinstance(value, Mapping):
        kept: dict[Any, Any] = previous if isinstance(previous, dict) else {}
        copied = {k: _copy_into(v, kept.get(k), to_host) for k, v in value.items()}
        if not isinstance(value, OrderedDict):
            return copied
        # A module's state dict: an OrderedDict whose _metadata load_state_dict reads.
        ordered: Any = OrderedDict(copied)
        if hasattr(value, "_metadata"):
            ordered._metadata = copy.deepcopy(value._metadata)
        return ordered
    if isinstance(value, list | tuple):
        old: Sequence[Any] = previous if isinstance(previous, list | tuple) else ()
        parts = [
            _copy_into(v, old[i] if i < len(old) else None, to_host) for i, v in enumerate(value)
        ]
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*parts)
        return type(value)(parts)
    return copy.deepcopy(value)


def _copy_tensor(value: torch.Tensor, previous: Any, to_host: bool) -> torch.Tensor:
    device = torch.device("cpu") if to_host else value.device
    reusable = (
        isinstance(previous, torch.Tensor)
        and previous.shape == value.shape
        and previous.dtype == value.dtype
        and previous.device == device
        and previous.stride() == value.stride()
    )
    if reusable:
        target = previous
    else:
        pinned = to_host and value.is_cuda  # only pinned memory copies without a host wait
        target = torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device=device, pin_memory=pinned
        )
    target.copy_(value, non_blocking=target.is_pinned())
    return target


@dataclass(frozen=True)
class Trouble:
    """A trigger that fired: its ``reason`` (one of :data:`REASONS`), at ``step``, why."""

    reason: str
    step: int
    detail: str


@dataclass(frozen=True)
class Snapshot:
    """A good state to roll back to: the trainer's state dict, data position, extra state.

    ``PrecisionGuard.snapshot`` holds the store's buffers, which the next snapshot
    overwrites; ``PrecisionGuard.restore()`` returns a copy to load.
    """

    step: int
    trainer: dict[str, Any]
    epoch: int
    batch: int
    extra: dict[str, Any]


class Recorder(Protocol):
    """Told by the guard what its checks found: the flight recorder
    (:class:`~genesis_fp16_infrastructure.training.flight.recorder.FlightRecorder`)."""

    def after_check(self, guard: PrecisionGuard, trainer: Trainer) -> None: ...

    def before_demotion(self, guard: PrecisionGuard, trainer: Trainer) -> None: ...


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
        self.store = SnapshotStore()  # where the snapshot's tensors live, and why
        self.recorder: Recorder | None = None  # told after a check with dirty set, and demote()

    # ------------------------------------------------------------------ loss watching

    def watch_loss(
        self, loss_fn: Callable[[nn.Module, Any], torch.Tensor]
    ) -> Callable[[nn.Module, Any], torch.Tensor]:
        """``loss_fn`` that also counts finite and non-finite losses on the device (no sync)."""

        def watched(model: nn.Module, batch: Any) -> torch.Tensor:
            loss = loss_fn(model, batch)
            value = loss.detach().to(torch.float64).reshape(())
            finite = torch.isfinite(value)
            self._losses += torch.stack([torch.where(finite, value, 0.0), finite, ~finite])
            return loss

        return watched

    # ------------------------------------------------------------------ the run

    def start(self, trainer: Trainer, epoch: int, batch: int, snapshot: bool = True) -> None:
        """Begin watching ``trainer`` (a new run, or the run after a demotion).

        ``snapshot=False`` keeps the current snapshot (the state just rolled back to).
        """
        # The interval's losses on the run's device: the finite ones' sum and count, and
        # the non-finite ones'; each check reads and zeroes them.
        self._losses = torch.zeros(3, dtype=torch.float64, device=trainer.policy.device)
        self.pending: Trouble | None = None
        # Set by a check whose interval was not spotless (the flight recorder's cue):
        # steps and overflows since start(), non-finite losses in the interval.
        self.dirty: dict[str, float] | None = None
        self._precision = trainer.policy.name
        self._next = next_precision(
            self._precision, self.config, decide_module.detect_capabilities(trainer.policy.device)
        )
        self.start_step = trainer.step_count  # the run's start, or its rollback
        self._ema: float | None = None
        self._ema_updates = 0
        keep = max(self.config.nonfinite_window, self.config.overflow_window)
        self._history: deque[_Check] = deque(maxlen=keep // self.config.check_interval + 3)
        overflows, _, _, _, nonfinite = self._read(trainer)
        self._start_overflows = overflows
        self._history.append(_Check(trainer.step_count, overflows, nonfinite))
        if self._next is None:
            # The last rung has nowhere to go, but a run whose steps are all skipped learns
            # nothing: its skip-rate trigger still fires, and fit() then ends it as failed.
            logger.info(
                "precision guard: %s has no next precision; a persistent non-finite run fails",
                self._precision,
            )
        elif snapshot:
            self._take_snapshot(trainer, epoch, batch)

    def after_step(self, trainer: Trainer, epoch: int, batch: int) -> bool:
        """At a boundary a run can roll back to (each step, or an iteration's end): check
        when a check interval has ended since the last check; True when a trigger fired
        (see ``pending``). Called each step, it checks every ``check_interval`` steps."""
        interval = self.config.check_interval
        if trainer.step_count // interval <= self._history[-1].step // interval:
            return False
        return self._check(trainer, epoch, batch)

    def failure(self) -> dict[str, str] | None:
        """After a trigger fired: the run's failure (``FitResult.failure``: ``reason`` and
        ``detail``) when its precision is the ladder's last rung, logged as an error; None
        where a demotion answers the trigger. At the last rung a trigger fires only for a
        run whose steps are persistently skipped: it cannot learn, and ends there."""
        trouble = self.pending
        if self._next is not None or trouble is None:
            return None
        logger.error(
            "precision guard: %s cannot train this run: %s", self._precision, trouble.detail
        )
        return {"reason": trouble.reason, "detail": trouble.detail}

    def final_check(self, trainer: Trainer, epoch: int, batch: int) -> Trouble | None:
        """The pending trouble, or a last check of the steps since the previous one."""
        fresh_steps = trainer.step_count > self._history[-1].step
        if self.pending is None and fresh_steps:
            self._check(trainer, epoch, batch)
        return self.pending

    def _read(self, trainer: Trainer) -> list[float]:
        parts = [
            # Every skipped step, in every precision: fp16's overflows and the steps
            # bf16 and fp32 skip for a gradient that was not finite, one count.
            trainer.stats.skipped_steps_tensor(),
            trainer.scaler.unstable_tensor(),
        ]
        device = self._losses.device
        stacked = torch.stack([p.to(device, torch.float64) for p in parts])
        stacked = torch.cat([stacked, self._losses])
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
        self._losses.zero_()
        if overflows != previous.overflows or nonfinite > 0:
            since = overflows - self._start_overflows
            self.dirty = {
                "steps": step - self.start_step,
                "overflows": since,
                "nonfinite": nonfinite,
            }
        mean = loss_sum / loss_count if loss_count else None
        if self._next is None:
            # The last rung: only a run that cannot learn fails, i.e. one whose steps are
            # persistently skipped (a NaN loss skips its step too); a few NaN losses in a
            # window, which a demotion would answer on another rung, do not end it.
            trouble = self._overflow_trouble(now)
        else:
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
        if spotless and self._next is not None:  # the last rung never rolls back
            self._take_snapshot(trainer, epoch, batch)
        if self.recorder is not None and self.dirty is not None:
            self.recorder.after_check(self, trainer)  # an interval that was not spotless
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
        earliest = self.start_step + self.config.overflow_warmup
        candidates = [c for c in self._history if earliest <= c.step <= now.step - window]
        if not candidates:
            return None
        ref = candidates[-1]
        rate = (now.overflows - ref.overflows) / (now.step - ref.step)
        if rate <= limit:
            return None
        detail = (
            f"{rate:.0%} of steps {ref.step}..{now.step} were skipped for gradients that "
            f"overflowed or were not finite (limit {limit:.0%})"
        )
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
        # Copied into the store's buffers: the live state dicts alias the parameters and
        # the optimizer's moments, which the next steps change in place.
        self.store.save({"trainer": trainer.state_dict(), "extra": dict(self._extra_state())})
        saved = self.store.saved
        self.snapshot = Snapshot(trainer.step_count, saved["trainer"], epoch, batch, saved["extra"])

    # ------------------------------------------------------------------ demotion

    def demote(self, trainer: Trainer, scaler: ScalerConfig) -> tuple[PrecisionPolicy, Demotion]:
        """The next precision's policy and the demotion record: :func:`decide` with the
        ladder's next rung as the run's floor, its policy on the run's loss-scaler config
        ``scaler``. The recorder, if any, first bundles the step that brought it, from the
        troubled ``trainer``."""
        trouble, snapshot, target = self.pending, self.snapshot, self._next
        if trouble is None or snapshot is None or target is None:
            raise RuntimeError("demote() needs a fired trigger, a snapshot and a next precision")
        if self.recorder is not None:  # before anything changes
            self.recorder.before_demotion(self, trainer)
        policy = trainer.policy
        reason = (
            f"precision guard demoted {policy.name} -> {target} at step {trouble.step} "
            f"({trouble.reason}: {trouble.detail}), rolled back to step {snapshot.step}; "
            f"first: {policy.resolved.reason}"
        )
        request = PrecisionRequest(policy.resolved.requested, floor=target, floor_reason=reason)
        new = PrecisionPolicy.from_decision(decide(request, policy.device), policy.device, scaler)
        record = Demotion(
            from_=policy.name,
            to=new.name,
            reason=trouble.reason,
            step=trouble.step,
            rollback_step=snapshot.step,
            detail=trouble.detail,
        )
        logger.warning("%s", new.resolved.reason)
        return new, record

    def restore(self) -> Snapshot:
        """A fresh copy of the snapshot, safe to load into a trainer."""
        if self.snapshot is None:
            raise RuntimeError("no snapshot to roll back to")
        return replace(self.snapshot, **self.store.load())


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
