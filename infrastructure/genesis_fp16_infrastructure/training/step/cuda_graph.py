"""One whole training step captured into a CUDA graph and replayed, per batch signature.

An eager step of a small model is host-bound: each of its ~100-200 kernels costs host
time to launch, while the matmuls are tiny (``benchmarks/results/h100-2026-11-22.md``: 4.8-10
ms eager against 0.72-0.77 ms replayed, at batch 64 on an H100). Replaying the step from
one graph launches it once. What the trainer hands over is a *device-only* step
(``body(micro_batches)``: forward, scaled backward, unscale and found-inf check, clip,
optimizer step that skips on found-inf, scale update, device counters), which already
runs without a host sync; this module decides when to run it eagerly, when to capture
it and when to replay it::

    graphs = StepGraphs(torch.device("cuda"))
    how = graphs.run(body, micro_batches)   # "warmup", "captured", "replayed" or "eager"

- The first ``warmup`` calls of each batch signature run eagerly on a side stream
  (optimizer state, cuBLAS workspaces and autocast's first casts are allocated there,
  outside any graph), as torch's CUDA-graph notes ask.
- Then the step is captured once with the batch copied into static buffers, and
  replayed at once: capturing runs no kernel, so the replay *is* that step.
- Later calls with the same signature copy the batch into the static buffers and
  replay. The signature is the batch's structure, the shape, dtype and device of every
  tensor, and the value of every other leaf (an int in a batch is baked into a graph).
- At most ``max_graphs`` signatures are captured (an epoch's last partial batch is a
  second one; an eval-shaped batch a third); a further signature runs eagerly and is
  counted in ``eager_steps``. Every graph draws on one shared memory pool (below).
- ``reset()`` drops every graph: call it whenever tensors the graphs read are replaced
  rather than written in place (loading a checkpoint, a guard rollback). The next
  calls warm up and capture again.
- ``bind(loss_fn)`` ties the graphs to the loss function the body calls: a replay runs
  the loss that was captured, whatever the caller passes, so another one is refused
  (``ValueError``) until ``reset()``.

One memory pool, checked: the graphs replay in whatever order the batches come (full,
full, full, partial, full, ...), not in capture order, and a later capture may take
addresses that an earlier graph's step uses for its temporaries. That is safe only
because nothing made inside the step outlives it: parameters, optimizer state and the
scaler's and trainer's counters are made before the capture (construction, warm-up) and
written in place; gradients are made and freed (set to None) within the step. Each
capture checks this: a block of the pool still allocated after the capture is a tensor
made inside the step and kept, and the capture raises ``RuntimeError`` rather than let
another graph overwrite it. A pool per graph would keep each graph's temporaries
(activations, gradients) apart, up to four times one step's memory for no speed (a
replay launches the same kernels either way), and would still not make a kept tensor
right: a replay of another graph never updates it. The check costs one allocator
snapshot per capture, nothing per replay; a torch whose snapshot names no pool per
segment goes unchecked.

Random numbers: a replay re-runs the kernels the capture recorded, with what the host
computed at capture baked in. Torch registers the default CUDA generator with every
graph and moves it on at each replay (dropout draws fresh numbers, as eagerly). A
``torch.Generator`` of the task's own, on CUDA, must be passed as ``generators``: each is
registered with every graph (``CUDAGraph.register_generator_state``, torch 2.3 on). An
unregistered one fails the capture there, with an error that says what to do; torch
with lazy registration (pytorch#176753, 2026) registers it by itself and deprecates the
call, which is then skipped quietly. Numbers drawn on the host inside the
step would be drawn once and replayed for ever: a step that moves torch's default CPU
generator, Python's ``random`` or numpy's global generator is refused (seen at the last
warm-up step, and checked again around the capture). A task's own CPU
``torch.Generator`` or ``numpy.random.Generator`` cannot be seen from here: the contract is
in ``TrainingTask``'s docstring.

Refused before capturing, as torch.compile refuses what it cannot trace: a batch tensor
not on the CUDA device (its copy inside the step would sync), a host sync in the last
warm-up step (``.item()``, a pageable copy: ``torch.cuda.set_sync_debug_mode("warn")``
watches that one step) and host randomness. Each raises :class:`CaptureFailed` with the
reason before any CUDA work, so the caller runs the step eagerly instead.

A capture that fails anyway (a sync only inside the capture, a recompile, an allocation
outside the pool) must not poison the process. On torch without per-capture generator
states (pytorch#171263) an invalidated capture leaves the default CUDA generator marked
as capturing, so every later ``torch.rand``, dropout or capture raises "Offset increment
outside graph capture", and ``torch.cuda.graph`` leaves the side stream current. So on
any exception ``_capture`` restores the caller's stream, resets the graph and heals
every generator (:func:`heal_generators`) before it raises :class:`CaptureFailed`; the
eager random offsets are those from before the capture, so the eager run continues
exactly where it would have. A compiled step is captured with Dynamo's
``fail_on_recompile`` stance: a recompile raises in Python, with its guard's reason,
before any kernel.

Bitwise: a replay runs the kernels the eager step runs, on the same inputs, so a graphed
run computes what an eager run computes. The body must not keep Python state that
changes from step to step (a Python counter is read once, at capture): the trainer
keeps every per-step value in device tensors updated in place.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import random
import sys
import warnings
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

logger = logging.getLogger(__name__)

StepBody = Callable[[Sequence[Any]], object]  # its return value is ignored
_UNSIGNED: Hashable = object()  # run() was given no signature: it takes one


class CaptureFailed(RuntimeError):
    """A capture refused or failed: no graph was kept, the step did not run, the stream
    and the generators are as before the capture; run the step eagerly instead."""


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    static: list[torch.Tensor]  # the tensors of the static batch, in flatten order
    batch: list[Any]  # the static micro-batches the graph reads


@dataclass
class StepGraphs:
    """Warm-up, capture and replay of a device-only step; see the module docstring."""

    device: torch.device
    warmup: int = 3
    max_graphs: int = 4
    generators: tuple[torch.Generator, ...] = ()  # the task's own CUDA generators
    fail_on_recompile: bool = False  # a compiled step: a recompile fails the capture
    captured_steps: int = 0  # steps that ran from a graph (capture-and-replay included)
    eager_steps: int = 0  # steps past the signature bound, run eagerly
    warmup_steps: int = 0
    _graphs: dict[Hashable, _Captured] = field(default_factory=dict)
    _seen: dict[Hashable, int] = field(default_factory=dict)
    _pool: Any = None
    _side: torch.cuda.Stream | None = None
    _bound: Any = None  # the loss function the graphs call (see bind)
    _refused: dict[Hashable, str] = field(default_factory=dict)  # seen at the last warm-up

    def __post_init__(self) -> None:
        self.generators = tuple(self.generators)
        for generator in self.generators:
            if generator.device.type != "cuda":
                raise ValueError(
                    f"generator on {generator.device}: only a CUDA generator can be registered "
                    "with a CUDA graph; numbers a step draws on the host are drawn once, at "
                    "capture, and replayed. Draw them on the device"
                )

    def run(
        self, body: StepBody, micro_batches: Sequence[Any], key: Hashable | None = _UNSIGNED
    ) -> str:
        """Run one step of ``body`` on ``micro_batches``; return how it ran. ``key``: their
        ``signature()``, when the caller has taken it already (a walk of the batch a step,
        not two)."""
        if key is _UNSIGNED:
            key = signature(micro_batches)  # None: a leaf that cannot be compared
        how = self._how(key)
        if how == "replayed":
            _copy_into(self._graphs[key].static, micro_batches)
            self._graphs[key].graph.replay()
            self.captured_steps += 1
        elif how == "warmup":
            self._seen[key] = seen = self._seen.get(key, 0) + 1
            if seen == self.warmup:  # the step the capture will record: watched
                self._watched_warmup(key, body, micro_batches)
            else:
                self._on_side_stream(body, micro_batches)
            self.warmup_steps += 1
        elif how == "eager":
            body(micro_batches)
            self.eager_steps += 1
        else:
            self._graphs[key] = self._capture(key, body, micro_batches)
            self._graphs[key].graph.replay()
            self.captured_steps += 1
        return how

    def captures_next(self, micro_batches: Sequence[Any]) -> bool:
        """True when ``run(body, micro_batches)`` would capture a new graph (the one call
        of a signature that can fail for the graph's sake: the trainer keeps the state
        from before it, to run the step eagerly from there when it does)."""
        return self.captures(signature(micro_batches))

    def captures(self, key: Hashable | None) -> bool:
        """``captures_next`` for batches of the signature ``key``, already taken."""
        return self._how(key) == "captured"

    def _how(self, key: Hashable | None) -> str:
        """How ``run`` runs the next step of the batch signature ``key``."""
        if key in self._graphs:
            return "replayed"
        if key is not None and self._seen.get(key, 0) < self.warmup:
            return "warmup"
        if key is None or len(self._graphs) >= self.max_graphs:
            return "eager"
        return "captured"

    def reset(self) -> None:
        """Forget every graph, warm-up count and bound loss (state was replaced, not
        written in place, or the loss function changes)."""
        self._graphs.clear()
        self._seen.clear()
        self._refused.clear()
        self._pool = None
        self._bound = None

    def bind(self, loss_fn: Callable[..., Any]) -> None:
        """Tie these graphs to ``loss_fn``; a different one is refused until ``reset()``.

        A graph replays the kernels its capture recorded, so a replay with another loss
        function (or a new closure over other values) would silently run the old one.
        Equality, not identity: ``task.loss`` makes a new bound method at each access,
        and those compare equal. A fresh lambda per step is a different function.

        >>> graphs = StepGraphs(torch.device("cpu"))
        >>> graphs.bind(abs); graphs.bind(abs)  # the same: fine
        """
        if self._bound is None:
            self._bound = loss_fn
        elif loss_fn != self._bound:
            raise ValueError(
                f"loss_fn={loss_fn!r} is not the loss function this trainer's CUDA graphs "
                f"call ({self._bound!r}): a replay would run that one. Pass the same "
                "loss_fn to every step (build it once, outside the loop), or call "
                "trainer.graphs.reset() first (the next steps warm up and capture anew)"
            )

    @property
    def graph_count(self) -> int:
        return len(self._graphs)

    def pool_bytes(self) -> int:
        """Bytes the graphs' shared memory pool holds (its segments, from the allocator's
        snapshot: one walk of every segment; for reports, not for a step). 0 before a
        capture."""
        if self._pool is None:
            return 0
        return sum(
            int(segment.get("total_size", 0))
            for segment in torch.cuda.memory_snapshot()
            if tuple(segment.get("segment_pool_id", ())) == tuple(self._pool)
        )

    def _stream(self) -> torch.cuda.Stream:
        if self._side is None:
            self._side = torch.cuda.Stream(self.device)
        return self._side

    def _on_side_stream(self, body: StepBody, micro_batches: Sequence[Any]) -> None:
        side, main = self._stream(), torch.cuda.current_stream(self.device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            body(micro_batches)
        main.wait_stream(side)

    def _watched_warmup(self, key: Hashable, body: StepBody, micro_batches: Sequence[Any]) -> None:
        """The last warm-up step, watched for what a capture cannot record: host syncs
        and host randomness. The step itself runs as any warm-up does; what was seen
        refuses the capture that would follow (``_refused``)."""
        host = host_rng_state()
        with watch_syncs() as synced:
            self._on_side_stream(body, micro_batches)
        reasons = []
        if synced:
            reasons.append(_SYNCED.format(what=synced[0]))
        if host_rng_state() != host:
            reasons.append(_ON_THE_HOST)
        if reasons:
            self._refused[key] = "; ".join(reasons)

    def _capture(self, key: Hashable, body: StepBody, micro_batches: Sequence[Any]) -> _Captured:
        refusal = self._refused.get(key) or _off_device(micro_batches, self.device)
        if refusal:
            raise CaptureFailed(f"capture refused before capturing: {refusal}")
        static_batch = [_clone_tensors(batch) for batch in micro_batches]
        graph = torch.cuda.CUDAGraph()
        _register(graph, self.generators)
        host_rng = host_rng_state()  # 5 kB copied, once per capture
        main = torch.cuda.current_stream(self.device)  # torch.cuda.graph may not restore it
        before = generator_states(self.device, self.generators)  # host values: no sync
        try:
            with (
                _stance(self.fail_on_recompile),
                torch.cuda.graph(graph, pool=self._pool, stream=self._stream()),
            ):
                body(static_batch)
        except BaseException as exc:  # whatever it was, the process must stay usable
            self._recover(graph, main, before)
            if not isinstance(exc, Exception):
                raise
            if "generator" in str(exc).lower() and "offset increment" not in str(exc).lower():
                raise CaptureFailed(_UNREGISTERED + f" (torch: {exc})") from exc
            raise CaptureFailed(describe(exc)) from exc
        if host_rng_state() != host_rng:  # a valid capture: nothing to heal
            raise CaptureFailed(_ON_THE_HOST)
        try:
            _check_pool_empty(graph.pool(), len(self._graphs) + 1)
        except RuntimeError as exc:
            raise CaptureFailed(str(exc)) from exc
        if self._pool is None:
            self._pool = graph.pool()
        logger.info(
            "captured a CUDA graph of the whole step (%d of at most %d)",
            len(self._graphs) + 1,
            self.max_graphs,
        )
        return _Captured(graph, flatten_tensors(static_batch), static_batch)

    def _recover(
        self, graph: torch.cuda.CUDAGraph, main: torch.cuda.Stream, before: list[Any]
    ) -> None:
        """After a capture that raised: the caller's stream current again, the graph
        dropped, every generator usable and where it was before the capture (a capture
        runs no kernel: it consumed no number; see the module docstring)."""
        torch.cuda.set_stream(main)
        with contextlib.suppress(RuntimeError):
            graph.reset()
        how = heal_generators(self.device, self.generators, self._stream(), before=before)
        logger.warning("a CUDA graph capture raised: stream restored; generators: %s", how)


_UNREGISTERED = (
    "the step draws random numbers from a CUDA torch.Generator that is not registered with "
    "its CUDA graph, and a replay would repeat them: list it in the task's "
    "cuda_generators() (Trainer(generators=...)); the default CUDA generator needs nothing"
)
_ON_THE_HOST = (
    "the step drew random numbers on the host (torch's default CPU generator, Python's "
    "random or numpy's global generator moved in the step): they would be drawn once, at "
    "capture, and every replay would repeat them. "
    "Draw them on the device (the default CUDA generator, or one listed in the task's "
    "cuda_generators()), or run cuda_graph=off"
)
_SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's sync debug warning
_SYNCED = (
    "the step syncs with the host ({what}): a capture cannot record a host read or a copy "
    "from pageable memory. Keep the step on the device (no .item(), .tolist() or "
    "data-dependent shapes; batches on the device before the step), or run cuda_graph=off"
)


_NOISE = ("CUDA kernel errors", "For debugging", "Compile with", "Search for", "Device-side")


def describe(exc: BaseException, limit: int = 800) -> str:
    """One line for a capture's error: its type and message without torch's CUDA
    boilerplate, then the error that caused it (an invalidated capture raises "operation
    failed due to a previous error during capture"; the first error names the op).

    >>> describe(RuntimeError("a\\nCUDA kernel errors might be reported later\\n  b"))
    'RuntimeError: a b'
    """
    lines = [line.strip() for line in str(exc).splitlines()]
    text = " ".join(line for line in lines if line and not line.startswith(_NOISE))
    text = f"{type(exc).__name__}: {text}"
    cause = exc.__cause__ or exc.__context__
    if cause is not None and not isinstance(cause, CaptureFailed):
        text += f" (after {describe(cause, limit)})"
    return text[:limit]


def host_rng_state() -> tuple[Any, ...]:
    """The host generators a step could draw from, comparable with ``==``: torch's
    default CPU generator, Python's ``random`` and numpy's global one (when imported)."""
    numpy = sys.modules.get("numpy")
    drawn = None
    if numpy is not None:
        _, keys, pos, has_gauss, cached = numpy.random.get_state()
        drawn = (keys.tobytes(), int(pos), int(has_gauss), float(cached))
    return (torch.random.get_rng_state().numpy().tobytes(), random.getstate(), drawn)


@contextlib.contextmanager
def watch_syncs() -> Iterator[list[str]]:
    """Yield a list that gets the warning text of every host sync torch reports inside
    (``set_sync_debug_mode("warn")``; restored after). Other warnings pass through, and
    so do the syncs when the mode was already on (a caller counting them)."""
    synced: list[str] = []
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield synced
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    for warning in caught:
        text = str(warning.message)
        sync = _SYNC_WARNING in text
        if sync:
            synced.append(text.splitlines()[0])
        if not sync or previous:  # a caller counting syncs ("warn") still sees them
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )


def _stance(fail_on_recompile: bool) -> contextlib.AbstractContextManager[Any]:
    """Dynamo's ``fail_on_recompile`` stance for a compiled step's capture: a recompile
    inside a capture does host and device work (module loads, autotuning) that invalidates
    it; this way it raises first, naming the guard that failed."""
    if not fail_on_recompile:
        return contextlib.nullcontext()
    set_stance = getattr(torch.compiler, "set_stance", None)  # torch 2.6 on
    if set_stance is not None:
        return set_stance("fail_on_recompile")
    dynamo = importlib.import_module("torch._dynamo")  # imported already: a compiled step
    return dynamo.config.patch(error_on_recompile=True)


def _off_device(micro_batches: Sequence[Any], device: torch.device) -> str | None:
    """Why the batch cannot be captured as it is: a tensor not on the CUDA device."""
    for tensor in flatten_tensors(list(micro_batches)):
        if tensor.device.type != "cuda":
            return (
                f"a batch tensor of shape {tuple(tensor.shape)} is on {tensor.device}, not "
                f"{device}: its copy inside the step would sync with the host. Move "
                "batches to the device before the step (pinned, non_blocking=True)"
            )
    return None


def _every_generator(
    device: torch.device, generators: Sequence[torch.Generator]
) -> list[torch.Generator]:
    index = device.index if device.index is not None else torch.cuda.current_device()
    return [torch.cuda.default_generators[index], *generators]


def generator_states(device: torch.device, generators: Sequence[torch.Generator]) -> list[Any]:
    """The states of the default CUDA generator and ``generators`` (host values)."""
    return [generator.get_state() for generator in _every_generator(device, generators)]


def heal_generators(
    device: torch.device,
    generators: Sequence[torch.Generator],
    side: torch.cuda.Stream,
    draw: Callable[[torch.Generator], object] | None = None,
    before: Sequence[Any] | None = None,
) -> list[str]:
    """Make every CUDA generator a failed capture touched usable again; return how.

    A tiny capture on ``side`` that registers ``generators`` and draws one number from
    each, and from the default CUDA generator, runs the generators' capture prologue and
    epilogue, which clears their "capturing" mark (pytorch#171263); a capture does not move
    the eager offsets. Then each generator draws once eagerly (its state saved and put
    back, so the eager sequence goes on unchanged); one that still raises gets a clean
    copy of its own state (``graphsafe_set_state(clone_state())``). ``draw`` is that probe
    (tests pass a stand-in). ``before``: the states from before the failed capture
    (:func:`generator_states`), put back where a generator moved anyway."""
    every = _every_generator(device, generators)
    probe = draw or (lambda g: torch.rand(1, device=device, generator=g))
    main = torch.cuda.current_stream(device)
    how = []
    try:
        graph = torch.cuda.CUDAGraph()
        _register(graph, generators)
        with torch.cuda.graph(graph, stream=side):
            for generator in every:
                probe(generator)
        graph.reset()
        how.append("a clean capture")
    except Exception as exc:  # healing must not hide the capture's own error
        how.append(f"a clean capture raised: {exc}")
    finally:
        torch.cuda.set_stream(main)
    for number, generator in enumerate(every):
        saved = generator.get_state()
        try:
            probe(generator)
        except RuntimeError as exc:
            clean = getattr(generator, "graphsafe_set_state", None)  # torch 2.5 on
            if clean is None:
                how.append(f"generator {number} still raises, and this torch cannot heal it: {exc}")
            else:
                clean(generator.clone_state())
                how.append(f"generator {number}: graphsafe_set_state(clone_state())")
        generator.set_state(saved)
    for number, (generator, state) in enumerate(zip(every, before or (), strict=False)):
        now = generator.get_state()
        if not (torch.equal(now, state) if isinstance(now, torch.Tensor) else now == state):
            generator.set_state(state)
            how.append(f"generator {number}: moved by the failed capture, put back")
    return how


def _register(graph: torch.cuda.CUDAGraph, generators: Sequence[torch.Generator]) -> None:
    register = getattr(graph, "register_generator_state", None)  # gone: torch does it
    if register is None:
        return
    with warnings.catch_warnings():  # a deprecated no-op where torch registers lazily
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        for generator in generators:
            register(generator)


def pool_leftovers(segments: Iterable[Mapping[str, Any]], pool: Any) -> tuple[int, int]:
    """Bytes and blocks still allocated in ``pool``, from ``torch.cuda.memory_snapshot()``.

    >>> blocks = [{"size": 512, "state": "active_allocated"}, {"size": 64, "state": "inactive"}]
    >>> pool_leftovers([{"segment_pool_id": (1, 0), "blocks": blocks}], (1, 0))
    (512, 1)
    """
    size = count = 0
    for segment in segments:
        if tuple(segment.get("segment_pool_id", ())) != tuple(pool):
            continue
        for block in segment.get("blocks", ()):
            if block.get("state") == "active_allocated":
                size += int(block["size"])
                count += 1
    return size, count


def _check_pool_empty(pool: Any, graph_number: int) -> None:
    """Raise when a tensor made inside the captured step is still alive (see module doc)."""
    size, count = pool_leftovers(torch.cuda.memory_snapshot(), pool)
    if count:
        gc.collect()  # a reference cycle may hold a temporary: only real survivors count
        size, count = pool_leftovers(torch.cuda.memory_snapshot(), pool)
    if count:
        raise RuntimeError(
            f"capturing CUDA graph {graph_number} left {size} bytes in {count} block(s) "
            "allocated in the graphs' shared memory pool: a tensor made inside the step "
            "outlives it (kept on an object instead of written in place into a tensor made "
            "before the capture), and another graph replaying out of capture order could "
            "overwrite it. Make it before the step and update it in place"
        )


def signature(value: Any) -> Hashable | None:
    """A hashable description of a batch: structure, tensor metadata, other leaf values.

    None when a leaf is neither a tensor nor hashable: such a batch is never captured.

    >>> signature((torch.zeros(2, 3), 4)) == signature((torch.ones(2, 3), 4))
    True
    """
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, value.device)
    if isinstance(value, list | tuple | dict):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        parts = [(key, signature(item)) for key, item in items]
        if any(part is None for _, part in parts):
            return None
        return (type(value), tuple(parts))
    try:
        hash(value)
    except TypeError:
        return None
    return ("leaf", type(value), value)


def flatten_tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor of a batch, in a fixed order (the one ``signature`` walks)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in flatten_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flatten_tensors(v)]
    return []


def _clone_tensors(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_clone_tensors(v) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(_clone_tensors(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone_tensors(v) for k, v in value.items()}
    return value


def _copy_into(static: list[torch.Tensor], micro_batches: Sequence[Any]) -> None:
    fresh = flatten_tensors(list(micro_batches))
    for target, source in zip(static, fresh, strict=True):
        target.copy_(source, non_blocking=True)
