"""What range statistics cost a run: on against off, interleaved pairs (issue 66, item 3).

    python benchmarks/range_stats_cost.py --out benchmarks/results                 # CPU
    python benchmarks/range_stats_cost.py --device cuda --pairs 5 --out benchmarks/results

A "run" is ``--steps`` optimizer steps (1,000) of one trainer through
``Trainer.step`` and ``RangeStats.after_step``, as ``fit()`` drives them: se_darwin's
world model (the bench's ``default`` preset, the agent's own size) and the bench's
``large`` preset, batch ``--batch`` (64), fp32 unless ``--precision``. Each pair is one
run with range statistics off and one with them on (a fresh ``RangeStats`` with the
default, cost-chosen config: its first sample three steps in, then as its measured cost
allows; ``--every N`` for a fixed rate), in alternating order; the trainer is shared
and warmed up first. The overhead of a pair is ``on / off - 1``; the file keeps every
pair, their median and spread, the samples each "on" run took and the interval and
cost the sampling chose, and the sampler's own account of its cost (each "on" run's
samples times the cost it measured, in plain steps, over its steps: steadier than a
pair on a loaded machine). The target is at most 1% (the median).

On the CPU a run's time is this process's CPU seconds (``--clock cpu``, the default: on
a shared machine other processes' load does not count; ``--clock wall`` for wall time).
On CUDA (``--device cuda``) the step is the product's captured one (fused capturable
AdamW, the data on the device, ``cuda_graph="on"``), and a run's time is wall time
between two ``torch.cuda.synchronize()``: the device's work, not the launches. The
results file names the command, the machine and the load average at the start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from genesis_fp16.bench.measure import machine_slug
from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.training.flight.range_stats import RangeStats, RangeStatsConfig
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.step.trainer import Trainer, TrainerConfig
from genesis_fp16_infrastructure.world_model.workload import (
    build_workload,
    load_data,
    world_model_loss,
    write_data,
)

TARGET = 0.01  # range statistics on cost at most 1% of a run
WORKLOADS = {"se_darwin": "default", "large": "large"}


def _clock(device: torch.device, kind: str) -> Callable[[], float]:
    if device.type == "cuda":

        def synced() -> float:
            torch.cuda.synchronize(device)
            return time.perf_counter()

        return synced
    return time.process_time if kind == "cpu" else time.perf_counter


def _trainer(model: nn.Module, device: torch.device, precision: str) -> Trainer:
    cuda = device.type == "cuda"
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True, capturable=cuda)
    policy = PrecisionPolicy.create(cast(PrecisionName, precision), str(device), announce=False)
    config = TrainerConfig(cuda_graph="on" if cuda else "off")
    return Trainer(model, [optimizer], policy, config)


def _run(
    trainer: Trainer, batches: list[Any], steps: int, stats: RangeStats | None, clock: Any
) -> float:
    """One run of ``steps`` steps: its time."""
    if stats is not None:
        stats.follow(trainer)
    started = clock()
    for i in range(steps):
        trainer.step([batches[i % len(batches)]], world_model_loss, 1)
        if stats is not None:
            stats.after_step(trainer)
    took = clock() - started
    if stats is not None:
        stats.detach()
    return took


def measure(
    name: str, folder: Path, args: argparse.Namespace, device: torch.device
) -> dict[str, Any]:
    data = load_data(write_data(folder, False, 0), args.batch, device)
    work = build_workload(WORKLOADS[name], data, 0, False, device)
    trainer = _trainer(work.model, device, args.precision)
    batches = list(work.train_batches)
    clock = _clock(device, args.clock)
    _run(trainer, batches, args.warmup, None, clock)  # first-use work, warm-ups, capture
    config = RangeStatsConfig(every=args.every)
    times: dict[str, list[float]] = {"off": [], "on": []}
    samples, every, costs = [], [], []
    for pair in range(args.pairs):
        for mode in ("off", "on") if pair % 2 == 0 else ("on", "off"):
            stats = RangeStats(config) if mode == "on" else None
            times[mode].append(_run(trainer, batches, args.steps, stats, clock))
            if stats is not None:
                summary = stats.summary(8)
                samples.append(summary.samples if summary is not None else 0)
                every.append(summary.every if summary is not None else None)
                costs.append(summary.sample_cost if summary is not None else None)
    overheads = [on / off - 1.0 for on, off in zip(times["on"], times["off"], strict=True)]
    median = statistics.median(overheads)
    # The sampler's own account, steadier than a pair on a loaded machine: each "on"
    # run's samples times the cost it measured for them (plain steps), over its steps.
    accounted = [n * c / args.steps for n, c in zip(samples, costs, strict=True) if c is not None]
    return {
        "workload": name,
        "preset": WORKLOADS[name],
        "parameters": sum(p.numel() for p in work.model.parameters()),
        "modules": len(list(work.model.modules())),
        "execution": trainer.execution.used,
        "steps_per_run": args.steps,
        "pairs": args.pairs,
        "step_ms_off": statistics.median(times["off"]) / args.steps * 1e3,
        "step_ms_on": statistics.median(times["on"]) / args.steps * 1e3,
        "overhead_median": median,
        "overhead_min": min(overheads),
        "overhead_max": max(overheads),
        "overhead_pairs": overheads,
        "within_target": median <= TARGET,
        "overhead_by_sampler_median": statistics.median(accounted) if accounted else None,
        "overhead_by_sampler": accounted,
        "samples_per_run": samples,
        "every_chosen": every,
        "sample_cost_plain_steps": costs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--steps", type=int, default=1000, help="steps a run")
    parser.add_argument("--pairs", type=int, default=10, help="interleaved on/off pairs")
    parser.add_argument("--workloads", default="se_darwin,large", help="comma list")
    parser.add_argument("--large-steps", type=int, default=None, help="steps a large run")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument("--every", type=int, default=None, help="fixed: one sample in N")
    parser.add_argument("--warmup", type=int, default=20, help="steps before the pairs")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="CPU only")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    parser.add_argument("--out", type=Path, help="folder for the results file")
    parser.add_argument("--tag", default="", help="appended to the results file's name")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "machine": machine_slug(device),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": str(torch.__version__),
        "threads": torch.get_num_threads(),
        "clock": "wall, synchronized" if device.type == "cuda" else args.clock,
        "target": TARGET,
        "load_at_start": os.getloadavg(),
        "rows": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        for name in filter(None, args.workloads.split(",")):
            steps = args.large_steps if name == "large" and args.large_steps else args.steps
            row = measure(
                name, Path(folder), argparse.Namespace(**{**vars(args), "steps": steps}), device
            )
            results["rows"].append(row)
            print(
                f"{name}: off {row['step_ms_off']:.3f} ms/step, on {row['step_ms_on']:.3f}; "
                f"overhead median {row['overhead_median']:+.2%} "
                f"({row['overhead_min']:+.2%}..{row['overhead_max']:+.2%}), "
                f"samples {row['samples_per_run']}, every {row['every_chosen']}; "
                f"by the sampler's account {row['overhead_by_sampler_median']}",
                flush=True,
            )
    results["load_at_end"] = os.getloadavg()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"range_stats_cost_{results['machine']}{args.tag}.json"
        path.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
