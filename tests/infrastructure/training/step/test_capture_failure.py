"""A failed CUDA graph capture costs one eager step and never poisons the process.

On a CPU, through stand-ins for torch.cuda's streams, graphs and generators: the control
flow of ``StepGraphs._capture``'s recovery (the stream restored, the generators healed,
``CaptureFailed`` raised), of ``heal_generators``, of the refusals before a capture, and
of the trainer's fallback (outside the ``except`` block, from state kept without a
device read). On a GPU (marked ``gpu``): a real capture invalidated by a host read, in a
model with dropout, followed in the same process by random numbers, dropout, a second
capture and replays.
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch
from op_counter import OpCounter
from torch import nn
from torch.nn import functional as F

from genesis_fp16_infrastructure.training import PrecisionPolicy, Trainer, TrainerConfig
from genesis_fp16_infrastructure.training.step import cuda_graph
from genesis_fp16_infrastructure.training.step.cuda_graph import (
    CaptureFailed,
    StepGraphs,
    heal_generators,
)
from genesis_fp16_infrastructure.training.step.execution import ResolvedExecution

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

Batch = tuple[torch.Tensor, torch.Tensor]

# ----------------------------------------------------------------------------- stand-ins


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name = name

    def wait_stream(self, other: FakeStream) -> None:
        pass

    def __repr__(self) -> str:
        return f"FakeStream({self.name})"


class FakeGraph:
    def __init__(self) -> None:
        self.replays = 0
        self.was_reset = False

    def register_generator_state(self, generator: Any) -> None:
        pass

    def replay(self) -> None:
        self.replays += 1

    def reset(self) -> None:
        self.was_reset = True

    def pool(self) -> tuple[int, int]:
        return (1, 0)


class FakeCuda:
    """torch.cuda's streams and graphs as torch 2.11 behaves on a capture that an illegal
    op invalidated: ``capture_end`` raises, and the capture stream stays current."""

    def __init__(self) -> None:
        self.main = FakeStream("main")
        self.current = self.main
        self.capturing = False
        self.graphs: list[FakeGraph] = []

    def current_stream(self, device: Any = None) -> FakeStream:
        return self.current

    def set_stream(self, stream: FakeStream) -> None:
        self.current = stream

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Iterator[None]:
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def make_graph(self) -> FakeGraph:
        self.graphs.append(FakeGraph())
        return self.graphs[-1]

    @contextlib.contextmanager
    def graph(self, graph: FakeGraph, pool: Any = None, stream: Any = None) -> Iterator[None]:
        before, self.current = self.current, stream
        self.capturing = True
        try:
            yield
        except RuntimeError as exc:
            if "stream is capturing" not in str(exc):  # a Python-level raise: still valid
                self.current = before
                raise
            # An illegal op invalidated the capture: torch's __exit__ raises in
            # capture_end, before it restores the stream.
            raise RuntimeError("operation failed due to a previous error during capture") from exc
        finally:
            self.capturing = False
        self.current = before

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name, value in {
            "Stream": FakeStream,
            "current_stream": self.current_stream,
            "set_stream": self.set_stream,
            "stream": self.stream,
            "CUDAGraph": self.make_graph,
            "graph": self.graph,
            "memory_snapshot": lambda: [],
        }.items():
            monkeypatch.setattr(torch.cuda, name, value)


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeCuda, list[list[str]]]]:
    """StepGraphs on a CPU: fake streams and graphs, CPU batches allowed, no sync watch
    (the test says which syncs a warm-up saw), healing recorded instead of run."""
    fake = FakeCuda()
    fake.install(monkeypatch)
    healed: list[list[str]] = []
    syncs: list[str] = []

    @contextlib.contextmanager
    def watch() -> Iterator[list[str]]:
        seen: list[str] = []
        yield seen
        seen.extend(syncs)

    def heal(device: Any, generators: Any, side: Any, before: Any = None) -> list[str]:
        healed.append([repr(fake.current)])
        return ["stand-in"]

    monkeypatch.setattr(cuda_graph, "watch_syncs", watch)
    monkeypatch.setattr(cuda_graph, "heal_generators", heal)
    monkeypatch.setattr(cuda_graph, "generator_states", lambda device, generators: [])
    monkeypatch.setattr(cuda_graph, "_off_device", lambda batches, device: None)
    fake.syncs = syncs  # type: ignore[attr-defined]
    yield fake, healed


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 1))


def _batches(count: int) -> list[Batch]:
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(count):
        x = torch.randn(16, 8, generator=g)
        out.append((x, x[:, :1].tanh()))
    return out


def _trainer(captured: bool) -> Trainer:
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    policy = PrecisionPolicy.create("fp32", "cpu", announce=False)
    trainer = Trainer(model, [opt], policy, TrainerConfig(cuda_graph="off", log_interval=10**9))
    if captured:  # the real StepGraphs, on the fake torch.cuda
        trainer.graphs = StepGraphs(torch.device("cpu"))
        trainer.execution = ResolvedExecution("on", "cuda_graph", "fake CUDA on a CPU")
    return trainer


# ----------------------------------------------------------------------------- on a CPU


def test_a_capture_that_raises_heals_restores_the_stream_and_raises_capture_failed(
    fake_cuda: tuple[FakeCuda, list[list[str]]],
) -> None:
    """A body raising mid-capture: the heal hook runs with the caller's stream current
    again, the graph is reset, CaptureFailed carries the reason, and the next call of the
    same signature attempts the capture again (and replays once it succeeds)."""
    fake, healed = fake_cuda
    graphs = StepGraphs(torch.device("cpu"), warmup=1)
    x = torch.ones(3)
    fail = [True]

    def body(batches: Sequence[Any]) -> None:
        if fake.capturing and fail[0]:
            raise RuntimeError("operation not permitted when stream is capturing")

    assert graphs.run(body, [x]) == "warmup"
    with pytest.raises(CaptureFailed, match="previous error during capture"):
        graphs.run(body, [x])
    assert healed == [["FakeStream(main)"]] and fake.current is fake.main
    assert fake.graphs[-1].was_reset and graphs.graph_count == 0
    fail[0] = False
    assert graphs.captures_next([x])
    assert graphs.run(body, [x]) == "captured" and graphs.run(body, [x]) == "replayed"
    assert len(healed) == 1 and fake.current is fake.main


def test_a_keyboard_interrupt_mid_capture_heals_and_propagates_as_itself(
    fake_cuda: tuple[FakeCuda, list[list[str]]],
) -> None:
    """Any exception heals the process; one that is not an Exception is re-raised as is."""
    fake, healed = fake_cuda
    graphs = StepGraphs(torch.device("cpu"), warmup=0)

    def body(batches: Sequence[Any]) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        graphs.run(body, [torch.ones(1)])
    assert healed and fake.current is fake.main


def test_a_batch_past_the_graph_bound_or_with_an_unhashable_leaf_runs_eagerly(
    fake_cuda: tuple[FakeCuda, list[list[str]]],
) -> None:
    """A batch whose signature cannot be compared (an unhashable leaf) runs eagerly from its
    first step, and so does a new signature once max_graphs are captured; both counted."""
    fake, _ = fake_cuda
    graphs = StepGraphs(torch.device("cpu"), warmup=1, max_graphs=1)
    ran: list[int] = []

    def body(batches: Sequence[Any]) -> None:
        ran.append(1)

    assert [graphs.run(body, [(torch.ones(2), {1})]) for _ in range(2)] == ["eager", "eager"]
    assert [graphs.run(body, [torch.ones(2)]) for _ in range(3)] == [
        *("warmup", "captured", "replayed")
    ]
    assert [graphs.run(body, [torch.ones(3)]) for _ in range(2)] == ["warmup", "eager"]
    assert graphs.eager_steps == 3 and graphs.captured_steps == 2 and graphs.warmup_steps == 2
    assert len(ran) == 6 and graphs.graph_count == 1 and len(fake.graphs) == 1


def test_a_warm_up_sync_refuses_the_capture_before_capturing(
    fake_cuda: tuple[FakeCuda, list[list[str]]],
) -> None:
    """A host sync seen in the last warm-up step refuses the capture with the reason, and
    no capture begins (nothing to heal)."""
    fake, healed = fake_cuda
    fake.syncs.append("called a synchronizing CUDA operation")  # type: ignore[attr-defined]
    graphs = StepGraphs(torch.device("cpu"), warmup=2)
    ran: list[bool] = []
    for _ in range(2):
        graphs.run(lambda batches: ran.append(fake.capturing), [torch.ones(2)])
    with pytest.raises(CaptureFailed, match="refused before capturing: the step syncs"):
        graphs.run(lambda batches: ran.append(fake.capturing), [torch.ones(2)])
    assert ran == [False, False] and not fake.graphs and not healed


@pytest.mark.parametrize(
    "draw",
    [lambda: torch.rand(1), lambda: random.random()],
    ids=["torch-cpu", "python-random"],
)
def test_host_randomness_in_the_step_refuses_the_capture(
    fake_cuda: tuple[FakeCuda, list[list[str]]], draw: Callable[[], object]
) -> None:
    """torch's CPU generator or Python's random moved in the last warm-up step: refused,
    with the reason, before any capture."""
    fake, _ = fake_cuda
    graphs = StepGraphs(torch.device("cpu"), warmup=1)
    graphs.run(lambda batches: draw(), [torch.ones(2)])
    with pytest.raises(CaptureFailed, match="drew random numbers on the host"):
        graphs.run(lambda batches: draw(), [torch.ones(2)])
    assert not fake.graphs


def test_numpy_randomness_in_the_step_refuses_the_capture(
    fake_cuda: tuple[FakeCuda, list[list[str]]],
) -> None:
    """numpy's global generator moved in the last warm-up step: refused as well."""
    numpy = pytest.importorskip("numpy")
    graphs = StepGraphs(torch.device("cpu"), warmup=1)
    graphs.run(lambda batches: numpy.random.rand(), [torch.ones(2)])
    with pytest.raises(CaptureFailed, match="drew random numbers on the host"):
        graphs.run(lambda batches: numpy.random.rand(), [torch.ones(2)])


def test_a_batch_tensor_off_the_device_refuses_the_capture() -> None:
    """A CPU tensor in a batch for a CUDA step is named, with its shape, before capturing."""
    why = cuda_graph._off_device([(torch.ones(4, 2), 3)], torch.device("cuda", 0))
    assert why is not None and "shape (4, 2) is on cpu" in why and "non_blocking" in why


def test_the_trainer_falls_back_outside_the_except_block_and_ends_as_eager(
    fake_cuda: tuple[FakeCuda, list[list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loss that raises inside the capture (as .item() does): the stream is restored and
    the generators healed, the same step runs eagerly with no exception in flight, the run
    reports capture_failed, and its 12 steps (dropout included) equal an eager run's."""
    fake, healed = fake_cuda
    # Dropout draws on the CPU's generator here (on CUDA: the device's), which the
    # host-randomness check would rightly refuse: this test is of a failing capture.
    monkeypatch.setattr(cuda_graph, "host_rng_state", lambda: ())
    in_flight: list[Any] = []

    def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
        if fake.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")
        in_flight.append(sys.exc_info())
        return F.mse_loss(model(batch[0]), batch[1])

    batches = _batches(12)
    ends = []
    for captured in (True, False):
        trainer = _trainer(captured)
        torch.manual_seed(5)  # dropout's draws: the same in both runs
        for batch in batches:
            trainer.step([batch], loss, 16)
        ends.append(trainer)
    graphed, eager = ends
    assert graphed.execution.used == "eager" and graphed.execution.fallback == "capture_failed"
    assert "the capture at step 4 raised" in graphed.execution.reason
    assert healed == [["FakeStream(main)"]] and fake.current is fake.main
    assert all(info == (None, None, None) for info in in_flight)
    assert graphed.step_count == 12 and graphed.summary().samples == 12 * 16
    assert graphed.summary().train_loss == eager.summary().train_loss
    for name, tensor in eager.model.state_dict().items():
        assert torch.equal(graphed.model.state_dict()[name], tensor), name


@contextlib.contextmanager
def host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpCounter]:
    """Counts reads of a tensor's value on the host (``.item()``, ``.tolist()``, a
    ``bool()``, ``.cpu()``): the ops that wait for the device on CUDA."""
    mode = OpCounter(torch.ops.aten._local_scalar_dense.default)
    real_tolist, real_cpu = torch.Tensor.tolist, torch.Tensor.cpu

    def tolist(self: torch.Tensor) -> Any:
        mode.count += 1
        return real_tolist(self)

    def cpu(self: torch.Tensor, *args: Any, **kw: Any) -> torch.Tensor:
        mode.count += 1
        return real_cpu(self, *args, **kw)

    with monkeypatch.context() as patch:
        patch.setattr(torch.Tensor, "tolist", tolist)
        patch.setattr(torch.Tensor, "cpu", cpu)
        with mode:
            yield mode


def test_the_state_kept_before_a_capture_reads_nothing_from_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the trainer keeps before a capture costs no host read (a state_dict costs ten:
    the counter counts them); it runs in fp16, where the scaler has most state."""
    model = _model()
    policy = PrecisionPolicy.create("fp16", "cpu", announce=False)
    trainer = Trainer(model, [torch.optim.AdamW(model.parameters())], policy)
    with host_reads(monkeypatch) as reads:
        trainer.state_dict()
    assert reads.count >= 5  # the counter sees what the old copy read
    with host_reads(monkeypatch) as reads:
        trainer._before_capture()
    assert reads.count == 0


def test_heal_generators_clears_a_stuck_generator_and_keeps_its_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """heal_generators: a clean capture clears the "capturing" mark; where the capture
    itself raises, a generator that still raises gets graphsafe_set_state(clone_state());
    either way its state (the eager offset) is what it was."""

    class Gen:
        def __init__(self, stuck: bool) -> None:
            self.stuck, self.offset = stuck, 7
            self.calls: list[str] = []

        def get_state(self) -> int:
            return self.offset

        def set_state(self, state: int) -> None:
            self.offset = state

        def clone_state(self) -> str:
            return "clone"

        def graphsafe_set_state(self, state: str) -> None:
            self.calls.append(state)
            self.stuck = False

    fake = FakeCuda()
    fake.install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    def draw(generator: Gen) -> None:
        if generator.stuck and not fake.capturing:
            raise RuntimeError("Offset increment outside graph capture encountered unexpectedly")
        generator.offset += 4
        if fake.capturing:  # the prologue and epilogue of a clean capture clear the mark
            generator.stuck = False

    default, own = Gen(stuck=True), Gen(stuck=True)
    monkeypatch.setattr(torch.cuda, "default_generators", [default])
    how = heal_generators(torch.device("cuda"), [own], FakeStream("side"), draw)  # type: ignore[list-item, arg-type]
    assert how == ["a clean capture"] and fake.current is fake.main
    assert not default.stuck and not own.stuck and default.calls == own.calls == []

    def broken_graph(graph: Any, pool: Any = None, stream: Any = None) -> Any:
        raise RuntimeError("capture_begin failed")

    monkeypatch.setattr(torch.cuda, "graph", broken_graph)
    default, own = Gen(stuck=True), Gen(stuck=False)
    monkeypatch.setattr(torch.cuda, "default_generators", [default])
    how = heal_generators(torch.device("cuda"), [own], FakeStream("side"), draw)  # type: ignore[list-item, arg-type]
    assert how[0].startswith("a clean capture raised")
    assert how[1:] == ["generator 0: graphsafe_set_state(clone_state())"]
    assert default.calls == ["clone"] and own.calls == [] and not default.stuck
    assert default.offset == own.offset == 7  # the probe's draw put back

    default, own = Gen(stuck=False), Gen(stuck=False)
    default.offset = 11  # moved by the failed capture (a torch that did): put back
    monkeypatch.setattr(torch.cuda, "default_generators", [default])
    how = heal_generators(torch.device("cuda"), [own], FakeStream("side"), draw, before=[7, 7])  # type: ignore[list-item, arg-type]
    assert how[-1] == "generator 0: moved by the failed capture, put back"
    assert default.offset == own.offset == 7


class Switch:
    on = False


SWITCH = Switch()


@pytest.mark.slow
def test_a_compiled_step_captures_without_a_recompile_and_a_recompile_fails_it(
    fake_cuda: tuple[FakeCuda, list[list[str]]],
) -> None:
    """fail_on_recompile: 3 warm-ups and the capture of a compiled model (backend eager)
    on a cloned batch compile once and capture; a model whose guards fail only inside the
    capture raises CaptureFailed naming the guard, in Python before any kernel."""
    fake, healed = fake_cuda
    model = torch.compile(nn.Linear(4, 2), backend="eager")
    x = torch.ones(3, 4)
    graphs = StepGraphs(torch.device("cpu"), fail_on_recompile=True)
    runs = [graphs.run(lambda batches: model(batches[0]).sum().backward(), [x]) for _ in range(5)]
    assert runs == ["warmup"] * 3 + ["captured", "replayed"]

    def switched(t: torch.Tensor) -> torch.Tensor:
        return t * 2 if SWITCH.on else t * 3

    flaky = torch.compile(switched, backend="eager")
    graphs = StepGraphs(torch.device("cpu"), fail_on_recompile=True, warmup=1)

    def body(batches: Sequence[Any]) -> None:
        SWITCH.on = fake.capturing  # a guard that differs only while capturing
        flaky(batches[0])

    graphs.run(body, [x])
    with pytest.raises(CaptureFailed, match=r"(?s)recompile.*guard"):
        graphs.run(body, [x])
    assert len(healed) == 1 and fake.current is fake.main  # recovered as any failure is


# ----------------------------------------------------------------------------- on a GPU


def _cuda_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 1)).cuda()


def _cuda_trainer(mode: str) -> Trainer:
    model = _cuda_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, capturable=True)
    policy = PrecisionPolicy.create("fp32", "cuda", announce=False)
    return Trainer(model, [opt], policy, TrainerConfig(log_interval=10**9, cuda_graph=mode))


def _cuda_batches(count: int) -> list[Batch]:
    g = torch.Generator(device="cuda").manual_seed(1)
    out = []
    for _ in range(count):
        x = torch.randn(64, 32, device="cuda", generator=g)
        out.append((x, x[:, :1].tanh()))
    return out


def _plain(model: nn.Module, batch: Batch) -> torch.Tensor:
    return F.mse_loss(model(batch[0]), batch[1])


def _reads_inside_the_capture(model: nn.Module, batch: Batch) -> torch.Tensor:
    """A host read only while capturing: the warm-up is clean, so the capture is
    attempted and invalidated, as a data-dependent branch or a recompile would."""
    loss = _plain(model, batch)
    if torch.cuda.is_current_stream_capturing() and loss.item() < 0:
        raise AssertionError("a mean squared error is never negative")
    return loss


@pytest.mark.gpu
@needs_cuda
def test_a_real_invalidated_capture_leaves_the_process_usable() -> None:
    """On the GPU: a capture invalidated by .item(), in a model with Dropout(0.1). The run
    falls back and its 12 steps equal the eager dropout run; the current stream is the
    default one; then torch.rand, dropout, a second capture and its replays all work, and
    the eager random sequence goes on as if no capture had been tried."""
    batches = _cuda_batches(12)
    ends = []
    for mode, loss in (("on", _reads_inside_the_capture), ("off", _plain)):
        trainer = _cuda_trainer(mode)
        torch.cuda.manual_seed(3)
        for batch in batches:
            trainer.step([batch], loss, 64)
        ends.append((trainer, torch.cuda.get_rng_state(), torch.rand(4, device="cuda")))
    (graphed, g_rng, g_next), (eager, e_rng, e_next) = ends
    assert graphed.execution.fallback == "capture_failed", graphed.execution.reason
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    assert graphed.step_count == 12 and graphed.summary().samples == 12 * 64
    for name, tensor in eager.model.state_dict().items():
        assert torch.equal(graphed.model.state_dict()[name], tensor), name
    assert torch.equal(g_rng, e_rng) and torch.equal(g_next, e_next)  # the offset kept
    dropped = F.dropout(torch.ones(1000, device="cuda"), 0.5)
    assert 0 < int((dropped == 0).sum()) < 1000
    again = _cuda_trainer("on")  # a second capture, in the same process
    for batch in batches:
        again.step([batch], _plain, 64)
    assert again.execution.used == "cuda_graph" and again.execution.fallback is None
    assert again.graphs is not None and again.graphs.captured_steps == 12 - 3
    torch.cuda.synchronize()


@pytest.mark.gpu
@needs_cuda
def test_after_a_failed_capture_the_eager_draws_are_those_of_a_run_that_never_tried() -> None:
    """StepGraphs alone: after an invalidated capture that drew from the default and a
    listed generator, both continue bit for bit where they would have without it."""
    own = torch.Generator(device="cuda")
    x = torch.randn(256, device="cuda")

    def body(batches: Sequence[Any]) -> None:
        noisy = F.dropout(batches[0], 0.1) + torch.rand(256, device="cuda", generator=own)
        if torch.cuda.is_current_stream_capturing():
            noisy.sum().item()  # invalidates the capture

    draws = []
    for attempt in (True, False):
        torch.cuda.manual_seed(11)
        own.manual_seed(12)
        graphs = StepGraphs(torch.device("cuda"), warmup=1, generators=(own,))
        graphs.run(body, [x])  # the warm-up: eager
        if attempt:
            with pytest.raises(CaptureFailed):
                graphs.run(body, [x])
            assert torch.cuda.current_stream() == torch.cuda.default_stream()
        draws.append((torch.rand(8, device="cuda"), torch.rand(8, device="cuda", generator=own)))
    (healed_default, healed_own), (plain_default, plain_own) = draws
    assert torch.equal(healed_default, plain_default) and torch.equal(healed_own, plain_own)
