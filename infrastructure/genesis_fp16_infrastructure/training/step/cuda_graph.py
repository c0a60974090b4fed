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
step would be drawn once and replayed for ever: a capture that moved the CPU's default
generator fails too (a task's own CPU generator, ``random`` and numpy cannot be seen:
the contract is in ``TrainingTask``'s docstring).

Bitwise: a replay runs the kernels the eager step runs, on the same inputs, so a graphed
run computes what an eager run computes. The body must not keep Python state that
changes from step to step (a Python counter is read once, at capture): the trainer
keeps every per-step value in device tensors updated in place.
"""

from __future__ import annotations

import gc
import logging
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

logger = logging.getLogger(__name__)

StepBody = Callable[[Sequence[Any]], object]  # its return value is ignored


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
    captured_steps: int = 0  # steps that ran from a graph (capture-and-replay included)
    eager_steps: int = 0  # steps past the signature bound, run eagerly
    warmup_steps: int = 0
    _graphs: dict[Hashable, _Captured] = field(default_factory=dict)
    _seen: dict[Hashable, int] = field(default_factory=dict)
    _pool: Any = None
    _side: torch.cuda.Stream | None = None
    _bound: Any = None  # the loss function the graphs call (see bind)

    def __post_init__(self) -> None:
        self.generators = tuple(self.generators)
        for generator in self.generators:
            if generator.device.type != "cuda":
                raise ValueError(
                    f"generator on {generator.device}: only a CUDA generator can be registered "
                    "with a CUDA graph; numbers a step draws on the host are drawn once, at "
                    "capture, and replayed. Draw them on the device"
                )

    def run(self, body: StepBody, micro_batches: Sequence[Any]) -> str:
        """Run one step of ``body`` on ``micro_batches``; return how it ran."""
        key = signature(micro_batches)
        if key is None:  # a leaf that cannot be compared: never baked into a graph
            body(micro_batches)
            self.eager_steps += 1
            return "eager"
        captured = self._graphs.get(key)
        if captured is not None:
            _copy_into(captured.static, micro_batches)
            captured.graph.replay()
            self.captured_steps += 1
            return "replayed"
        seen = self._seen.get(key, 0)
        if seen < self.warmup:
            self._seen[key] = seen + 1
            self._on_side_stream(body, micro_batches)
            self.warmup_steps += 1
            return "warmup"
        if len(self._graphs) >= self.max_graphs:
            body(micro_batches)
            self.eager_steps += 1
            return "eager"
        self._graphs[key] = self._capture(body, micro_batches)
        self._graphs[key].graph.replay()
        self.captured_steps += 1
        return "captured"

    def captures_next(self, micro_batches: Sequence[Any]) -> bool:
        """True when ``run(body, micro_batches)`` would capture a new graph (the one call
        of a signature that can fail for the graph's sake: the trainer keeps the state
        from before it, to run the step eagerly from there when it does)."""
        key = signature(micro_batches)
        return (
            key is not None
            and key not in self._graphs
            and self._seen.get(key, 0) >= self.warmup
            and len(self._graphs) < self.max_graphs
        )

    def reset(self) -> None:
        """Forget every graph, warm-up count and bound loss (state was replaced, not
        written in place, or the loss function changes)."""
        self._graphs.clear()
        self._seen.clear()
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

    def _capture(self, body: StepBody, micro_batches: Sequence[Any]) -> _Captured:
        static_batch = [_clone_tensors(batch) for batch in micro_batches]
        graph = torch.cuda.CUDAGraph()
        _register(graph, self.generators)
        host_rng = torch.random.get_rng_state()  # 5 kB copied, once per capture
        try:
            with torch.cuda.graph(graph, pool=self._pool, stream=self._stream()):
                body(static_batch)
        except RuntimeError as exc:
            if "generator" in str(exc).lower():
                raise RuntimeError(_UNREGISTERED + f" (torch: {exc})") from exc
            raise
        if not torch.equal(torch.random.get_rng_state(), host_rng):
            raise RuntimeError(_ON_THE_HOST)
        _check_pool_empty(graph.pool(), len(self._graphs) + 1)
        if self._pool is None:
            self._pool = graph.pool()
        logger.info(
            "captured a CUDA graph of the whole step (%d of at most %d)",
            len(self._graphs) + 1,
            self.max_graphs,
        )
        return _Captured(graph, flatten_tensors(static_batch), static_batch)


_UNREGISTERED = (
    "the step draws random numbers from a CUDA torch.Generator that is not registered with "
    "its CUDA graph, and a replay would repeat them: list it in the task's "
    "cuda_generators() (Trainer(generators=...)); the default CUDA generator needs nothing"
)
_ON_THE_HOST = (
    "the step drew random numbers on the host (torch's default CPU generator moved during "
    "the CUDA graph capture): they were drawn once and every replay would repeat them. "
    "Draw them on the device (the default CUDA generator, or one listed in the task's "
    "cuda_generators()), or run cuda_graph=off"
)


def _register(graph: torch.cuda.CUDAGraph, generators: Sequence[torch.Generator]) -> None:
    register = getattr(graph, "register_generator_state", None)  # gone: torch does it
    if register is None:
        return
    with warnings.catch_warnings():  # a deprecated no-op where torch registers lazily
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        for generator in generators:
            register(generator)


def cuda_generators(task: object) -> tuple[torch.Generator, ...]:
    """The task's own CUDA generators, from its optional ``cuda_generators()``; () without."""
    listed = getattr(task, "cuda_generators", None)
    return tuple(listed()) if callable(listed) else ()


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
