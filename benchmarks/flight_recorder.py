"""The numerics flight recorder, measured: injected faults, overhead, bounds.

    python benchmarks/flight_recorder.py --out benchmarks/results

1. **Injected faults.** A tiny regression (tests/infrastructure/training/guard_faults.py)
   trains 40 fp16 steps on the CPU through ``fit()``; at batch 17 one position is made
   to overflow fp16: the *early* layer (module ``0``'s input scaled by 2**20, the same
   as scaling its weights), the *late* layer (module ``3``'s input scaled alike), or the
   *loss* (its gradient multiplied by 1e9). For each seed and position: was a bundle
   written, did ``replay`` reproduce the step on the CPU, and did it name the module;
   and what ``replay --against fp32`` names as the first departure and advises.
2. **Overhead.** Eager fp32 steps on the CPU of se_darwin's world model (the bench's
   ``default`` preset) and of its ``large`` preset, batch 64, in blocks of ``--block``
   (``--large-block``) steps, range statistics on (the default, cost-chosen config; each
   "on" block a fresh run's statistics, its first sample included; ``--every N`` for a
   fixed rate) and off, interleaved A/B for ``--rounds`` rounds (``--large-rounds`` for
   large): the median step time of each, the overhead's median and spread, the samples
   each block took and the interval the cost chose, in this process's CPU seconds
   (``--clock cpu``, the default: on a shared machine other processes' load does not
   count; ``wall`` for wall time).
   Then the recorder alone (``flight`` on vs off) through
   ``fit()`` on a clean run.
3. **Bounded.** ``--bounded-steps`` consecutive non-finite steps (NaN losses in every
   precision, the guard's triggers off so the run goes on), several runs into one bundle
   folder of ``max_count=2``: the folder stays in bounds and each run's skips, demotions
   and outcome equal the run with recording off. And the default guard on the same
   fault: two demotions, a failed run, the same with recording on and off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "infrastructure" / "training"))
from guard_faults import BASE, FaultTask  # noqa: E402

from genesis_fp16.bench.measure import machine_slug  # noqa: E402
from genesis_fp16_infrastructure.training import FitOptions, GuardConfig, fit  # noqa: E402
from genesis_fp16_infrastructure.training.flight.bundle import load_bundle  # noqa: E402
from genesis_fp16_infrastructure.training.flight.bundle_files import (  # noqa: E402
    BundleLimits,
    FlightConfig,
    list_bundles,
)
from genesis_fp16_infrastructure.training.flight.range_stats import (  # noqa: E402
    RangeStats,
    RangeStatsConfig,
)
from genesis_fp16_infrastructure.training.flight.replay import ReplayTarget, replay  # noqa: E402
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy  # noqa: E402
from genesis_fp16_infrastructure.training.step.trainer import Trainer, TrainerConfig  # noqa: E402

QUIET = GuardConfig(check_interval=5, overflow_rate_limit=None, bf16_needs_native=False)
OFF = GuardConfig(
    check_interval=5,
    overflow_rate_limit=None,
    nonfinite_limit=None,
    divergence_factor=None,
    on_unstable=False,
    bf16_needs_native=False,
)
FAULT_BATCH = 17
EXPECTED = {"early": "0", "late": "3", "loss": "loss"}


class Injected(FaultTask):
    """Batch 17 overflows fp16 at one position: ``early``, ``late`` or ``loss``."""

    def __init__(self, position: str) -> None:
        super().__init__("overflow" if position == "loss" else None, FAULT_BATCH, FAULT_BATCH + 1)
        self.position = position

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        step = batch[0]
        if step != FAULT_BATCH or self.position == "loss":
            return super().loss(model, batch)
        module = model.get_submodule(EXPECTED[self.position])
        handle = module.register_forward_pre_hook(lambda m, args: (args[0] * 2.0**20,))
        try:
            return super().loss(model, batch)
        finally:
            handle.remove()


def injected_faults(seeds: int) -> dict[str, Any]:
    rows = []
    for position in EXPECTED:
        for seed in range(seeds):
            task = Injected(position)
            with tempfile.TemporaryDirectory() as folder:
                options = FitOptions(
                    precision="fp16",
                    steps=40,
                    seed=seed,
                    log_interval=40,
                    guard=QUIET,
                    flight=FlightConfig(folder=Path(folder)),
                )
                result = fit(task, options)
                written = [b for b in result.fault_bundles if b.step == FAULT_BATCH + 1]
                named, reproduced, departed, advice = None, False, None, None
                if written:
                    bundle = load_bundle(Path(written[0].path))
                    report = replay(bundle, ReplayTarget.of_task(task), against_fp32=0.1)
                    reproduced = bool(report["reproduced"])
                    named = (report["first_nonfinite"] or {}).get("module")
                    first = report["against_fp32"]["first_departure"] or {}
                    departed = f"{first.get('module')} {first.get('phase')}"
                    advice = report["against_fp32"]["advice"]["action"]
            rows.append(
                {
                    "position": position,
                    "seed": seed,
                    "bundle": bool(written),
                    "reproduced": reproduced,
                    "named": named,
                    "right": named == EXPECTED[position],
                    "against_fp32": departed,  # replay --against fp32's first departure
                    "advice": advice,
                }
            )
    summary = {
        p: {
            "runs": sum(r["position"] == p for r in rows),
            "bundle": sum(r["bundle"] for r in rows if r["position"] == p),
            "reproduced": sum(r["reproduced"] for r in rows if r["position"] == p),
            "named": sum(r["right"] for r in rows if r["position"] == p),
            "against_fp32": sorted({str(r["against_fp32"]) for r in rows if r["position"] == p}),
            "advice": sorted({str(r["advice"]) for r in rows if r["position"] == p}),
        }
        for p in EXPECTED
    }
    return {"rows": rows, "summary": summary}


def _world_model(size: str, folder: Path) -> tuple[nn.Module, Any, list[Any]]:
    """se_darwin's world model at a bench preset (``default``: the agent's own size)."""
    from genesis_fp16_infrastructure.world_model.workload import (
        build_workload,
        load_data,
        world_model_loss,
        write_data,
    )

    data = load_data(write_data(folder, False, 0), 64, torch.device("cpu"))
    work = build_workload(size, data, 0, False, torch.device("cpu"))
    return work.model, world_model_loss, list(work.train_batches)


CLOCK = {"cpu": time.process_time, "wall": time.perf_counter}
clock = time.process_time  # this process's CPU seconds: other processes' load does not count


def _block(
    trainer: Trainer, loss: Any, batches: list[Any], steps: int, stats: RangeStats | None
) -> float:
    started = clock()
    for i in range(steps):
        trainer.step([batches[i % len(batches)]], loss, 1)
        if stats is not None:
            stats.after_step(trainer)
    return (clock() - started) / steps


def overhead(
    name: str, built: tuple[nn.Module, Any, list[Any]], rounds: int, block: int, every: int | None
) -> dict[str, Any]:
    """Blocks of ``block`` steps with range statistics on and off, interleaved A/B. With
    ``every=None`` (the default config: cost-chosen) each "on" block is a fresh run's
    statistics (a first sample at its step 3, then as the measured cost allows)."""
    model, loss, batches = built
    policy = PrecisionPolicy.create("fp32", "cpu", announce=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    trainer = Trainer(model, [optimizer], policy, TrainerConfig(cuda_graph="off"))
    config = RangeStatsConfig(every=every)
    _block(trainer, loss, batches, block, None)  # warm-up
    times: dict[str, list[float]] = {"off": [], "on": []}
    summaries: list[Any] = []
    for r in range(rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            stats = RangeStats(config) if mode == "on" else None
            if stats is not None:
                stats.follow(trainer)
            times[mode].append(_block(trainer, loss, batches, block, stats))
            if stats is not None:
                stats.detach()
                summaries.append(stats.summary(8))
    pairs = [on / off - 1.0 for on, off in zip(times["on"], times["off"], strict=True)]
    costs = [s.sample_cost for s in summaries if s is not None and s.sample_cost is not None]
    return {
        "workload": name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "modules": len(list(model.modules())),
        "step_ms_off": statistics.median(times["off"]) * 1e3,
        "step_ms_on": statistics.median(times["on"]) * 1e3,
        "overhead_median": statistics.median(pairs),
        "overhead_min": min(pairs),
        "overhead_max": max(pairs),
        "overhead_pairs": pairs,
        "samples_per_block": [s.samples if s is not None else 0 for s in summaries],
        "every_chosen": [s.every if s is not None else None for s in summaries],
        "sample_cost_median": statistics.median(costs) if costs else None,
        "rounds": rounds,
        "block": block,
        "every": every if every is not None else "cost-chosen (default)",
        "load_before": os.getloadavg(),
    }


def recorder_cost(rounds: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"off": [], "on": []}
    for r in range(rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            with tempfile.TemporaryDirectory() as folder:
                flight = FlightConfig(folder=Path(folder)) if mode == "on" else None
                options = FitOptions(
                    precision="fp16", steps=200, log_interval=200, guard=QUIET, flight=flight
                )
                started = clock()
                result = fit(FaultTask(None), options)
                times[mode].append((clock() - started) / result.steps_run)
    pairs = [on / off - 1.0 for on, off in zip(times["on"], times["off"], strict=True)]
    return {
        "step_ms_off": statistics.median(times["off"]) * 1e3,
        "step_ms_on": statistics.median(times["on"]) * 1e3,
        "overhead_median": statistics.median(pairs),
        "overhead_min": min(pairs),
        "overhead_max": max(pairs),
        "rounds": rounds,
    }


def _outcome(result: Any) -> dict[str, Any]:
    return {
        "skipped": result.summary.skipped_steps,
        "demotions": [d.to_json() for d in result.demotions],
        "failure": None if result.failure is None else dict(result.failure),
        "precision": result.precision.used,
        "eval": dict(result.eval),
    }


def bounded(steps: int, runs: int) -> dict[str, Any]:
    all_precisions = (torch.float16, torch.bfloat16, torch.float32)
    out: dict[str, Any] = {"steps": steps, "runs": runs, "max_count": 2}
    with tempfile.TemporaryDirectory() as folder:
        limits = BundleLimits(max_count=2, max_bytes=10**9)
        same, largest = True, 0
        for seed in range(runs):
            results = {}
            for mode in ("off", "on"):
                flight = FlightConfig(folder=Path(folder), limits=limits) if mode == "on" else None
                options = FitOptions(
                    precision="fp16",
                    steps=steps,
                    seed=seed,
                    log_interval=steps,
                    guard=OFF,
                    flight=flight,
                )
                results[mode] = _outcome(
                    fit(FaultTask("nan", fault_step=0, fault_in=all_precisions), options)
                )
            same = same and results["on"] == results["off"]
            largest = max(largest, len(list_bundles(Path(folder))))
            out["skipped_per_run"] = results["on"]["skipped"]
        out.update(
            same_as_off=same, most_files=largest, files_at_end=len(list_bundles(Path(folder)))
        )
        results = {}
        for mode in ("off", "on"):
            flight = FlightConfig(folder=Path(folder) / "guarded") if mode == "on" else None
            options = FitOptions(
                precision="fp16", steps=steps, log_interval=steps, guard=BASE, flight=flight
            )
            results[mode] = _outcome(
                fit(FaultTask("nan", fault_step=0, fault_in=all_precisions), options)
            )
        out["guarded"] = {
            "same_as_off": results["on"] == results["off"],
            "demotions": [(d["from"], d["to"]) for d in results["on"]["demotions"]],
            "failure": results["on"]["failure"],
            "bundles": [r["reason"] for r in list_bundles(Path(folder) / "guarded")],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--large-rounds", type=int, default=10)
    parser.add_argument(
        "--every", type=int, default=None, help="one sampled step in N (default: cost-chosen)"
    )
    parser.add_argument("--block", type=int, default=1000, help="steps a se_darwin block")
    parser.add_argument("--large-block", type=int, default=400, help="steps a large block")
    parser.add_argument("--bounded-steps", type=int, default=1000)
    parser.add_argument("--bounded-runs", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma list of faults,overhead,bounded")
    parser.add_argument(
        "--clock", choices=sorted(CLOCK), default="cpu", help="what a step's time is"
    )
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads (1 on a loaded machine)"
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tag", default="", help="appended to the result file's name")
    args = parser.parse_args()
    global clock
    clock = CLOCK[args.clock]
    skip = set(filter(None, args.skip.split(",")))
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {
        "torch": str(torch.__version__),
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        "load_at_start": os.getloadavg(),
    }
    if "faults" not in skip:
        results["faults"] = injected_faults(args.seeds)
        print(json.dumps(results["faults"]["summary"]), flush=True)
    if "overhead" not in skip:
        with tempfile.TemporaryDirectory() as folder:
            results["overhead"] = [
                overhead(
                    "se_darwin",
                    _world_model("default", Path(folder)),
                    args.rounds,
                    args.block,
                    args.every,
                ),
                overhead(
                    "large",
                    _world_model("large", Path(folder)),
                    args.large_rounds,
                    args.large_block,
                    args.every,
                ),
            ]
        results["recorder"] = recorder_cost(args.rounds)
        print(json.dumps(results["overhead"]), json.dumps(results["recorder"]), flush=True)
    if "bounded" not in skip:
        results["bounded"] = bounded(args.bounded_steps, args.bounded_runs)
        print(json.dumps(results["bounded"]), flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"flight_recorder_{machine_slug(torch.device('cpu'))}{args.tag}.json"
        (args.out / name).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
