"""hand-graph's real step on the CPU: torch.cuda's streams and graphs faked, all else real.

The fake graph keeps CUDA's semantics: a capture records the aten ops of its block on the
tensors they touched and applies none of them (what the block wrote is put back when it
ends), and each replay runs the recorded ops again on those same tensors, the static
inputs included, writing into the tensors the capture allocated. A step that replayed the
wrong inputs, skipped the copy into the static ones or ran a step twice trains differently
from the hand-written loop, which the test compares bit for bit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from test_bench import _tiny
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from genesis_fp16.bench.runners import HandGraphRunner, HandWrittenRunner
from genesis_fp16_infrastructure.world_model import workload as bench_workload

# Ops that read a tensor on the host: a sync, which CUDA refuses while a stream captures.
_HOST_READS = {
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.is_nonzero.default,
    torch.ops.aten.nonzero.default,
}


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _allocates(func: Any) -> bool:
    """The op returns new memory (not its input, not a view of it)."""
    return not func.is_view and all(r.alias_info is None for r in func._schema.returns)


class FakeGraph:
    """torch.cuda.CUDAGraph on the CPU: the recorded ops of one capture, replayed."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.ops: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = []

    def replay(self) -> None:
        self.log.append("replay")
        with torch.no_grad():  # the recorded ops include the backward's: no autograd here
            for func, args, kwargs, out in self.ops:
                fresh = func(*args, **kwargs)
                if _allocates(func):  # into the memory the capture allocated, as CUDA does
                    for kept, new in zip(_tensors(out), _tensors(fresh), strict=True):
                        kept.copy_(new)


class _Recorder(TorchDispatchMode):
    """Runs and records each op of a capture; keeps the value before its first write of
    every tensor that existed before the capture, so that the capture can undo itself."""

    def __init__(self, graph: FakeGraph) -> None:
        super().__init__()
        self.graph = graph
        self.allocated: set[int] = set()  # storages the capture allocated (kept by its ops)
        self.written: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _HOST_READS:
            raise RuntimeError(f"{func}: operation not permitted when stream is capturing")
        if torch.Tag.nondeterministic_seeded in func.tags:
            raise NotImplementedError(f"{func}: random ops are not modelled by this fake")
        named = dict(zip((a.name for a in func._schema.arguments), args, strict=False)) | kwargs
        for argument in func._schema.arguments:
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            for t in _tensors(named.get(argument.name)):
                if t.untyped_storage().data_ptr() not in self.allocated:
                    self.written.setdefault(id(t), (t, t.clone()))
        out = func(*args, **kwargs)
        if _allocates(func):
            self.allocated.update(t.untyped_storage().data_ptr() for t in _tensors(out))
        self.graph.ops.append((func, args, kwargs, out))
        return out

    def undo(self) -> None:
        with torch.no_grad():
            for t, before in self.written.values():
                t.copy_(before)


class FakeStream:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: FakeStream) -> None:
        self.log.append(f"{self.name} waits for {other.name}")


class FakeCuda:
    """torch.cuda's streams and graphs, logging what the runner asks of them."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.main = FakeStream("main", self.log)
        self.current = self.main
        self.streams = 0
        self.graphs: list[FakeGraph] = []

    def new_stream(self, device: Any = None, priority: int = 0) -> FakeStream:
        self.streams += 1
        return FakeStream(f"side{self.streams}", self.log)

    def current_stream(self, device: Any = None) -> FakeStream:
        return self.current

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Iterator[None]:
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def new_graph(self) -> FakeGraph:
        self.graphs.append(FakeGraph(self.log))
        return self.graphs[-1]

    @contextlib.contextmanager
    def graph(
        self, graph: FakeGraph, pool: Any = None, stream: Any = None, capture_error_mode: str = ""
    ) -> Iterator[None]:
        # torch.cuda.graph captures on a stream of its own
        before, self.current = self.current, FakeStream("capture", self.log)
        self.log.append("capture")
        recorder = _Recorder(graph)
        try:
            with recorder:
                yield
        finally:
            recorder.undo()
            self.current = before

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name, value in {
            "Stream": self.new_stream,
            "current_stream": self.current_stream,
            "stream": self.stream,
            "CUDAGraph": self.new_graph,
            "graph": self.graph,
        }.items():
            monkeypatch.setattr(torch.cuda, name, value)
        real_step = HandGraphRunner._step

        def logged_step(runner: HandGraphRunner, batch: Any) -> None:
            self.log.append(f"step {runner.calls} on {self.current.name}")
            real_step(runner, batch)

        monkeypatch.setattr(HandGraphRunner, "_step", logged_step)


def test_the_fake_graph_applies_its_capture_only_when_replayed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fake's own semantics: a capture changes nothing, each replay runs it again on
    the tensors it captured (their current values), and a host read in it is refused."""
    fake = FakeCuda()
    fake.install(monkeypatch)
    x, total = torch.ones(2), torch.zeros(2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        total.add_(x * 2)
    assert total.tolist() == [0.0, 0.0]
    graph.replay()
    x.copy_(torch.tensor([3.0, 4.0]))
    graph.replay()
    assert total.tolist() == [8.0, 10.0]
    refused = pytest.raises(RuntimeError, match="not permitted when stream is capturing")
    with refused, torch.cuda.graph(torch.cuda.CUDAGraph()):
        total.sum().item()
    assert fake.log == ["capture", "replay", "replay", "capture"]


_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
STEPS = 8  # 3 eager warm-up steps, the capture (step 4), and 4 more replays
OVERFLOW_STEP = 6  # fp16: a batch whose forward overflows, at a replayed step


def _pair(
    precision: str, tmp_path: Path
) -> tuple[HandWrittenRunner, HandGraphRunner, list[bench_workload.Batch]]:
    """The hand-written and hand-graph runners prepared on the same tiny model (seeded),
    with a different batch of 8 rows for each step."""
    data = bench_workload.load_data(
        bench_workload.write_data(tmp_path, tiny=True, seed=0), 8, torch.device("cpu")
    )
    assert len(data.train_batches) >= STEPS
    # device="cuda" in the config: the optimizer the runners get on CUDA (fused,
    # capturable AdamW, runners._optimizer), on the CPU device prepare() is given.
    config = replace(_tiny(precision, "hand-graph"), device="cuda", batch_size=8)
    hand, graphed = HandWrittenRunner(), HandGraphRunner()
    for runner in (hand, graphed):
        workload = bench_workload.build_workload("default", data, 0, True, torch.device("cpu"))
        runner.prepare(workload, config, torch.device("cpu"))
    return hand, graphed, list(data.train_batches[:STEPS])


def _weights(runner: HandWrittenRunner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in runner.model.parameters()]


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_hand_graph_captures_once_replays_and_trains_like_the_hand_loop(
    precision: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On faked CUDA graphs hand-graph warms up 3 steps on side streams, captures once at
    step 4, then only replays; its weights equal the hand loop's after every step, bit for
    bit, and in fp16 an overflowing batch is skipped, counted and halves the scale."""
    fake = FakeCuda()
    fake.install(monkeypatch)
    hand, graphed, batches = _pair(precision, tmp_path)
    assert graphed.optimizer.defaults["fused"] and graphed.optimizer.defaults["capturable"]
    if precision == "fp16":
        x, *labels = batches[OVERFLOW_STEP - 1]
        x = x.clone()
        x[0, 0] = 1e5  # over fp16's 65,504: inf in the forward, NaN gradients
        batches[OVERFLOW_STEP - 1] = (x, *labels)  # type: ignore[assignment]
    for step, batch in enumerate(batches, start=1):
        before = _weights(graphed)
        hand.step(batch)
        graphed.step(batch)
        after = _weights(graphed)
        assert _equal(_weights(hand), after), f"step {step}: {precision} weights differ"
        if step == OVERFLOW_STEP and precision == "fp16":
            assert _equal(before, after), f"step {step}: the overflowing step was not skipped"
            assert graphed.scale.item() == 32768.0 == hand.scaler.get_scale()
        else:
            assert not _equal(before, after), f"step {step}: the weights did not move"
    skipped = 1 if precision == "fp16" else 0
    assert graphed.skipped_steps() == hand.skipped_steps() == skipped
    for state in graphed.optimizer.state.values():  # a skipped step is not counted either
        assert state["step"].item() == STEPS - skipped
    assert fake.log == [
        "side1 waits for main", "step 1 on side1", "main waits for side1",
        "side2 waits for main", "step 2 on side2", "main waits for side2",
        "side3 waits for main", "step 3 on side3", "main waits for side3",
        "capture", "step 4 on capture", "replay",
        *["replay"] * (STEPS - 4),
    ]  # fmt: skip
    (graph,) = fake.graphs
    assert graph is graphed.graph and graphed.static is not None
    read = [t for _, args, _, _ in graph.ops for t in _tensors(args)]
    assert any(t is graphed.static[0] for t in read)  # the captured step reads the static x
    if precision != "fp32":  # and its forward ran in the 16-bit type autocast was asked for
        assert any(
            t.dtype == _AUTOCAST[precision] for _, _, _, out in graph.ops for t in _tensors(out)
        )
