"""compile=on: the model compiled inside the captured step trains like the eager step.

GPU-only (``gpu``-marked, skipped without CUDA; the CPU side, the one-line refusal, is in
``test_execution.py``). Inductor's kernels round differently from eager's (other fusions,
other reduction orders, autotuned matmuls), so unlike ``test_cuda_graph.py`` these tests
compare with a tolerance, not bit for bit. Not yet run on a GPU when written (no GPU on
the machine they were written on): the tolerances are first guesses, and the first GPU
run should say whether they hold.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from genesis_fp16_infrastructure.training import (
    FitOptions,
    PrecisionPolicy,
    ScalerConfig,
    Trainer,
    TrainerConfig,
    fit,
)
from genesis_fp16_infrastructure.training import checkpoint_keys as keys

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

Batch = tuple[torch.Tensor, torch.Tensor]
# Per-step and end-of-run tolerance on the train loss, relative to eager's. fp32 differs
# only by reduction order; 16-bit also by where Inductor keeps intermediates in fp32.
STEP_RTOL = {"fp32": 1e-2, "bf16": 1e-1, "fp16": 1e-1}
END_RTOL = {"fp32": 1e-2, "bf16": 5e-2, "fp16": 5e-2}


def _model() -> nn.Module:
    torch.manual_seed(0)  # no dropout: both runs see the same function of the weights
    model = nn.Sequential(nn.Linear(32, 256), nn.LayerNorm(256), nn.GELU(), nn.Linear(256, 1))
    return model.to("cuda")


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    x, y = batch
    return F.mse_loss(model(x).float(), y)


def _batches(count: int, size: int = 64) -> list[Batch]:
    g = torch.Generator(device="cuda").manual_seed(1)
    out = []
    for _ in range(count):
        x = torch.randn(size, 32, device="cuda", generator=g)
        out.append((x, x[:, :1].tanh()))
    return out


# fp16 from a scale of 2**10: neither run overflows. From 2**16 each run skips its first
# few steps, and whether Inductor's rounding crosses 65504 can flip one skip: the runs
# then differ by a whole optimizer step (0.732 against 0.885 at step 1 on the H200).
SCALER = ScalerConfig(init_scale=2.0**10)


def _train(
    precision: str, config: TrainerConfig, batches: Sequence[Batch]
) -> tuple[Trainer, list[float], list[int]]:
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, capturable=True)
    trainer = Trainer(model, [opt], PrecisionPolicy.create(precision, "cuda", SCALER), config)
    losses, skipped = [], []
    for batch in batches:
        trainer.step([batch], _loss, num_samples=len(batch[0]))
        summary = trainer.summary(reset_interval=True)  # a host read: tests only
        losses.append(summary.train_loss)
        skipped.append(summary.skipped_steps)
    return trainer, losses, skipped


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_compiled_captured_steps_track_the_eager_losses(precision: str) -> None:
    """100 steps compiled inside the graph: reported as cuda_graph_compiled, replayed from
    one graph, the same skipped steps as eager (none: the scale starts low), each loss
    close to eager's, and the model's own keys left uncompiled."""
    batches = _batches(100)
    on = TrainerConfig(cuda_graph="on", compile="on")
    compiled, ours, ours_skipped = _train(precision, on, batches)
    eager, theirs, theirs_skipped = _train(precision, TrainerConfig(cuda_graph="off"), batches)
    # A capture that failed names why (a recompile: the guard that failed).
    assert compiled.execution.used == "cuda_graph_compiled", compiled.execution.reason
    assert ours_skipped == theirs_skipped  # equal skip patterns before losses are compared
    assert "max-autotune-no-cudagraphs" in compiled.execution.reason
    graphs = compiled.graphs
    assert graphs is not None and graphs.graph_count == 1
    assert graphs.captured_steps == 100 - graphs.warmup_steps
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == pytest.approx(b, rel=STEP_RTOL[precision]), f"step {step}: {a} vs {b}"
    end_ours, end_theirs = sum(ours[-10:]) / 10, sum(theirs[-10:]) / 10
    assert end_ours == pytest.approx(end_theirs, rel=END_RTOL[precision])
    assert end_ours < ours[0] / 2  # it trained: not a step that does nothing
    assert list(compiled.model.state_dict()) == list(eager.model.state_dict())


class _Task:
    """The same regression as a TrainingTask, for fit()."""

    def __init__(self) -> None:
        self.batches = _batches(8)

    def build_model(self) -> nn.Module:
        return _model()

    def build_optimizers(self, model: nn.Module) -> list[torch.optim.Optimizer]:
        return [torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, capturable=True)]

    def build_schedulers(self, optimizers: object) -> tuple[()]:
        return ()

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Batch, int]]:
        for batch in self.batches:
            yield batch, len(batch[0])

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return _loss(model, batch)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        with torch.no_grad():
            return {"loss": float(sum(_loss(model, b) for b in self.batches[:2]) / 2)}

    def extra_state(self) -> dict[str, object]:
        return {}


@pytest.mark.gpu
@needs_cuda
def test_fit_with_compile_on_reports_the_mode_checkpoints_plain_keys_and_resumes(
    tmp_path: Path,
) -> None:
    """fit(compile='on'): the result says cuda_graph_compiled, the checkpoint holds the
    model's own keys (no compiled wrapper's prefix), and a resumed run captures anew and
    trains like a resumed eager run. (Not like the first run: the mean loss of steps 13-18
    is 0.38 of that of steps 1-12 eagerly on a CPU too.)"""
    options = FitOptions(
        precision="bf16", device="cuda", steps=12, cuda_graph="on", compile="on",
        checkpoint_dir=tmp_path, resume=False,
    )  # fmt: skip
    first = fit(_Task(), options)
    assert first.execution.used == "cuda_graph_compiled", first.execution.reason
    assert first.steps_run == 12
    assert first.checkpoint is not None
    saved = torch.load(first.checkpoint, weights_only=True)
    assert list(saved[keys.MODEL]) == list(_model().state_dict())
    assert saved[keys.CONFIG]["trainer"]["compile"] == "on"
    resumed = fit(_Task(), replace(options, steps=6, resume=True))
    assert resumed.resumed_from == first.checkpoint and resumed.steps_run == 6
    assert resumed.execution.used == "cuda_graph_compiled", resumed.execution.reason
    plain = replace(options, cuda_graph="off", compile="off", checkpoint_dir=tmp_path / "eager")
    fit(_Task(), plain)
    eager = fit(_Task(), replace(plain, steps=6, resume=True))
    assert eager.resumed_from is not None and eager.steps_run == 6
    want = eager.summary.train_loss
    assert resumed.summary.train_loss == pytest.approx(want, rel=STEP_RTOL["bf16"])
