"""``auto`` by measurement: time the agent's own step in each precision and pick the fastest.

A rule ("fp16 on CUDA, bf16 on a CPU with native bf16") is wrong where it matters: on an
H100 the world model trains slower in fp16 than in fp32 when its step is
launch-bound (``benchmarks/results/h100-2026-11-22.md``), and on a CPU bf16 pays only for wide
layers. So when a run asks for ``auto``, ``fit()`` times a few steps of the task's real
model and batches in every candidate precision and trains in the fastest::

    calibration = calibrate(task, device="cpu", seed=0, trainer_config=TrainerConfig())
    calibration.chosen     # 'bf16'
    calibration.execution  # 'eager' (a CPU has no CUDA graphs)
    calibration.reason     # 'auto -> bf16, eager: measured 1.31x fp32 eager ...'

- **Candidates**: fp32 always; bf16 where the device has it natively; fp16 where the
  device has it natively (CUDA, or a CPU with AVX512-FP16/AMX-FP16). Emulated 16-bit
  arithmetic is never faster, so it is not timed. ``excluded`` (e.g. a red precision
  probe) removes a candidate with its reason. With one candidate left nothing is timed.
- **Execution**: on CUDA, when the run's ``cuda_graph`` is ``auto``, each candidate is
  timed eagerly *and* as a captured CUDA graph (where its step can be captured), and the
  run trains in the faster of the two (``Calibration.execution``). On a launch-bound
  model the graph is several times faster; on a compute-bound one they tie. Rows are
  never compiled: a ``compile="on"`` run is timed uncompiled, then trains compiled and
  captured in the precision chosen.
- **Safety margin**: the most robust candidate (fp32, then bf16, then fp16) whose median
  step is within ``MARGIN`` (5%) of the fastest row wins, in its faster execution: fp32
  eager is always timed, so ``auto`` is never slower than fp32 eager beyond that margin
  and measurement noise.
- **Cost, bounded by the run it serves**: each row (a precision in an execution) takes
  ``WARMUP`` untimed steps, then timed steps, at least ``MIN_TIMED``. The rows share at
  most ``RUN_SHARE`` (10%) of the run's expected steps, when ``fit()`` knows them, and
  at most ``budget_s`` of wall clock (default 1 s: the bound when nothing is known).
  A run too short for every row's minimum within its share pays the minimum once
  (the cache keeps it). ``Calibration.seconds`` is the cost and ``Calibration.bound``
  what bounded it, both reported with the run. The result is cached (``cache``), so a
  daemon pays it once per agent until the device, torch version, model, batch shape or
  candidates change, unless it was taken under load (a row's p90/p10 above
  ``LOAD_BOUND``, 1.5): that one is used by its run, never reused, and the next run
  measures again, its reason saying why.
- **Reason**: every timed row with its median and p10-p90 (``Measured.describe``), then
  the choice; ``decide.choose`` writes it.
- **Training untouched**: every candidate trains a deep copy of one freshly built model
  with its own optimizers and schedulers; the global RNG is saved and restored around
  it, and ``fit()`` seeds after it. A run with ``auto`` is bit for bit the run with the
  chosen precision named explicitly.
- Single process only: under torchrun every rank would time its own steps and could
  choose differently, so there ``decide`` keeps the rule, the exclusions and the floor,
  and says so.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.agent_folder import files, records
from genesis_fp16_infrastructure.agent_folder.layout import CALIBRATION
from genesis_fp16_infrastructure.training import distributed
from genesis_fp16_infrastructure.training.precision import capabilities
from genesis_fp16_infrastructure.training.precision.capabilities import DeviceCapabilities
from genesis_fp16_infrastructure.training.precision.decide import (
    MARGIN,
    PrecisionRequest,
    auto_candidates,
    decide,
    measures_here,
)
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.precision.precision_names import PrecisionName
from genesis_fp16_infrastructure.training.precision.precision_request import DEFAULT_BUDGET_S
from genesis_fp16_infrastructure.training.reports import Calibration, Measured, under_load
from genesis_fp16_infrastructure.training.rng import capture_rng_state, restore_rng_state
from genesis_fp16_infrastructure.training.run.batches import batch_shapes, to_device
from genesis_fp16_infrastructure.training.run.task import TrainingTask
from genesis_fp16_infrastructure.training.step.cuda_graph import cuda_generators
from genesis_fp16_infrastructure.training.step.execution import ExecutionError, MeasuredExecution
from genesis_fp16_infrastructure.training.step.trainer import LossFn, Trainer
from genesis_fp16_infrastructure.training.step.trainer_config import TrainerConfig

logger = logging.getLogger(__name__)

RUN_SHARE = 0.10
WARMUP = 2
MIN_TIMED = 3
MAX_TIMED = 20


def measured_execution(calibration: Calibration) -> MeasuredExecution:
    """The chosen precision's execution and the timings that chose it (for the run)."""
    mine = [r for r in calibration.rows if r.precision == calibration.chosen]
    timings = ", ".join(f"{r.execution} {r.median_ms:.3f} ms" for r in mine)
    why = f"measured {calibration.chosen} steps: {timings}"
    return MeasuredExecution(calibration.execution, why)


@dataclass(frozen=True)
class NothingTimed:
    """Why :func:`calibrate` timed nothing (one candidate, or no row could run as asked):
    the caller decides ``auto`` by the rule, and its reason says this."""

    why: str


def calibrate(
    task: TrainingTask,
    device: torch.device | str,
    seed: int,
    trainer_config: TrainerConfig,
    excluded: Mapping[str, str] | None = None,
    cache: Path | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    clock: Callable[[], float] = time.perf_counter,
    expected_steps: int | None = None,
    scaler: ScalerConfig = ScalerConfig(),  # noqa: B008 (frozen, so sharing is safe)
) -> Calibration | NothingTimed:
    """Time the candidates (or reuse ``cache``); :class:`NothingTimed` when nothing was:
    one candidate only (the rule then names it and why the others are out), or no row
    could run as asked (``cuda_graph=on`` where nothing can be captured: the rule
    decides, then the trainer refuses the run in one line). ``expected_steps`` (the run's
    budget, when known) bounds the cost to ``RUN_SHARE`` of it, or to each row's minimum
    where that is more. ``scaler`` is the run's loss-scaler config: the fp16 rows step
    with it (hysteresis above 1 takes more ops per step than the fused update), and it
    is part of the cache key.
    """
    dev = torch.device(device)
    caps = capabilities.detect_capabilities(dev)
    candidates, skipped = auto_candidates(caps, excluded)
    if len(candidates) < 2:
        return NothingTimed("one candidate, nothing to time")
    modes = _execution_modes(dev, trainer_config)
    rng = capture_rng_state()
    try:
        template = task.build_model()
        batches = _first_batches(task, seed, WARMUP + MAX_TIMED)
        key = _key(caps, dev, template, batches[0], candidates, trainer_config, scaler)
        found, remeasured = _read_cache(cache, key)
        if found is not None:
            logger.info("precision calibration reused from %s: %s", cache, found.reason)
            return found
        limit = _Limit.for_run(len(candidates) * len(modes), expected_steps, budget_s)
        started = clock()
        rows: list[Measured] = []
        for name in candidates:
            for mode in modes:
                row = _time(
                    name, mode, task, template, batches, dev, trainer_config, limit, clock, scaler
                )
                if isinstance(row, str):
                    skipped[f"{name} captured"] = row
                else:
                    rows.append(row)
    finally:
        restore_rng_state(rng)
    if not rows:  # no row could run as asked (cuda_graph=on where nothing can be captured)
        return NothingTimed(f"no candidate could be timed as asked ({_not_timed(skipped)})")
    note = "; ".join(n for n in (_not_timed(skipped), remeasured) if n) or None
    decision = decide(PrecisionRequest("auto", mode="measure", note=note), dev, rows)
    seconds = clock() - started
    result = Calibration(
        decision.used,
        decision.reason,
        tuple(rows),
        skipped,
        key,
        seconds,
        execution=decision.execution or "eager",
        bound=limit.why,
        remeasured=remeasured or "",
    )
    logger.info("precision calibration in %.2f s (%s): %s", seconds, limit.why, decision.reason)
    if cache is not None:
        files.write_json(cache, CALIBRATION, result.to_json())
    return result


def _execution_modes(device: torch.device, config: TrainerConfig) -> tuple[str, ...]:
    """The ``cuda_graph`` settings to time: eager and captured for ``auto`` on CUDA (a
    row that cannot be captured is skipped with its reason), else the run's own."""
    if device.type == "cuda" and config.cuda_graph == "auto":
        return ("off", "on")
    return (config.cuda_graph,)


@dataclass(frozen=True)
class _Limit:
    """Each row's most timed steps and seconds, and what set them (for the report)."""

    timed_steps: int
    seconds: float
    why: str

    @classmethod
    def for_run(cls, rows: int, expected_steps: int | None, budget_s: float) -> _Limit:
        seconds = budget_s / rows
        clock = f"{budget_s:g} s of wall clock"
        if expected_steps is None:
            return cls(MAX_TIMED, seconds, f"at most {clock} (the run's length is unknown)")
        share = int(expected_steps * RUN_SHARE)
        timed = max(MIN_TIMED, min(MAX_TIMED, share // rows - WARMUP))
        why = f"at most {share} steps ({RUN_SHARE:.0%} of the run's {expected_steps}) and {clock}"
        if share // rows - WARMUP < MIN_TIMED:  # the least that measures anything
            why = (
                f"the minimum, {WARMUP + MIN_TIMED} steps a row, is over {RUN_SHARE:.0%} "
                f"of this {expected_steps}-step run: paid once, then cached"
            )
        return cls(timed, seconds, why)


def policy_for_run(
    task: TrainingTask,
    request: PrecisionRequest,
    device: str,
    scaler: ScalerConfig,
    seed: int,
    trainer_config: TrainerConfig,
    expected_steps: int | None = None,
) -> tuple[PrecisionPolicy, Calibration | None]:
    """The run's precision policy, built from one :func:`decide` of the run's ``request``;
    for a measured ``auto`` in one process (:func:`measures_here`), from the timings of
    :func:`calibrate`. ``decide`` applies the floor and the exclusions either way."""
    ranks = distributed.rank_and_world()[1]
    if not measures_here(request, ranks):
        decision = decide(request, device, ranks=ranks)
        return PrecisionPolicy.from_decision(decision, device, scaler), None
    calibration = calibrate(
        task,
        device,
        seed,
        trainer_config,
        request.excluded,
        request.cache,
        request.budget_s,
        expected_steps=expected_steps,
        scaler=scaler,
    )
    if isinstance(calibration, NothingTimed):  # the rule decides, less the exclusions
        decision = decide(replace(request, note=calibration.why), device)
        return PrecisionPolicy.from_decision(decision, device, scaler), None
    cached = "cached measurement" if calibration.cached else None
    notes = (_not_timed(calibration.skipped), cached, calibration.remeasured)
    note = "; ".join(n for n in notes if n) or None
    decision = decide(replace(request, note=note), device, calibration.rows)
    return PrecisionPolicy.from_decision(decision, device, scaler), calibration


def _not_timed(skipped: Mapping[str, str]) -> str | None:
    if not skipped:
        return None
    return "not timed: " + ", ".join(f"{n} ({why})" for n, why in skipped.items())


def _first_batches(task: TrainingTask, seed: int, count: int) -> list[Any]:
    # The same (epoch, seed) the run starts with: the protocol says it yields the same
    # batches each time, so reading them here changes nothing for the run.
    batches = [batch for batch, _ in islice(iter(task.train_batches(0, seed)), count)]
    if not batches:
        raise ValueError("precision calibration: the task yielded no training batch")
    return batches


def _time(
    name: PrecisionName,
    mode: str,
    task: TrainingTask,
    template: nn.Module,
    batches: list[Any],
    device: torch.device,
    config: TrainerConfig,
    limit: _Limit,
    clock: Callable[[], float],
    scaler: ScalerConfig,
) -> Measured | str:
    """One row: ``name`` in the execution ``mode`` asks for, with the run's ``scaler``; a
    str says why a captured row could not be captured (then it is not timed)."""
    policy = PrecisionPolicy.create(name, device, scaler, announce=False)
    model = copy.deepcopy(template).to(device)
    optimizers = task.build_optimizers(model)
    # Uncompiled rows, for compile=on too: compiling every candidate would cost more than
    # the run; such a run then trains the chosen precision compiled and captured.
    row_config = replace(config, cuda_graph=mode, measured_execution=None, compile="off")
    try:
        schedulers = task.build_schedulers(optimizers)
        generators = cuda_generators(task)
        trainer = Trainer(model, optimizers, policy, row_config, schedulers, None, generators)
    except ExecutionError as exc:
        return exc.obstacle
    loss: LossFn = task.loss
    cycle = _cycle([to_device(b, device) for b in batches])
    for _ in range(WARMUP):
        trainer.step([next(cycle)], loss, 0)
    times: list[float] = []
    spent = 0.0
    while len(times) < MIN_TIMED or (len(times) < limit.timed_steps and spent < limit.seconds):
        _sync(device)
        start = clock()
        trainer.step([next(cycle)], loss, 0)
        _sync(device)
        times.append(clock() - start)
        spent += times[-1]
    ms = [t * 1000 for t in times]
    deciles = statistics.quantiles(ms, n=10, method="inclusive")  # MIN_TIMED >= 2 points
    median = statistics.median(ms)
    used = trainer.execution.used
    return Measured(name, used, median, min(ms), max(ms), len(ms), deciles[0], deciles[-1])


def _cycle(items: list[Any]) -> Iterator[Any]:
    while True:
        yield from items


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # timing only: the steps themselves never sync


def _key(
    caps: DeviceCapabilities,
    device: torch.device,
    model: nn.Module,
    batch: Any,
    candidates: list[PrecisionName],
    config: TrainerConfig,
    scaler: ScalerConfig,
) -> dict[str, str]:
    params = [(n, tuple(p.shape), str(p.dtype)) for n, p in model.named_parameters()]
    return {
        "device": f"{device.type} ({caps.source})",
        "torch": torch.__version__,
        "model": hashlib.sha256(repr(params).encode()).hexdigest()[:16],
        "batch": batch_shapes(batch),
        "candidates": ",".join(candidates),
        "cuda_graph": config.cuda_graph,
        "margin": str(MARGIN),
        "scaler": json.dumps(asdict(scaler), sort_keys=True),
    }


def kept_rows(path: Path) -> tuple[Measured, ...]:
    """The rows of the measurement kept at ``path`` (none: no file, or an unusable one),
    whatever its key: what a measured ``auto`` chose last, for ``decide`` to answer again
    before the next run (the daemon's gauge); the run itself measures again on a new key."""
    found = read_calibration(path)
    return () if found is None else found.rows


def read_calibration(path: Path) -> Calibration | None:
    """The measurement kept at ``path``, whatever its key; None: none, one of another
    version (measured again), or an unusable one (set aside as
    ``precision_calibration.json.unusable-*`` and reported, read within its bound)."""
    return records.read_calibration(path)


def _read_cache(path: Path | None, key: Mapping[str, str]) -> tuple[Calibration | None, str | None]:
    """The kept measurement for ``key``, if it may be reused; else None, with why a kept
    one for the same key was not (it was taken under load) for the new one's reason."""
    found = None if path is None else read_calibration(path)
    if found is None:
        return None, None
    if dict(found.key) != dict(key):
        changed = sorted(k for k in {*key, *found.key} if key.get(k) != found.key.get(k))
        logger.info("precision calibration cache is stale (%s changed)", ", ".join(changed))
        return None, None
    loaded = under_load(found.rows)
    if loaded is not None:  # its run used it; no later run trusts it
        why = f"the kept measurement was {loaded}: measured again"
        logger.info("precision calibration at %s not reused: %s", path, why)
        return None, why
    return found, None
