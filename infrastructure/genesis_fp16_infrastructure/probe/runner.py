"""``run_probe``: every variant from the same FP32 weights and seed, measured and graded.

>>> report = run_probe(plugin.probe_setup(None, seed=0), "cpu", steps=10)  # doctest: +SKIP
>>> report.recommended, report.verdict["fp16_autocast"]                    # doctest: +SKIP
('bf16_autocast', 'green')

A daemon that wants a verdict before an agent's first low-precision run calls
``run_probe`` with the agent's ``ProbeSetup`` and exports ``report.verdict`` (one colour
per variant) and ``report.recommended``; ``report.table()`` is the probe's table and
``report.to_json()`` its JSON.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from genesis_fp16_infrastructure.errors import ProbeError
from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.probe import measures as ms
from genesis_fp16_infrastructure.probe.measures import FP16_MAX, Activations, Measures
from genesis_fp16_infrastructure.probe.variants import (
    Variant,
    build_variants,
    forward_loss,
    prepare_model,
)
from genesis_fp16_infrastructure.probe.verdict import (
    Candidate,
    Thresholds,
    grade_measures,
    recommend,
)
from genesis_fp16_infrastructure.training.run.task import to_device

logger = logging.getLogger(__name__)

_OPTIMIZER_CLASSES: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": torch.optim.SGD,
    "adam": torch.optim.Adam,
}
OPTIMIZERS = tuple(_OPTIMIZER_CLASSES)


@dataclass(frozen=True)
class VariantResult:
    """One variant: how it ran, what it measured, and the colour of each measure."""

    name: str
    family: str
    precision: PrecisionName
    fp32_modules: tuple[str, ...]
    measures: Measures
    verdicts: Mapping[str, str]
    overall: str
    problems: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class ProbeReport:
    """Everything the probe found; ``recommended`` and ``verdict`` are what a daemon exports.

    ``verdict`` maps each variant to its overall colour; ``reasons`` says, for every
    variant cheaper than the recommended one, which measures and modules stopped it.
    """

    device: str
    steps: int
    seed: int
    optimizer: str
    learning_rate: float
    noise_floor: float
    sign_noise: float
    variants: tuple[VariantResult, ...]
    recommended: str
    reasons: Mapping[str, tuple[str, ...]]
    blocking_modules: Mapping[str, tuple[str, ...]]
    deterministic: bool = True

    @property
    def verdict(self) -> dict[str, str]:
        return {v.name: v.overall for v in self.variants}

    def variant(self, name: str) -> VariantResult:
        for found in self.variants:
            if found.name == name:
                return found
        known = ", ".join(v.name for v in self.variants)
        raise KeyError(f"no variant {name!r} in this report; variants: {known}")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; non-finite numbers become strings ("inf", "nan")."""
        out = asdict(self)
        out["verdict"] = self.verdict
        return _finite_json(out)

    def table(self) -> str:
        """A fixed-width table, one row per variant; ``~`` marks amber and ``!`` red."""
        widths = (30, *(width for _, width, *_ in _COLUMNS), 9, 7)
        rows = [["variant", *(title for title, *_ in _COLUMNS), "ms/step", "verdict"]]
        for var in self.variants:
            m, v = var.measures, var.verdicts
            cells = [_num(getattr(m, name), v.get(key, ""), f) for _, _, name, key, f in _COLUMNS]
            step_ms = _num(m.seconds_per_step * 1e3, "", "{:.1f}")
            rows.append([var.name, *cells, step_ms, var.overall if var.error is None else "error"])
        lines = [  # the variant's name left-aligned, every other cell right-aligned
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
            for row in rows
        ]
        lines.append("")
        lines.append(
            f"device {self.device}; {self.steps} {self.optimizer} steps at lr "
            f"{self.learning_rate:g}; minibatch noise floor {self.noise_floor:.3g} "
            f"(gradient), {self.sign_noise:.3g} (sign flips)"
        )
        for var in self.variants:
            if var.error:
                lines.append(f"{var.name}: did not run: {var.error}")
            elif var.measures.scale_halvings is not None:
                lines.append(
                    f"{var.name}: loss scale {var.measures.loss_scale:g} after "
                    f"{var.measures.scale_halvings} halvings from 65536"
                    + (
                        f", {var.measures.skipped_steps} skipped steps"
                        if var.measures.skipped_steps
                        else ""
                    )
                )
        lines.append(f"recommended: {self.recommended}")
        for name, why in self.reasons.items():
            lines.append(f"  not {name}: {'; '.join(why)}")
        return "\n".join(lines)


def _finite_json(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, Mapping):
        return {str(k): _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite_json(v) for v in obj]
    return obj


_MARK = {"green": " ", "amber": "~", "red": "!", "n/a": " "}
# The table's measure columns: title, width, the Measures field, its verdict, its format.
_COLUMNS = (
    ("loss err", 9, "loss_rel_err", "loss", "{:.1e}"),
    ("grad/noise", 10, "grad_noise_ratio", "grad_error", "{:.1e}"),
    ("worst cos", 9, "worst_layer_cosine", "layer_cosine", "{:.4f}"),
    ("flushed", 8, "flushed_fraction", "flushed", "{:.1%}"),
    ("flips/noise", 11, "sign_flip_ratio", "sign_flips", "{:.2f}"),
    ("act max", 8, "activation_max", "headroom", "{:.1e}"),
    ("drift/noise", 11, "drift_noise_ratio", "drift", "{:.1e}"),
    ("upd cos", 8, "update_cosine", "update_cosine", "{:.4f}"),
    ("unchanged", 9, "unchanged_fraction", "unchanged", "{:.1%}"),
)


def _num(value: float, colour: str, fmt: str) -> str:
    text = "-" if math.isnan(value) else fmt.format(value)
    return text + _MARK.get(colour, " ")


@dataclass
class _Run:
    """The raw numbers of one variant, before comparison with the reference."""

    loss: float
    grads: dict[str, torch.Tensor]
    activations: Activations
    scale: float
    halvings: int | None
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    unchanged: dict[str, float] = field(default_factory=dict)  # per parameter, mean per step
    unchanged_total: float = math.nan
    skipped: int = 0
    # The fastest step: on a shared machine the slower ones time the neighbours.
    seconds_per_step: float = math.nan


class ProbeSetup(Protocol):
    """What the probe reads from an agent's setup: the contract's ``ProbeSetup``
    (``plugin_api``) is one. A protocol here, so that the probe, a component, does not
    import the contract above it."""

    @property
    def build_model(self) -> Callable[[], nn.Module]: ...
    @property
    def loss(self) -> Callable[[nn.Module, Any], torch.Tensor]: ...
    @property
    def batches(self) -> Sequence[Any]: ...
    @property
    def split_batch(self) -> Callable[[Any], tuple[Any, Any]] | None: ...
    @property
    def components(self) -> Mapping[str, Sequence[str]]: ...
    @property
    def learning_rate(self) -> float: ...


@dataclass(frozen=True)
class _Context:
    setup: ProbeSetup
    base: nn.Module
    frozen: Any
    train: Sequence[Any]
    steps: int
    seed: int
    device: torch.device
    optimizer: str
    start: dict[str, torch.Tensor]  # the FP32 weights every variant starts from


def run_probe(
    setup: ProbeSetup,
    device: str | torch.device = "cpu",
    steps: int = 10,
    seed: int = 0,
    *,
    optimizer: str = "sgd",
    only: Sequence[str] | None = None,
) -> ProbeReport:
    """Run every precision variant of the agent's model and compare it with FP32.

    ``only`` limits the low-precision variants to these names (the two FP32 runs always
    run). Deterministic algorithms are on, and on CUDA TF32 is off, for the whole probe;
    both settings and the global RNG state are restored afterwards.
    """
    if steps < 1:
        raise ProbeError(f"steps={steps}: the probe needs at least 1 optimizer step")
    if optimizer not in OPTIMIZERS:
        raise ProbeError(f"optimizer {optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
    if not setup.batches:
        raise ProbeError("the agent's ProbeSetup has no batches")
    dev = torch.device(device)
    variants = _select(build_variants(setup.components), only)
    with _deterministic(dev):
        torch.manual_seed(seed)
        base = setup.build_model().to(dev)
        _check_fp32(base)
        frozen = to_device(setup.batches[0], dev)
        train = [to_device(b, dev) for b in setup.batches[1:]] or [frozen]
        ctx = _Context(setup, base, frozen, train, steps, seed, dev, optimizer, ms.snapshot(base))
        ref = _run_variant(variants[0], ctx)
        noise_floor, sign_noise = _noise_floor(variants[0], ctx, ref)
        runs: list[_Run | str] = [ref]
        for variant in variants[1:]:
            runs.append(_run_or_error(variant, ctx))
    return _report(variants, runs, ctx, noise_floor, sign_noise, Thresholds())


def _select(variants: list[Variant], only: Sequence[str] | None) -> list[Variant]:
    if only is None:
        return variants
    names = [v.name for v in variants]
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ProbeError(f"unknown variant(s) {', '.join(unknown)}; variants: {', '.join(names)}")
    return [v for v in variants if v.family == "fp32" or v.name in only]


@contextmanager
def _deterministic(device: torch.device) -> Iterator[None]:
    was = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.use_deterministic_algorithms(True)
    if device.type == "cuda":  # the FP32 reference must be real FP32, not TF32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def _check_fp32(model: nn.Module) -> None:
    wrong = [f"{n} ({p.dtype})" for n, p in model.named_parameters() if p.dtype != torch.float32]
    if wrong:
        raise ProbeError(
            f"build_model must return an FP32 model; these are not: {', '.join(wrong[:5])}"
        )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_or_error(variant: Variant, ctx: _Context) -> _Run | str:
    # A variant that cannot run (an op without a 16-bit kernel, say) is reported as such.
    try:
        return _run_variant(variant, ctx)
    except (ProbeError, RuntimeError, TypeError, ValueError) as exc:
        logger.warning("probe variant %s did not run: %s", variant.name, exc)
        return f"{type(exc).__name__}: {exc}".splitlines()[0]


START_SCALE = 2.0**16
MIN_SCALE = 1.0


@dataclass(frozen=True)
class ScaleSearch:
    """The outcome of a search: the first scale with finite gradients, and those gradients.

    ``grads`` are still multiplied by ``scale``. ``finite`` is False when even
    ``MIN_SCALE`` overflowed; then ``scale`` is that floor and ``grads`` are its.
    """

    scale: float
    halvings: int
    finite: bool
    grads: tuple[torch.Tensor | None, ...]


def all_finite(grads: Sequence[torch.Tensor | None]) -> bool:
    """True when every gradient element is finite. Reads the device: one host sync."""
    present = [g for g in grads if g is not None]
    if not present:
        return True
    return bool(torch.stack([torch.isfinite(g).all() for g in present]).all())


def search_loss_scale(
    scaled_grads: Callable[[float], Sequence[torch.Tensor | None]],
    hopeless: Callable[[], bool] | None = None,
) -> ScaleSearch:
    """The fp16 loss-scale search: call ``scaled_grads(scale)`` with ``START_SCALE``,
    half of it, ... until the gradients are finite. It answers one question for the
    probe: how large a loss scale does this model's backward pass tolerate in fp16 on
    this batch? Each try is one forward and backward pass.

    ``scaled_grads`` runs the forward and the backward of ``loss * scale`` and returns
    the resulting gradients. Stops at ``MIN_SCALE``: a model whose gradients overflow
    even there is reported with ``finite=False`` rather than scaled below it.
    ``hopeless()``, asked after a non-finite try, ends the search early: when the
    forward pass itself overflowed, no loss scale can help.

    >>> result = search_loss_scale(lambda scale: [torch.tensor([scale * 2.0**10])
    ...                                           .half().float()])
    >>> result.scale, result.halvings
    (32.0, 11)
    """
    scale, halvings = START_SCALE, 0
    while True:
        grads = tuple(scaled_grads(scale))
        if all_finite(grads):
            return ScaleSearch(scale, halvings, True, grads)
        if scale / 2 < MIN_SCALE or (hopeless is not None and hopeless()):
            logger.warning("fp16 gradients overflow even at loss scale %g", scale)
            return ScaleSearch(scale, halvings, False, grads)
        scale /= 2
        halvings += 1


def _frozen_pass(variant: Variant, model: nn.Module, ctx: _Context, batch: Any) -> _Run:
    """Loss, gradients and activations on ``batch``, untrained; fp16 searches its loss scale."""
    seen: dict[str, Any] = {}

    def scaled_grads(scale: float) -> list[torch.Tensor | None]:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(ctx.seed)
        with ms.record_activations(model) as rec:
            loss = forward_loss(variant, model, ctx.setup.loss, batch, ctx.device.type)
        (loss * scale).backward()
        seen["loss"], seen["acts"] = float(loss.detach()), rec["result"]
        return [p.grad for p in model.parameters()]

    if variant.scaled:
        found = search_loss_scale(scaled_grads, hopeless=lambda: not math.isfinite(seen["loss"]))
        scale, halvings = found.scale, found.halvings
    else:
        scaled_grads(1.0)
        scale, halvings = 1.0, None
    return _Run(seen["loss"], ms.gradients(model, scale), seen["acts"], scale, halvings)


def _run_variant(variant: Variant, ctx: _Context) -> _Run:
    model = prepare_model(variant, ctx.base)
    run = _frozen_pass(variant, model, ctx, ctx.frozen)
    _train(variant, model, ctx, run)
    run.params = ms.snapshot(model)
    return run


def _train(variant: Variant, model: nn.Module, ctx: _Context, run: _Run) -> None:
    """N optimizer steps; fp16 skips a step with non-finite gradients and halves its scale."""
    named = list(model.named_parameters())
    opt = _OPTIMIZER_CLASSES[ctx.optimizer](model.parameters(), lr=ctx.setup.learning_rate)
    scale = run.scale
    times: list[float] = []
    same = {n: 0 for n, _ in named}  # elements a taken step left unchanged, per parameter
    taken, numel = 0, sum(p.numel() for _, p in named)
    for i in range(ctx.steps):
        batch = ctx.train[i % len(ctx.train)]
        before = [p.detach().clone() for _, p in named]  # outside the timed region
        torch.manual_seed(ctx.seed + 1 + i)
        _sync(ctx.device)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = forward_loss(variant, model, ctx.setup.loss, batch, ctx.device.type)
        (loss * scale).backward()
        finite = True
        if variant.scaled:
            grads = [p.grad for _, p in named if p.grad is not None]
            for grad in grads:
                grad.div_(scale)  # in the gradient's own dtype: fp16 for the pure variant
            finite = all_finite(grads)  # a host sync, as GradScaler's step has
        if finite:
            opt.step()
        _sync(ctx.device)
        times.append(time.perf_counter() - start)
        if not finite:
            run.skipped += 1
            scale /= 2
            continue
        taken += 1
        for (name, p), old in zip(named, before, strict=True):
            same[name] += int((p.detach() == old).sum())
    run.seconds_per_step = min(times)
    if taken:
        run.unchanged = {n: same[n] / max(p.numel(), 1) / taken for n, p in named}
        run.unchanged_total = sum(same.values()) / max(numel, 1) / taken


def halve_batch(batch: Any) -> tuple[Any, Any]:
    """``ProbeSetup.split_batch``'s default: every tensor of ``batch`` (in its tuples, named
    tuples, lists and dicts) cut in two along its first dimension, ``len // 2`` rows first.

    >>> halve_batch((torch.arange(5), "ids"))
    ((tensor([0, 1]), 'ids'), (tensor([2, 3, 4]), 'ids'))
    """
    first = tree_map_only(torch.Tensor, lambda t: t[: len(t) // 2], batch)
    return first, tree_map_only(torch.Tensor, lambda t: t[len(t) // 2 :], batch)


def _noise_floor(fp32: Variant, ctx: _Context, ref: _Run) -> tuple[float, float]:
    """||g(A) - g(B)|| / ||g|| and the sign disagreement between the two half-batches."""
    halves = [
        _frozen_pass(fp32, prepare_model(fp32, ctx.base), ctx, to_device(half, ctx.device)).grads
        for half in (ctx.setup.split_batch or halve_batch)(ctx.setup.batches[0])
    ]
    gap = {n: halves[0][n] - halves[1][n] for n in ref.grads}
    floor = ms.ratio(ms.norm(gap), ms.norm(ref.grads))
    return floor, ms.sign_flip_fraction(halves[0], halves[1])


def _headroom(variant: Variant, run: _Run, ref: _Run) -> tuple[str, float]:
    """The fp16 module nearest to (or first past) 65504, valued by its true magnitude."""
    acts = run.activations
    if variant.dtype != torch.float16:
        return acts.largest()
    over = acts.first_over(FP16_MAX, torch.float16)
    if over is None:
        return acts.largest(only=torch.float16)
    # The fp16 value is inf; FP32's value of the same output shows how far past it was.
    true = ref.activations.max_abs.get(over, math.inf)
    return over, true if true > FP16_MAX else math.inf


def _measure(
    variant: Variant, run: _Run, ref: _Run, ctx: _Context, noise: float, sign_noise: float
) -> Measures:
    errors = ms.layer_errors(run.grads, ref.grads)
    cos_layer, cos = ms.worst_layer_cosine(run.grads, ref.grads)
    grad_err = ms.relative_distance(run.grads, ref.grads)
    flips = ms.sign_flip_fraction(run.grads, ref.grads)
    act_module, act_max = _headroom(variant, run, ref)
    drift = ms.parameter_drift(run.params, ref.params, ctx.start)
    per_layer_drift = ms.layer_errors(run.params, ref.params)
    excess = {n: run.unchanged.get(n, math.nan) - ref.unchanged.get(n, 0.0) for n in ref.params}
    return Measures(
        loss=run.loss,
        loss_rel_err=ms.relative_error(run.loss, ref.loss),
        grad_err=grad_err,
        grad_noise_ratio=ms.ratio(grad_err, noise),
        worst_error_layer=max(errors, key=lambda n: errors[n]),
        worst_cosine_layer=cos_layer,
        worst_layer_cosine=cos,
        flushed_fraction=ms.flushed_fraction(run.grads, ref.grads),
        sign_flip_fraction=flips,
        sign_flip_ratio=ms.ratio(flips, sign_noise),
        activation_max=act_max,
        activation_module=act_module,
        loss_scale=run.scale if variant.scaled else math.nan,
        scale_halvings=run.halvings,
        param_drift=drift,
        drift_noise_ratio=ms.ratio(drift, noise) if not math.isnan(drift) else math.nan,
        drift_layer=max(per_layer_drift, key=lambda n: per_layer_drift[n]),
        update_cosine=ms.update_cosine(run.params, ref.params, ctx.start),
        unchanged_fraction=run.unchanged_total,
        unchanged_excess=run.unchanged_total - ref.unchanged_total,
        unchanged_layer=max(excess, key=lambda n: excess[n] if not math.isnan(excess[n]) else -1.0),
        skipped_steps=run.skipped,
        seconds_per_step=run.seconds_per_step,
        layer_errors=errors,
    )


def _report(
    variants: Sequence[Variant],
    runs: Sequence[_Run | str],
    ctx: _Context,
    noise: float,
    sign_noise: float,
    thresholds: Thresholds,
) -> ProbeReport:
    ref = runs[0]
    assert isinstance(ref, _Run)
    results: list[VariantResult] = []
    candidates: list[Candidate] = []
    for variant, run in zip(variants, runs, strict=True):
        named = (variant.name, variant.family, variant.precision, variant.fp32_prefixes)
        if isinstance(run, str):
            results.append(
                VariantResult(*named, Measures(), {}, "red", (f"red: did not run: {run}",), run)
            )
            why = (f"did not run: {run}",)
            candidates.append(Candidate(variant.name, variant.cost_rank, "red", math.nan, why, ()))
            continue
        measured = _measure(variant, run, ref, ctx, noise, sign_noise)
        colours, problems, blocking = grade_measures(measured, variant.precision, thresholds)
        red = any(c == "red" for c in colours.values())
        overall = "green" if not problems else ("red" if red else "amber")
        results.append(VariantResult(*named, measured, colours, overall, problems))
        if variant.family != "fp32":
            seconds = measured.seconds_per_step
            candidates.append(
                Candidate(variant.name, variant.cost_rank, overall, seconds, problems, blocking)
            )
    # Both FP32 runs time the same arithmetic: their fastest step is FP32's cost here.
    fp32_seconds = min(r.seconds_per_step for r in runs[:2] if isinstance(r, _Run))
    choice = recommend(candidates, fp32_seconds, thresholds.speed_tolerance)
    return ProbeReport(
        device=str(ctx.device),
        steps=ctx.steps,
        seed=ctx.seed,
        optimizer=ctx.optimizer,
        learning_rate=ctx.setup.learning_rate,
        noise_floor=noise,
        sign_noise=sign_noise,
        variants=tuple(results),
        recommended=choice.variant,
        reasons=choice.reasons,
        blocking_modules=choice.blocking_modules,
    )
