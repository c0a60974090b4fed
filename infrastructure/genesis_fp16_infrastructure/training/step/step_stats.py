"""A run's step statistics on the device (:class:`StepStats`): the loss sums of the log
interval and of the run's last blocks, the finite losses and the steps skipped, the
overflow window and the last gradient norm, added to by each step in a few ops with no
host read, read back (one host read) only when asked, copied for a guard's snapshot and
kept in a checkpoint. The trainer (``step.trainer``) owns one.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from genesis_fp16_infrastructure.training.precision.loss_scaler import LossScaler

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

    The steps skipped are ``scaler``'s overflows since counting started, plus the row's
    flags: built after a scaler's state is loaded, since its earlier overflows are not
    these statistics' (nor this checkpoint's).
    """

    def __init__(self, device: torch.device, overflow_window: int, scaler: LossScaler) -> None:
        self.overflow_window = overflow_window
        self._scaler = scaler
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
        self._overflows_before = scaler.overflow_count_tensor().clone()
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
        if norm is None:
            return
        kept = norm.float()
        if overflow is not None:  # the norm of the last step taken, not of a skipped one
            kept = torch.where(overflow, self.grad_norm, kept)
        if not captured:
            self.grad_norm = kept  # a fresh tensor each step (under FSDP2, a DTensor)
        else:  # a replayed graph writes where the captured step wrote, and reads it back
            self.grad_norm.copy_(kept)

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

    def skipped_steps_tensor(self) -> torch.Tensor:
        """The steps skipped so far, on the device (no sync), in every precision: the
        scaler's overflows (fp16) plus the steps whose gradients were not finite where no
        loss is scaled (bf16, fp32). The one count a guard watches; float64."""
        skipped = self._scaler.overflow_count_tensor() - self._overflows_before
        return skipped.to(torch.float64) + self._stats[_STATS.index("nonfinite_grad_steps")]

    def read_counts(self, recent: int) -> tuple[int, int, float, float, float]:
        """Skipped steps, non-finite losses, overflows in the last ``recent`` steps, and the
        interval's loss sum and count, in one host read. The norm is read apart: under
        FSDP2 it is a DTensor, which cannot be concatenated with plain tensors."""
        skipped = self.skipped_steps_tensor()
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
        """The mean finite step loss over the run's last full block of FINAL_LOSS_STEPS
        steps and the steps since (NaN before any finite loss). Unlike ``train_loss`` of a
        summary it does not depend on the log interval. Reads the device: a host sync.

        A resumed run counts from its first step: the blocks are not checkpointed.
        """
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

    def state(self) -> dict[str, Any]:
        """The checkpoint's statistics (``keys.STATS``). Reads the device: a host sync."""
        skipped, nonfinite, *_ = self.read_counts(0)
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
