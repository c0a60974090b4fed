"""The captured step checked against the eager step before a run trusts it.

A captured step was verified bit for bit against eager on one H100, for the model and
torch of that day (``benchmarks/results/h100-2026-11-23.md``). A user's GPU, driver, torch or
model differs, and a wrong replay is silent: the numbers are merely different. So the
first time a run would train captured for a given key (device, torch version, model
shapes, batch shapes, precision, execution, scaler settings), ``fit()`` runs a few steps
of the run's own state twice, on copies: once eagerly, once captured, from the same
parameters, optimizer state, loss scale and random state::

    verdict = verify_run(task, trainer, 0, calibration=Path("state/precision_calibration.json"))
    verdict.passed   # False: the run goes eager (fallback 'verification_mismatch')
    verdict.detail   # 'step 7: parameters differ (integer sum of the bits ...)'

- **Steps**: ``VERIFY_STEPS`` (8): the graphs' 3 eager warm-up steps, the capture, and 4
  replays. In fp16 step ``OVERFLOW_STEP`` (a replay) multiplies the loss by ``2**64``
  (a device tensor the graph reads, 1.0 on every other step, so both runs call one loss
  function): its scaled gradients overflow and the step is skipped, so the skip, the
  backoff and the counters of an overflow are compared too.
- **Equal, bit for bit** (``cuda_graph``): after every step the two runs' parameters,
  optimizer state and loss scale are compared by an exact digest (the integer sum of
  their bits: one flipped bit changes it), with the step's loss, skipped count and
  gradient norm; after the last step every tensor is compared with ``torch.equal``.
- **Within a tolerance** (``cuda_graph_compiled``): Inductor's fused kernels round
  differently from eager ones, so the compiled captured step is held to the same
  skipped steps and each step's loss within ``COMPILED_LOSS_RTOL`` of eager's. These
  tolerances are stated, not yet measured: no GPU has run them (``make gpu-check``'s
  ``verify compiled`` line measures the difference and checks it).
- **Cached**: the verdict, a pass or a real difference, is kept per key in ``cache``
  (beside the calibration cache); a run with a known key trusts the verdict. A captured
  copy that raised (or fell back from its capture) fails this run's verification but is
  not kept: the next run verifies again. ``genesis-fp16
  precision reset`` forgets it.
- **Cost**: two copies of the model and its optimizer state beside the run's, and
  2 x 8 steps (plus one more compile for ``compile=on``), once per key. The global
  random state is restored afterwards: the run is the run it would have been.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.agent_folder.layout import CAPTURE_VERDICTS
from genesis_fp16_infrastructure.precision_names import LOSS_SCALED
from genesis_fp16_infrastructure.training.precision import kept_measurements
from genesis_fp16_infrastructure.training.precision.kept_measurements import CaptureVerdict
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.rng import capture_rng_state, restore_rng_state
from genesis_fp16_infrastructure.training.run.task import (
    TrainingTask,
    batch_shapes,
    first_batches,
    to_device,
)
from genesis_fp16_infrastructure.training.step.trainer import LossFn, Trainer

logger = logging.getLogger(__name__)

VERIFY_STEPS = 8
OVERFLOW_STEP = 6  # 1-based: a replay (after 3 warm-up steps and the capture)
BOOST = 2.0**64
CAPTURED = ("cuda_graph", "cuda_graph_compiled")
# Stated for the compiled captured step against the eager uncompiled one; unmeasured.
COMPILED_LOSS_RTOL: Mapping[str, float] = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 1e-2}


def verify_run(
    task: TrainingTask,
    trainer: Trainer,
    seed: int,
    calibration: Path | None,
) -> CaptureVerdict | None:
    """Verify ``trainer``'s captured step (or read the verdict kept beside the
    ``calibration`` cache: :func:`verification_cache`); None when it is eager.

    On a failed verdict the trainer falls back to eager steps (``execution.fallback`` is
    ``verification_mismatch``, the reason carries the detail); its state is untouched.
    """
    if trainer.execution.used not in CAPTURED:
        return None
    # One batch signature: 8 steps over several would all be warm-ups, nothing replayed.
    same = first_batches(task, seed, VERIFY_STEPS, "captured-step verification")
    batches = [to_device(b, trainer.policy.device) for b in same]
    key = verification_key(trainer, batches[0])
    cache = verification_cache(calibration)
    verdict = read_verdict(cache, key)
    if verdict is None:
        verdict, measured = _verify(task, trainer, batches, key)
        if cache is not None and measured:  # a capture that raised is no verdict to keep
            write_verdict(cache, verdict)
    how = "cached" if verdict.cached else f"{verdict.steps} steps"
    if verdict.passed:
        logger.info("captured step verified against eager (%s): %s", how, verdict.detail)
    else:
        trainer.fall_back_to_eager(
            "verification_mismatch",
            f"the captured step differed from the eager step ({how}): {verdict.detail}",
        )
    return verdict


def _verify(
    task: TrainingTask,
    trainer: Trainer,
    batches: list[Any],
    key: Mapping[str, str],
) -> tuple[CaptureVerdict, bool]:
    """The verdict, and whether it was measured: False when the captured copy raised or
    did not run captured (a failed capture says nothing lasting about the key: the next
    run tries again), True for a pass or a real difference between the steps."""
    compiled = trainer.execution.used == "cuda_graph_compiled"
    rtol = COMPILED_LOSS_RTOL[trainer.policy.name] if compiled else None
    overflow = OVERFLOW_STEP if trainer.policy.name in LOSS_SCALED else None
    rng = capture_rng_state()
    own = [g.get_state() for g in trainer.generators]
    measured: list[float] = []
    compared = False
    try:
        reference = _copy_trainer(task, trainer, "eager")
        candidate = _copy_trainer(task, trainer, trainer.execution.used)
        detail = compare_steps(
            reference, candidate, batches, task.loss, rtol, overflow, measured=measured
        )
        if candidate.execution.fallback is not None:  # its capture raised: it ran eagerly
            detail = f"the captured copy did not run captured: {candidate.execution.reason}"
        elif getattr(candidate.graphs, "captured_steps", 1) == 0:
            detail = f"the captured copy replayed none of its {VERIFY_STEPS} steps"
        else:
            compared = True
    except RuntimeError as exc:  # a capture that raises here fails the verification
        detail = f"the captured copy raised: {exc}"
    finally:
        restore_rng_state(rng)
        for generator, state in zip(trainer.generators, own, strict=True):
            generator.set_state(state)
    if detail is None:
        what = "bit for bit"
        if rtol is not None:
            what = f"losses within rtol {rtol:g} (largest difference {measured[0]:.3g})"
        skip = f", an overflow at step {overflow}" if overflow else ""
        return CaptureVerdict(
            True, f"{VERIFY_STEPS} steps equal {what}{skip}", key, VERIFY_STEPS
        ), True
    return CaptureVerdict(False, detail, key, VERIFY_STEPS), compared


def compare_steps(
    reference: Trainer,
    candidate: Trainer,
    batches: Sequence[Any],
    loss_fn: LossFn,
    rtol: float | None = None,
    overflow_step: int | None = OVERFLOW_STEP,
    measured: list[float] | None = None,
) -> str | None:
    """Run ``VERIFY_STEPS`` steps in each trainer from one random state (the global
    generators' and the task's own); None when they agree, else the first difference.
    ``rtol`` None: bit for bit; else the skipped steps equal
    and each step's loss within ``rtol``. ``overflow_step`` (1-based) boosts that step's
    loss by ``BOOST`` (an fp16 overflow). ``measured`` gets the largest relative
    difference of a step's loss appended (the compiled step's tolerance, measured)."""
    rng = capture_rng_state()
    own = [g.get_state() for g in reference.generators]  # the task's own: both start there
    seen = _run(reference, batches, loss_fn, overflow_step, exact=rtol is None)
    restore_rng_state(rng)
    for generator, state in zip(candidate.generators, own, strict=True):
        generator.set_state(state)
    got = _run(candidate, batches, loss_fn, overflow_step, exact=rtol is None)
    if measured is not None:  # the largest relative difference of a step's loss
        measured.append(largest_loss_difference(seen, got))
    for number, (want, have) in enumerate(zip(seen, got, strict=True), start=1):
        problem = _differs(want, have, rtol)
        if problem is not None:
            return f"step {number}: {problem}"
    if rtol is None:
        return _final_difference(reference, candidate)
    return None


def _run(
    trainer: Trainer,
    batches: Sequence[Any],
    loss_fn: LossFn,
    overflow_step: int | None,
    exact: bool,
) -> list[dict[str, Any]]:
    device = trainer.policy.device
    boost = torch.ones((), device=device)

    def boosted(model: nn.Module, batch: Any) -> torch.Tensor:  # one function: graphs bind it
        return loss_fn(model, batch) * boost

    records = []
    for number in range(1, VERIFY_STEPS + 1):
        boost.fill_(BOOST if number == overflow_step else 1.0)
        trainer.step([batches[(number - 1) % len(batches)]], boosted, 0)
        summary = trainer.summary(reset_interval=True)
        record: dict[str, Any] = {
            "skipped steps": summary.skipped_steps,
            "loss": summary.train_loss,
            "loss scale": summary.loss_scale,
        }
        if exact:
            record["gradient norm"] = summary.grad_norm
            record["parameters"] = _digest(list(trainer.model.parameters()))
            record["optimizer state"] = _digest(_optimizer_tensors(trainer))
        records.append(record)
    return records


def largest_loss_difference(
    seen: Sequence[Mapping[str, Any]], got: Sequence[Mapping[str, Any]]
) -> float:
    """The largest |a - b| / max(|a|, |b|) of the steps' finite losses (0.0: all equal)."""
    worst = 0.0
    for want, have in zip(seen, got, strict=True):
        a, b = float(want["loss"]), float(have["loss"])
        if math.isfinite(a) and math.isfinite(b) and a != b:
            worst = max(worst, abs(a - b) / max(abs(a), abs(b)))
    return worst


def _differs(want: Mapping[str, Any], have: Mapping[str, Any], rtol: float | None) -> str | None:
    for name, value in want.items():
        other = have[name]
        if rtol is not None and name == "loss":
            if not _close(value, other, rtol):
                return f"loss {other!r} against eager {value!r} (rtol {rtol:g})"
        elif rtol is not None and name == "loss scale":
            continue  # a scale follows the skips, which are compared
        elif not _close(value, other, 0.0):
            return f"{name} differ: {other!r} against eager {value!r}"
    return None


def _close(a: float, b: float, rtol: float) -> bool:
    """Equal within ``rtol`` (0.0: equal), two NaNs included."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= rtol * max(abs(a), abs(b))


def _digest(tensors: Sequence[torch.Tensor]) -> int:
    """The integer sum of the tensors' bits (one host read): a flipped bit changes it."""
    total = torch.zeros((), dtype=torch.int64, device=tensors[0].device if tensors else "cpu")
    for tensor in tensors:
        flat = tensor.detach().reshape(-1)
        size = flat.element_size()
        view = {8: torch.int64, 4: torch.int32, 2: torch.int16}.get(size, torch.uint8)
        total += flat.view(view).to(torch.int64).sum()
    return int(total.item())


def _optimizer_tensors(trainer: Trainer) -> list[torch.Tensor]:
    return [
        value
        for optimizer in trainer.optimizers
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]


def _final_difference(reference: Trainer, candidate: Trainer) -> str | None:
    pairs = [
        ("parameter", reference.model.state_dict(), candidate.model.state_dict()),
        ("optimizer state", _indexed(reference), _indexed(candidate)),
    ]
    for what, want, have in pairs:
        for name, tensor in want.items():
            if not torch.equal(tensor, have[name]):
                return f"after {VERIFY_STEPS} steps, {what} {name} differs"
    if reference.scaler.get_scale() != candidate.scaler.get_scale():
        return "after the steps, the loss scales differ"
    return None


def _indexed(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {str(i): t for i, t in enumerate(_optimizer_tensors(trainer))}


def _copy_trainer(task: TrainingTask, trainer: Trainer, execution: str) -> Trainer:
    """A trainer over copies of ``trainer``'s model, optimizer and scaler state, stepping
    as ``execution`` says (eager, cuda_graph or cuda_graph_compiled)."""
    model = copy.deepcopy(trainer.model)
    optimizers = task.build_optimizers(model)
    for optimizer, source in zip(optimizers, trainer.optimizers, strict=True):
        optimizer.load_state_dict(copy.deepcopy(source.state_dict()))
    policy = PrecisionPolicy.create(
        trainer.policy.name, trainer.policy.device, trainer.scaler.config, announce=False
    )
    policy.scaler.load_state_dict(trainer.scaler.state_dict())
    config = replace(
        trainer.config,
        cuda_graph="off" if execution == "eager" else "on",
        compile="on" if execution == "cuda_graph_compiled" else "off",
        measured_execution=None,
    )
    return Trainer(model, optimizers, policy, config, (), None, trainer.generators)


def verification_key(trainer: Trainer, batch: Any) -> dict[str, str]:
    """What a verdict holds for: device (its name and compute capability on CUDA), torch,
    model and batch shapes, precision, execution and the scaler's settings."""
    device = trainer.policy.device
    name = device.type
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        name = f"cuda {torch.cuda.get_device_name(index)} sm_{major}{minor}"
    params = [(n, tuple(p.shape), str(p.dtype)) for n, p in trainer.model.named_parameters()]
    return {
        "device": name,
        "torch": str(torch.__version__),  # a str subclass: not JSON to every encoder
        "model": hashlib.sha256(repr(params).encode()).hexdigest()[:16],
        "batch": batch_shapes(batch),
        "precision": trainer.policy.name,
        "execution": trainer.execution.used,
        "scaler": json.dumps(asdict(trainer.scaler.config), sort_keys=True),
        "optimizers": ",".join(type(o).__name__ for o in trainer.optimizers),
    }


def _key_id(key: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(key), sort_keys=True).encode()).hexdigest()[:16]


def read_verdict(cache: Path | None, key: Mapping[str, str]) -> CaptureVerdict | None:
    """The cached verdict for exactly ``key``, or None (none without a usable cache: another
    version; an unusable file is set aside as ``captured_step_verified.json.unusable-*``
    and reported)."""
    if cache is None:
        return None
    found = kept_measurements.read_capture_verdicts(cache).get(_key_id(key))
    return found if found is not None and dict(found.key) == dict(key) else None


def write_verdict(cache: Path, verdict: CaptureVerdict) -> None:
    """Add ``verdict`` to the cache file (atomically), keeping the other keys'."""
    verdicts = {**kept_measurements.read_capture_verdicts(cache), _key_id(verdict.key): verdict}
    kept_measurements.write_capture_verdicts(cache, verdicts)


def verification_cache(calibration_cache: Path | None) -> Path | None:
    """Where the verdicts are kept: beside the calibration cache (None: not kept)."""
    if calibration_cache is None:
        return None
    return calibration_cache.with_name(CAPTURE_VERDICTS.name)
