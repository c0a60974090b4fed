"""How steady a measured ``auto``'s rows are, alone and beside busy processes.

Runs the calibration ``auto`` runs (``training.run.calibration.calibrate``, no cache) on a
small MLP several times, first as the machine is, then with ``--busy`` processes spinning
beside it, and prints each row's p90/p10 step-time ratio (its spread) and how many
calibrations ``LOAD_BOUND`` calls taken under load, i.e. not reused::

    python benchmarks/auto_spread.py --repeats 10 --busy 2

Only the precisions this host runs natively are timed (fp32 always).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from genesis_fp16.plugin_api import PrecisionRequest
from genesis_fp16_infrastructure.training import TrainerConfig
from genesis_fp16_infrastructure.training.reports import LOAD_BOUND, under_load
from genesis_fp16_infrastructure.training.run import calibration as cal


class _Mlp:
    """The calibration's view of a task (a ``StepTask``): an MLP on fixed random batches."""

    def __init__(self, width: int) -> None:
        self.width = width

    def build_model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        w = self.width
        return torch.nn.Sequential(torch.nn.Linear(64, w), torch.nn.GELU(), torch.nn.Linear(w, 1))

    def build_optimizers(self, model: torch.nn.Module) -> list[torch.optim.Optimizer]:
        return [torch.optim.AdamW(model.parameters())]

    def build_schedulers(self, optimizers: object) -> tuple[()]:
        return ()

    def train_batches(self, epoch: int, seed: int) -> list[tuple[tuple[torch.Tensor, ...], int]]:
        g = torch.Generator().manual_seed(seed)
        return [((torch.randn(256, 64, generator=g), torch.randn(256, 1, generator=g)), 256)] * 4

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return torch.nn.functional.mse_loss(model(batch[0]).float(), batch[1])


def _spin() -> None:
    while True:
        pass


@contextmanager
def _busy(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU while the block runs."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(count)]
    for process in spinners:
        process.start()
    try:
        yield
    finally:
        for process in spinners:
            process.terminate()
            process.join()


def _measure(task: Any, repeats: int) -> tuple[dict[str, list[float]], int]:
    """Each row's spread per calibration, and how many calibrations were under load."""
    spreads: dict[str, list[float]] = {}
    loaded = 0
    for _ in range(repeats):
        found = cal.calibrate(
            task, "cpu", 0, TrainerConfig(), PrecisionRequest(budget_s=2.0), expected_steps=2000
        )
        if isinstance(found, str):
            raise SystemExit(f"nothing timed on this host: {found}")
        for row in found.rows:
            spreads.setdefault(f"{row.precision} {row.execution}", []).append(row.spread)
        loaded += under_load(found.rows) is not None
    return spreads, loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--busy", type=int, default=2, help="spinning processes, second pass")
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = _Mlp(args.width)
    print(f"MLP 64-{args.width}-1, batch 256, 1 torch thread; LOAD_BOUND {LOAD_BOUND}")
    for busy in (0, args.busy):
        with _busy(busy):
            spreads, loaded = _measure(task, args.repeats)
        print(f"\n{busy} busy processes beside it: {loaded}/{args.repeats} under load")
        for row, values in spreads.items():
            values.sort()
            print(
                f"  {row:<12} p90/p10 median {statistics.median(values):.2f}, "
                f"range {values[0]:.2f}-{values[-1]:.2f}"
            )


if __name__ == "__main__":
    main()
