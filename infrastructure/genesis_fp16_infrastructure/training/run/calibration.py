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
    calibration.seconds    # 0.4: everything it did, against budget_s (1 s)
    calibration.phases     # {'setup': 0.02, 'build': 0.05, 'warmup': 0.1, ...}

The method is the one of Triton's autotuner and PyTorch's TunableOp: warm up untimed,
time only the steady state, keep every candidate's figure, reuse it while what it was
measured on holds, and check a reused winner before trusting it.

- **Candidates**: fp32 always; bf16 where the device has it natively; fp16 where the
  device has it natively (CUDA, or a CPU with AVX512-FP16/AMX-FP16). Emulated 16-bit
  arithmetic is never faster, so it is not timed. ``excluded`` (e.g. a red precision
  probe) removes a candidate with its reason. With one candidate left nothing is timed.
- **Rows**: fp32 is timed eagerly first: it is the floor. On CUDA, when the run's
  ``cuda_graph`` is ``auto``, fp32's captured CUDA graph is timed next, then the other
  candidates eagerly, then the fastest of those captured (``CAPTURED_ROWS``, 2, captured
  rows in all), and the run trains in the faster execution (``Calibration.execution``):
  on a launch-bound model the graph is several times faster; on a compute-bound one
  they tie. The floor's graph comes before the 16-bit rows so that a deadline spent on
  them never leaves a launch-bound run eager. Rows are never compiled: a
  ``compile="on"`` run is timed uncompiled, then trains compiled and captured.
- **An honest window**: a row's samples are steps of the first batch's signature only
  (an epoch's partial last batch would be another graph and its eager warm-ups). An
  eager row runs ``WARMUP`` untimed steps; a captured row runs untimed until it has
  been captured and replayed ``REPLAYS_BEFORE_TIMING`` times, so neither a graph's
  warm-ups nor its capture is ever timed. On CUDA the samples are CUDA events around
  blocks of steps (one sync per block, none per step); on a CPU, the host clock per step.
- **Safety margin**: the most robust candidate (fp32, then bf16, then fp16) whose median
  step is within ``MARGIN`` (5%) of the fastest row wins, in its faster execution: fp32
  eager is always timed, so ``auto`` is never slower than fp32 eager beyond that margin
  and measurement noise.
- **Cost, a real deadline**: ``budget_s`` (1 s by default) of wall clock covers
  everything the calibration does, from its first line: the template model, the
  batches, the cache, each row's model copy, optimizers and trainer, warm-ups,
  captures and timed steps. It is checked before each row (a row past it is skipped,
  its reason says so) and inside the timed loop; a row under way finishes its minimum,
  so the cost is at most ``budget_s`` plus one row. The process's one-time costs (the
  first ``torch.optim`` optimizer imports ``torch._dynamo``, 1-3.5 s; a CUDA context)
  are paid before the clock starts (:func:`warm_process`) and reported as ``init_s``,
  never as calibration. Each row's timed steps are also bounded by ``RUN_SHARE`` (10%)
  of the run's expected steps, when ``fit()`` knows them. ``Calibration.seconds`` is the
  cost, ``phases`` its breakdown (they sum to it) and ``bound`` what bounded it.
- **Reused**: the result is kept (``cache``) with every row's median and a key of
  validators: torch, the CUDA runtime and driver, the device's name and capability, the
  model's parameter shapes, the batch's shapes with the batch size bucketed to the next
  power of two (a pool grown by a few records keeps its key), the candidates and the
  TF32 flags. A daemon reuses it across runs and restarts until one of them changes; the
  measurement that replaces it names the fields that changed (``remeasured``, kept
  with it and shown by ``genesis-fp16 precision show``). Only the rows of this request's
  candidates are read, and they must choose what the record says it chose
  (``Calibration.reusable_winner``): the row the run would train in is the one timed
  again at its start, and a live median more than ``REVALIDATE`` (10%) off the kept one
  is measured again. Not where this process timed that very record itself (a resident
  run process, its memory store: ``kept_measurements.timed_here``) less than
  ``RETIME_AFTER_S`` ago: its file unchanged and its key the same, the live re-time would
  catch nothing but load, so it is reused untimed, its ``revalidated`` saying so. A
  measurement taken under load (a row's p90/p10 past ``LOAD_BOUND``, 1.5) whose choice
  the noise could have flipped (it does not hold across the rows' p10-p90:
  ``choice.reuse_refused``) is used by its run, never reused;
  a clear one is kept whatever its spread. A file of another release's version is never
  read: an earlier one's is measured again and replaced, a newer one's is kept as it is
  (the run measures for itself and writes nothing over it), each said in the reason.
- **Reason**: every timed row with its median and p10-p90 (``Measured.describe``), then
  the choice; ``decide.choose`` writes it.
- **Training untouched**: every candidate trains a deep copy of one freshly built model
  with its own optimizers and schedulers; the global RNG is saved and restored around
  it, and ``fit()`` seeds after it. A run with ``auto`` is bit for bit the run with the
  chosen precision named explicitly. ``auto`` is decided once per job: a run that
  resumes a checkpoint continues in its precision (``fit``).
- Single process only: under torchrun every rank would time its own steps and could
  choose differently, so there ``decide`` keeps the rule, the exclusions and the floor,
  and says so.
"""

from __future__ import annotations

import copy
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from itertools import cycle
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import CALIBRATION
from genesis_fp16_infrastructure.errors import ExecutionError
from genesis_fp16_infrastructure.machine_memory import PhaseClock
from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.training import distributed

# The module too: its detect_capabilities is looked up on each call (a test's one patch).
from genesis_fp16_infrastructure.training.precision import decide as decide_module
from genesis_fp16_infrastructure.training.precision import kept_measurements
from genesis_fp16_infrastructure.training.precision.choice import REVALIDATE
from genesis_fp16_infrastructure.training.precision.decide import (
    auto_candidates,
    choose,
    decide,
    measures_here,
)
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.reports import (
    LOAD_SAMPLES,
    Calibration,
    Measured,
)
from genesis_fp16_infrastructure.training.rng import capture_rng_state, restore_rng_state
from genesis_fp16_infrastructure.training.run.calibration_key import (
    Kept,
    measurement_key,
    ours_to_write,
    read_kept,
)
from genesis_fp16_infrastructure.training.run.task import (
    StepTask,
    first_batches,
    task_trainer,
    to_device,
)
from genesis_fp16_infrastructure.training.step.execution import MeasuredExecution
from genesis_fp16_infrastructure.training.step.trainer import LossFn, Trainer, TrainerConfig

logger = logging.getLogger(__name__)

RUN_SHARE = 0.10
WARMUP = 2  # an eager row's untimed steps
REPLAYS_BEFORE_TIMING = 2  # a captured row's untimed replays after its capture
MIN_TIMED = LOAD_SAMPLES  # fewer samples say nothing about load
MAX_TIMED = 20
EVENT_BLOCKS = 4  # on CUDA: the timed steps in this many blocks, one event pair each
CAPTURED_ROWS = 2  # on CUDA: the fastest eager precisions timed captured too
BATCHES_READ = 2 * (WARMUP + MAX_TIMED)  # of the first epoch, for the first signature

PAST_DEADLINE = "wall-clock bound reached"
PHASES = ("setup", "build", "warmup", "capture", "timed", "other")
"""The breakdown of ``Calibration.seconds``: reading the template, batches and cache
(``setup``); each row's model copy, optimizers and trainer (``build``); untimed steps
(``warmup``); the captures (``capture``); the timed steps (``timed``); the rest
(``other``: choosing, writing the cache)."""


def measured_execution(calibration: Calibration) -> MeasuredExecution:
    """The chosen precision's execution and the timings that chose it (for the run)."""
    mine = [r for r in calibration.rows if r.precision == calibration.chosen]
    timings = ", ".join(f"{r.execution} {r.median_ms:.3f} ms" for r in mine)
    why = f"measured {calibration.chosen} steps: {timings}"
    return MeasuredExecution(calibration.execution, why)


_WARMED: set[str] = set()


def warm_process(device: torch.device) -> None:
    """Pay the process's one-time costs on ``device`` before a calibration's clock starts:
    the first ``torch.optim`` optimizer imports ``torch._dynamo`` (3.55 s measured on an
    H200's host, 1.2-2.4 s on a 2-core CPU), and the first CUDA call makes a context
    (0.3 s) and cuBLAS its handle. Each would otherwise land in the first row. Once per
    process and device type."""
    if device.type in _WARMED:
        return
    probe = torch.zeros(1, device=device, requires_grad=True)
    torch.optim.AdamW([probe])  # the import, through the optimizer's own path
    if device.type == "cuda":  # the context, and cuBLAS's handle and workspace
        square = torch.ones(8, 8, device=device)
        square @ square
        torch.cuda.synchronize(device)
    _WARMED.add(device.type)


def calibrate(
    task: StepTask,
    device: torch.device | str,
    seed: int,
    trainer_config: TrainerConfig,
    request: PrecisionRequest = PrecisionRequest(mode="measure"),  # noqa: B008 (frozen)
    clock: Callable[[], float] = time.perf_counter,
    expected_steps: int | None = None,
    scaler: ScalerConfig = ScalerConfig(),  # noqa: B008 (frozen, so sharing is safe)
    init: Callable[[torch.device], None] = warm_process,
) -> Calibration | str:
    """Time the candidates but ``request.excluded`` (or reuse the one kept at
    ``request.cache``, its winner timed again); a str says why nothing was, and the
    caller's rule decides: one candidate only (the rule names it and why the others are
    out), or no row could run as asked (``cuda_graph=on`` where nothing can be captured:
    the trainer then refuses the run in one line). ``request.budget_s`` is a deadline on
    everything from ``init``'s end (see the module docstring);
    ``expected_steps`` (the run's budget, when known) bounds each row's timed steps to
    ``RUN_SHARE`` of it, or to its minimum where that is more. ``scaler`` is the run's
    loss-scaler config: the fp16 rows step with it, and it is part of the key. ``init``
    pays the process's one-time costs before the clock starts (``init_s``).
    """
    dev = torch.device(device)
    caps = decide_module.detect_capabilities(dev)
    candidates, skipped = auto_candidates(caps, request.excluded)
    if len(candidates) < 2:
        return "one candidate, nothing to time"
    entered = clock()
    init(dev)
    started = clock()
    captured_too = _captured_too(dev, trainer_config)
    limit = _Limit.for_run(len(candidates) + captured_too * CAPTURED_ROWS, expected_steps)
    cache, budget_s = request.cache, request.budget_s
    bench = _Bench(task, dev, trainer_config, scaler, clock, started + budget_s, budget_s, limit)
    rng = capture_rng_state()
    try:
        with bench.phases.phase("setup"):
            template = task.build_model()
            bench.template = template
            bench.batches = _first_signature(task, seed, dev)
            key = measurement_key(
                caps, dev, template, bench.batches[0], candidates, trainer_config, scaler
            )
            found, remeasured = read_kept(cache, key, candidates)
        if found is not None:
            checked: Calibration | str | None = _reused_untimed(cache, found)
            if checked is None:
                checked = _revalidated(bench, found, captured_too)
                if isinstance(checked, Calibration) and cache is not None:
                    kept_measurements.note_timed(cache, found.record)  # timed here, now
            if isinstance(checked, Calibration):
                return _finished(checked, bench, entered, started)
            remeasured = checked
        rows = _time_rows(bench, candidates, captured_too, skipped)
    finally:
        restore_rng_state(rng)
    if not rows:  # no row could run as asked (cuda_graph=on where nothing can be captured)
        return f"no candidate could be timed as asked ({_note(skipped)})"
    chosen, execution, why = choose(rows)  # the measurement's pick; the run's is decide's
    result = Calibration(
        chosen,
        "; ".join(filter(None, (why, _note(skipped, remeasured)))),
        tuple(rows),
        skipped,
        key,
        0.0,
        execution=execution,
        bound=limit.why(budget_s),
        remeasured=remeasured or "",
    )
    result = _finished(result, bench, entered, started)
    if cache is not None and ours_to_write(cache):  # with its cost: what it took to measure
        files.write_json(cache, CALIBRATION, result.cache_json())
        written = kept_measurements.read_calibration(cache)  # a resident process keeps it
        if written is not None:  # and knows it timed it: its next run need not
            kept_measurements.note_timed(cache, written)
    logger.info(
        "precision calibration in %.2f s (%s; process init %.2f s before it): %s",
        result.seconds,
        result.bound,
        result.init_s,
        result.reason,
    )
    return result


def _finished(result: Calibration, bench: _Bench, entered: float, started: float) -> Calibration:
    """``result`` with its cost: seconds since the clock started, the breakdown, init."""
    seconds = bench.clock() - started
    phases = {name: bench.phases.seconds.get(name, 0.0) for name in PHASES[:-1]}
    phases["other"] = max(seconds - sum(phases.values()), 0.0)
    rounded = {name: round(value, 4) for name, value in phases.items()}
    return replace(result, seconds=seconds, phases=rounded, init_s=started - entered)


@dataclass
class _Bench:
    """What every row of one calibration shares: the task, template and batches, the
    clock and its deadline, the time each phase took."""

    task: StepTask
    device: torch.device
    config: TrainerConfig
    scaler: ScalerConfig
    clock: Callable[[], float]
    deadline: float
    budget_s: float
    limit: _Limit
    template: nn.Module | None = None
    batches: list[Any] = field(default_factory=list)
    rows_left: int = 1  # this row and those after it, for its share of what is left
    phases: PhaseClock = field(init=False)  # the seconds of each phase, by ``clock``

    def __post_init__(self) -> None:
        self.phases = PhaseClock(self.clock)

    def row_seconds(self) -> float:
        """This row's share of the time left for its timed steps: what is left to the
        deadline over the rows still to time (each pays its own fixed costs in it)."""
        return max(self.deadline - self.clock(), 0.0) / max(self.rows_left, 1)

    def room_for(self, seconds: float) -> bool:
        """Whether ``seconds`` more (a step, a block) end before the deadline."""
        return self.clock() + seconds < self.deadline


def _time_rows(
    bench: _Bench, candidates: list[PrecisionName], captured_too: bool, skipped: dict[str, str]
) -> list[Measured]:
    """The floor (fp32) eagerly first, always; on CUDA under ``auto`` its captured step
    next, then every other candidate eagerly, then the fastest of those captured
    (``CAPTURED_ROWS`` captured rows in all); a row past the deadline is skipped with why.
    The floor's captured step comes before the 16-bit rows because a launch-bound model's
    fastest step is a graph's and a deadline must not spend itself on slower rows first:
    an H200's `train` of the world model once spent its whole second on three eager
    rows, skipped both captured ones, and trained eager at 13x the captured step's cost."""
    eager_mode = "off" if captured_too else bench.config.cuda_graph
    floor, others = candidates[0], candidates[1:]
    plan = [(floor, eager_mode), *([(floor, "on")] if captured_too else [])]
    plan += [(name, eager_mode) for name in others]
    later = CAPTURED_ROWS - 1 if captured_too else 0  # the other candidates' captured rows
    rows: list[Measured] = []

    def time_row(name: PrecisionName, mode: str, first: bool = False) -> None:
        """Time a row into ``rows``, or say in ``skipped`` why not (the first always runs)."""
        label = f"{name} {'captured' if mode == 'on' else 'eager'}"
        if not first and bench.clock() >= bench.deadline:
            skipped[label] = f"{PAST_DEADLINE} ({bench.budget_s:g} s)"
            return
        row = _time_row(bench, name, mode)
        if isinstance(row, str):
            skipped[label] = row
        else:
            rows.append(row)

    for index, (name, mode) in enumerate(plan):
        bench.rows_left = len(plan) - index + later
        time_row(name, mode, first=index == 0)
    if not captured_too:
        return rows
    eager = [r for r in rows if r.precision != floor and r.execution == "eager"]
    fastest = sorted(eager, key=lambda r: r.median_ms)[:later]
    for row in eager:
        if row not in fastest:
            skipped[f"{row.precision} captured"] = (
                f"not captured: its eager step is not among the {later} fastest after {floor}'s"
            )
    for index, row in enumerate(fastest):
        bench.rows_left = len(fastest) - index
        time_row(row.precision, "on")
    return rows


def _captured_too(device: torch.device, config: TrainerConfig) -> bool:
    """Whether captured rows are timed after the eager ones: on CUDA under
    ``cuda_graph=auto``; elsewhere only the run's own execution is (nothing is timed that
    the run could not use)."""
    return device.type == "cuda" and config.cuda_graph == "auto"


def _reused_untimed(cache: Path | None, kept: Kept) -> Calibration | None:
    """The kept measurement, its winner not timed again, where this process timed that
    winner itself since its file was last written (``kept_measurements.timed_here``:
    the same record kept in a resident process's memory, less than ``RETIME_AFTER_S``
    ago); None: time it again."""
    age = None if cache is None else kept_measurements.timed_here(cache, kept.record)
    if age is None:
        return None
    said = (
        f"the kept {kept.winner.describe()} not timed again: this process timed it "
        f"{age:.0f} s ago, its file and key unchanged since (timed again past "
        f"{kept_measurements.RETIME_AFTER_S / 3600:g} h)"
    )
    logger.info("precision calibration reused from memory: %s", said)
    return replace(kept.found, revalidated=said)


def _revalidated(bench: _Bench, kept: Kept, captured_too: bool) -> Calibration | str:
    """The kept measurement, the row the run would train in timed again: within
    ``REVALIDATE`` of the kept median it is reused (``revalidated`` says so); else why it
    is measured again."""
    found, winner = kept.found, kept.winner
    eager_mode = "off" if captured_too else bench.config.cuda_graph
    mode = "on" if winner.execution.startswith("cuda_graph") else eager_mode
    live = _time_row(bench, winner.precision, mode)
    if isinstance(live, str):
        return f"the kept winner could not run again ({live}): measured again"
    off = live.median_ms / winner.median_ms - 1 if winner.median_ms > 0 else math.inf
    said = (
        f"the kept {winner.describe()} timed {live.median_ms:.3f} ms live ({off:+.0%}"
        f"{' within' if abs(off) <= REVALIDATE else ', over'} {REVALIDATE:.0%})"
    )
    if abs(off) > REVALIDATE:
        logger.info("precision calibration not reused: %s", said)
        return f"{said}: measured again"
    logger.info("precision calibration reused from the cache: %s", said)
    return replace(found, revalidated=said)


def _time_row(bench: _Bench, name: PrecisionName, mode: str) -> Measured | str:
    """One row: ``name`` in the execution ``mode`` asks for, with the run's scaler; a str
    says why it could not run (a step that cannot be captured: then it is not timed)."""
    with bench.phases.phase("build"):
        built = _build_row(bench, name, mode)
    if isinstance(built, str):
        return built
    trainer = built
    loss: LossFn = bench.task.loss
    batches = cycle(bench.batches)

    def step() -> None:
        trainer.step([next(batches)], loss, 0)

    _until_steady(bench, trainer, step)
    with bench.phases.phase("timed"):
        ms, steps = _samples(bench, step)
    used = trainer.execution.used
    deciles = statistics.quantiles(ms, n=10, method="inclusive")  # MIN_TIMED >= 2 points
    median = statistics.median(ms)
    return Measured(
        name, used, median, min(ms), max(ms), steps, deciles[0], deciles[-1], samples=len(ms)
    )


def _build_row(bench: _Bench, name: PrecisionName, mode: str) -> Trainer | str:
    assert bench.template is not None
    policy = PrecisionPolicy.create(name, bench.device, bench.scaler, announce=False)
    model = copy.deepcopy(bench.template).to(bench.device)
    # Uncompiled rows, for compile=on too: compiling every candidate would cost more than
    # the run; such a run then trains the chosen precision compiled and captured.
    row_config = replace(bench.config, cuda_graph=mode, measured_execution=None, compile="off")
    try:
        return task_trainer(bench.task, model, policy, row_config)
    except ExecutionError as exc:
        return exc.obstacle


def _until_steady(bench: _Bench, trainer: Trainer, step: Callable[[], None]) -> None:
    """Untimed steps: ``WARMUP`` for an eager row; for a captured one, until it has been
    captured and replayed ``REPLAYS_BEFORE_TIMING`` times (a fallback to eager ends it)."""
    graphs = trainer.graphs
    if graphs is None:
        with bench.phases.phase("warmup"):
            for _ in range(WARMUP):
                step()
        return
    for _ in range(graphs.warmup + 1 + REPLAYS_BEFORE_TIMING):
        current = trainer.graphs
        if current is None or current.captured_steps >= 1 + REPLAYS_BEFORE_TIMING:
            return
        capturing = current.captured_steps == 0 and current.captures_next([bench.batches[0]])
        with bench.phases.phase("capture" if capturing else "warmup"):
            step()


def _samples(bench: _Bench, step: Callable[[], None]) -> tuple[list[float], int]:
    """The row's timed samples in ms per step, and the steps they cover. The deadline
    and the row's share of the budget end it once it has its minimum."""
    if bench.device.type == "cuda":
        return _event_samples(bench, step)
    ms: list[float] = []
    spent, share = 0.0, bench.row_seconds()
    while len(ms) < MIN_TIMED or (
        len(ms) < bench.limit.timed_steps
        and spent + ms[-1] / 1000 <= share
        and bench.room_for(ms[-1] / 1000)  # the next step, as long as the last, fits
    ):
        began = bench.clock()
        step()
        ms.append((bench.clock() - began) * 1000)
        spent += ms[-1] / 1000
    return ms, len(ms)


def _event_samples(bench: _Bench, step: Callable[[], None]) -> tuple[list[float], int]:
    """On CUDA: blocks of steps between two events, one sync per block: the device's time
    per step as the run sees it, without a sync per step."""
    size = max(1, math.ceil(bench.limit.timed_steps / EVENT_BLOCKS))
    ms: list[float] = []
    began, share, block = bench.clock(), bench.row_seconds(), 0.0
    while len(ms) < EVENT_BLOCKS or (
        len(ms) * size < bench.limit.timed_steps
        and bench.clock() - began + block <= share
        and bench.room_for(block)  # the next block, as long as the last, fits
    ):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        block_began = bench.clock()
        start.record()
        for _ in range(size):
            step()
        end.record()
        end.synchronize()  # timing only: the steps themselves never sync
        ms.append(start.elapsed_time(end) / size)
        block = bench.clock() - block_began
    return ms, len(ms) * size


def _first_signature(task: StepTask, seed: int, device: torch.device) -> list[Any]:
    """The rows' batches (:func:`first_batches`), on ``device``."""
    same = first_batches(task, seed, BATCHES_READ, "precision calibration")
    return [to_device(b, device) for b in same[: WARMUP + MAX_TIMED]]


@dataclass(frozen=True)
class _Limit:
    """Each row's most timed steps, and what set them (for the report)."""

    timed_steps: int
    share: str | None  # the run's share of steps, said; None: the run's length is unknown

    @classmethod
    def for_run(cls, rows: int, expected_steps: int | None) -> _Limit:
        if expected_steps is None:
            return cls(MAX_TIMED, None)
        share = int(expected_steps * RUN_SHARE)
        timed = max(MIN_TIMED, min(MAX_TIMED, share // rows - WARMUP))
        why = f"at most {share} steps ({RUN_SHARE:.0%} of the run's {expected_steps})"
        if share // rows - WARMUP < MIN_TIMED:  # the least that measures anything
            why = (
                f"the minimum, {WARMUP + MIN_TIMED} steps a row, is over {RUN_SHARE:.0%} "
                f"of this {expected_steps}-step run: paid once, then cached"
            )
        return cls(timed, why)

    def why(self, budget_s: float) -> str:
        clock = f"a {budget_s:g} s deadline on everything it did"
        if self.share is None:
            return f"{clock} (the run's length is unknown)"
        return f"{self.share} and {clock}"


def policy_for_run(
    task: StepTask,
    request: PrecisionRequest,
    device: str,
    scaler: ScalerConfig,
    seed: int,
    trainer_config: TrainerConfig,
    expected_steps: int | None = None,
) -> tuple[PrecisionPolicy, Calibration | None]:
    """The run's precision policy, built from one :func:`decide` of the run's ``request``;
    for a measured ``auto`` in one process (:func:`measures_here`), from the timings of
    :func:`calibrate` (or by the rule, saying why it timed nothing). ``decide`` applies
    the floor and the exclusions either way."""
    ranks = distributed.rank_and_world()[1]
    found = None
    if measures_here(request, ranks):
        found = calibrate(
            task,
            device,
            seed,
            trainer_config,
            request,
            expected_steps=expected_steps,
            scaler=scaler,
        )
        if isinstance(found, str):  # nothing timed: the rule decides, less the exclusions
            request = replace(request, note=found)
        else:
            cached = f"cached measurement ({found.revalidated})"
            why = cached if found.cached else found.remeasured
            request = replace(request, note=_note(found.skipped, why))
    calibration = None if isinstance(found, str) else found
    timings = None if calibration is None else calibration.rows
    decision = decide(request, device, timings, ranks=ranks)
    return PrecisionPolicy.from_decision(decision, device, scaler), calibration


def _note(skipped: Mapping[str, str], why: str | None = None) -> str | None:
    """The rows not timed and why, then ``why`` (for a decision's note); None if neither."""
    said = "not timed: " + ", ".join(f"{n} ({w})" for n, w in skipped.items()) if skipped else None
    return "; ".join(n for n in (said, why) if n) or None
