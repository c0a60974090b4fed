"""A trainer's statistics, kept on the device: what each step adds, and reading them back.

:class:`~genesis_fp16_infrastructure.training.step.trainer.Trainer` owns one
:class:`StepStats` and rebuilds it when it loads a checkpoint. A step adds its row with a
few ops and no host read; only :meth:`StepStats.read_counts` and
:meth:`StepStats.final_train_loss` read the device::

    stats = StepStats(torch.device("cpu"), overflow_window=100, overflows_before=torch.zeros(()))
    row = stats.loss_row(loss)                       # (L, 1, L, 1, 1, 0), or zeros
    stats.record(row, found_inf, overflow, norm, step=0, captured=False)
    skipped, nonfinite, window_sum, loss_sum, count = stats.read_counts(1, overflows)
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

# The layout of StepStats._stats; the interval pair comes first so that a reset is one op.
# The block pair sums the losses of the current FINAL_LOSS_STEPS-step block of the run.
# What a step with a finite loss L adds: (L, 1, L, 1, 1, f); with a non-finite loss,
# (0, 0, 0, 0, 0, f). f is 1.0 when a gradient was not finite where no loss is scaled
# (the step was skipped; fp16 counts its overflows in the scaler instead): the row's
# last entry is the zeroed flag that check writes into, so zeroing and counting it cost
# no op of their own.
_STATS = (
    "interval_loss",
    "interval_count",
    "block_loss",
    "block_count",
    "finite_losses",
    "nonfinite_grad_steps",
)
_BLOCK = slice(2, 4)
_FINITE_ROW = (0.0, 1.0, 0.0, 1.0, 1.0, 0.0)  # + L * _LOSS_AT
_LOSS_AT = (1.0, 0.0, 1.0, 0.0, 0.0, 0.0)
# A run's final train loss is the mean over its last full block of this many steps and
# the steps after it, whatever its log interval: a terminal's progress bar logs every 10
# steps and the daemon every LOG_INTERVAL, and the run they report must be the same.
FINAL_LOSS_STEPS = 50


class StepStats:
    """Loss sums, counts, the overflow window and the last gradient norm of a run's steps,
    as tensors on ``device``; samples, losses seen and the wall clock on the host.

    ``overflows_before`` is a copy of the scaler's overflow count when counting starts:
    the steps skipped since are the scaler's count less it, plus the row's flags.
    """

    def __init__(
        self, device: torch.device, overflow_window: int, overflows_before: torch.Tensor
    ) -> None:
        self.overflow_window = overflow_window
        # One float64 vector (exact counts up to 2**53), so a step updates every counter
        # with one add_ instead of a tiny op per counter: on a 1-2 ms step each op shows.
        self._stats = torch.zeros(len(_STATS), dtype=torch.float64, device=device)
        self._previous_block = torch.zeros(2, dtype=torch.float64, device=device)
        # float32, as the loss is: the row's product needs no cast (and add_ promotes).
        self._finite_row = torch.tensor(_FINITE_ROW, device=device)
        self._loss_at = torch.tensor(_LOSS_AT, device=device)
        # The step's row, rewritten in place each step; its views are made once (a view
        # made per step is one more op). The flag view is what the gradient check fills.
        self._row = torch.zeros(len(_STATS), device=device)
        self.row_finite = self._row[_STATS.index("finite_losses")]
        self.row_flag = self._row[_STATS.index("nonfinite_grad_steps")]
        # Counted on the host, so that the device needs no row of its own for them: the
        # non-finite losses are these less the finite ones, the skipped steps are the
        # scaler's overflows less those before this trainer (or this checkpoint) began,
        # plus the row's flags (the steps skipped for a gradient that was not finite
        # where no loss is scaled).
        self.losses_seen = 0
        self._overflows_before = overflows_before
        self.grad_norm = torch.full((), math.nan, device=device)
        self._window = torch.zeros(overflow_window, device=device)
        # The window's slots as views, made once: an eager step writes one with one copy_.
        self._window_slots = self._window.unbind()
        # A captured step cannot use a Python index (it would be read once, at capture,
        # and never move again): it writes at a slot kept on the device.
        self._slot = torch.zeros((), dtype=torch.int64, device=device)
        self.last_train_loss = math.nan
        self.samples = 0
        self.started: float | None = None

    # ------------------------------------------------------------------ what a step adds

    def loss_row(self, loss: torch.Tensor) -> torch.Tensor:
        """(L, 1, L, 1, 1, 0) for a finite loss L, zeros otherwise, in two ops, into
        ``_row``: a non-finite L makes every entry of the product non-finite (inf * 0 is
        NaN), and nan_to_num zeroes them all."""
        torch.addcmul(self._finite_row, loss, self._loss_at, out=self._row)
        return self._row.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)

    def record(
        self,
        loss_row: torch.Tensor,
        found_inf: torch.Tensor,
        overflow: torch.Tensor | None,
        norm: torch.Tensor | None,
        step: int,
        captured: bool,
    ) -> None:
        """Add the step's row, its overflow flag (``overflow``: the policy's verdict, None
        where no step can overflow) and the norm of the last step taken."""
        self._stats.add_(loss_row)
        if overflow is not None:  # found_inf is 0.0 or 1.0: the window takes it as it is
            if not captured:
                self._window_slots[step % self.overflow_window].copy_(found_inf)
            else:
                self._window.index_put_((self._slot,), found_inf)
                torch.remainder(self._slot + 1, self.overflow_window, out=self._slot)
            if norm is not None:  # the norm of the last step taken
                self._keep_norm(torch.where(overflow, self.grad_norm, norm.float()), captured)
        elif norm is not None:  # no step can overflow: the window stays zero
            self._keep_norm(norm.float(), captured)

    def _keep_norm(self, norm: torch.Tensor, captured: bool) -> None:
        if not captured:
            self.grad_norm = norm  # a fresh tensor each step (under FSDP2, a DTensor)
        else:  # a replayed graph writes where the captured step wrote, and reads it back
            self.grad_norm.copy_(norm)

    def end_step(self, step: int, micro_batches: int, num_samples: int) -> None:
        """Count a finished step (``step``: the steps done now) on the host; at the end of
        each FINAL_LOSS_STEPS-step block, start the next (device ops, no host read)."""
        self.samples += num_samples
        self.losses_seen += micro_batches
        if step % FINAL_LOSS_STEPS == 0:
            self._previous_block.copy_(self._stats[_BLOCK])
            self._stats[_BLOCK].zero_()

    # ------------------------------------------------------------------ reading the device

    def reset_interval(self) -> None:
        """Start a new log interval (one op)."""
        self._stats[:2].zero_()

    def wall_seconds(self) -> float:
        """Seconds since the first step (0.0 before it)."""
        return time.perf_counter() - self.started if self.started is not None else 0.0

    def skipped_steps_tensor(self, overflows: torch.Tensor) -> torch.Tensor:
        """The steps skipped so far, on the device (no sync): ``overflows`` (the scaler's
        count) less those before, plus the steps whose gradients were not finite where no
        loss is scaled; float64."""
        skipped = overflows - self._overflows_before
        return skipped.to(torch.float64) + self._stats[_STATS.index("nonfinite_grad_steps")]

    def read_counts(
        self, recent: int, overflows: torch.Tensor
    ) -> tuple[int, int, float, float, float]:
        """Skipped steps, non-finite losses, overflows in the last ``recent`` steps, and the
        interval's loss sum and count, in one host read. The norm is read apart: under
        FSDP2 it is a DTensor, which cannot be concatenated with plain tensors."""
        skipped = self.skipped_steps_tensor(overflows)
        window = self._window[:recent].sum().double()
        parts = (skipped.reshape(1), window.reshape(1), self._stats)
        values: list[float] = torch.cat(parts).tolist()
        finite = values[2 + _STATS.index("finite_losses")]
        return (
            int(values[0]),
            self.losses_seen - int(finite),
            values[1],
            values[2 + _STATS.index("interval_loss")],
            values[2 + _STATS.index("interval_count")],
        )

    def final_train_loss(self) -> float:
        """The mean finite step loss of the last full block and the steps since (NaN
        before any finite loss). Reads the device: a host sync."""
        loss, count = (self._stats[_BLOCK] + self._previous_block).tolist()
        return loss / count if count else math.nan

    # ------------------------------------------------------------------ copies and checkpoints

    def snapshot(self) -> dict[str, Any]:
        """Copies of the statistics, for :meth:`restore`."""
        tensors = ("_stats", "_previous_block", "_window", "_slot", "_overflows_before")
        saved: dict[str, Any] = {name: getattr(self, name).clone() for name in tensors}
        saved["grad_norm"] = self.grad_norm.detach().clone()
        for name in ("losses_seen", "samples", "started", "last_train_loss"):
            saved[name] = getattr(self, name)
        return saved

    def restore(self, saved: dict[str, Any]) -> None:
        """Put back a :meth:`snapshot`."""
        for name, value in saved.items():
            if isinstance(value, torch.Tensor) and name != "grad_norm":
                getattr(self, name).copy_(value)  # in place: _window's slots are views
            else:
                setattr(self, name, value)

    def state(self, overflows: torch.Tensor) -> dict[str, Any]:
        """The checkpoint's statistics (``keys.STATS``). Reads the device: a host sync."""
        skipped, nonfinite, *_ = self.read_counts(0, overflows)
        return {
            "skipped_steps": skipped,
            "nonfinite_losses": nonfinite,
            "grad_norm": float(self.grad_norm.item()),
            "overflow_window": self._window.cpu().clone(),
        }

    def load_state(self, stats: dict[str, Any], step: int) -> None:
        """Continue the counts of a :meth:`state` saved at ``step``; fresh statistics only."""
        self._overflows_before -= int(stats.get("skipped_steps", 0))
        self.losses_seen = int(stats.get("nonfinite_losses", 0))  # and none finite yet
        self.grad_norm.fill_(float(stats.get("grad_norm", math.nan)))
        window = stats.get("overflow_window")
        if window is not None and window.numel() == self._window.numel():
            self._window.copy_(window.to(self._window.device))
        self._slot.fill_(step % self.overflow_window)
