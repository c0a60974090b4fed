"""The four ways of training the same workload: ours, hand-written, Accelerate, Fabric.

Each runner does the same thing per step: an autocast forward, an fp32 loss, a (scaled)
backward, unscale, clip the gradient norm, optimizer step (skipped on fp16 overflow),
scaler update, zero grads. Only who does the bookkeeping differs.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import torch
from torch import nn

from genesis_fp16.bench.config import BenchConfig
from genesis_fp16.plugin_api import PrecisionRequest
from genesis_fp16_infrastructure.api import Batch, PrecisionName, Workload

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Runner(Protocol):
    """One training loop under test, named by its key in `RUNNER_CLASSES`."""

    library: str  # the module it imports, loaded before memory accounting starts
    note: str  # what the runner's library said it would do, for the row's note
    execution: str  # "eager", "cuda_graph" or "cuda_graph_compiled": how its steps really ran

    def prepare(self, workload: Workload, config: BenchConfig, device: torch.device) -> None: ...

    def step(self, batch: Batch) -> None: ...

    def skipped_steps(self) -> int:
        """Optimizer steps skipped on overflow so far (may read the device: a host sync)."""
        ...


def set_tf32(enabled: bool) -> None:
    """Allow or forbid TF32 for CUDA matmuls and cuDNN convolutions (process-wide)."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def _optimizer(model: nn.Module, config: BenchConfig) -> torch.optim.Optimizer:
    # Fused AdamW on CUDA: it takes the scaler's found-inf flag on the device, so neither
    # GradScaler nor our LossScaler has to read it on the host before stepping; its step
    # counters live on the device (capturable), which a captured step needs and which
    # computes the same. Every runner gets the same optimizer.
    cuda = torch.device(config.device).type == "cuda"
    return torch.optim.AdamW(model.parameters(), lr=config.lr, fused=cuda or None, capturable=cuda)


class OursRunner:
    """This project's `Trainer`, driven exactly as the agents drive it.

    Precision ``auto`` is resolved as the daemon resolves it (``GENESIS_FP16_AUTO_PRECISION
    =measure``): a calibration on the row's own model and batches, outside the timed
    steps; its choice, reason and cost go in the row's note.
    """

    library = "genesis_fp16_infrastructure.training"
    cuda_graph = "off"
    compile = "off"
    chosen: PrecisionName | None = None  # what `auto` resolved to; None for a named precision

    def prepare(self, workload: Workload, config: BenchConfig, device: torch.device) -> None:
        set_tf32(config.precision == "tf32")
        requested = "fp32" if config.precision == "tf32" else config.precision
        self._loss_fn = workload.loss_fn
        self._n = config.batch_size
        calibrated = ""
        # `auto` as the daemon decides it
        self.trainer, policy, calibration = workload.agents_trainer(
            lambda model: [_optimizer(model, config)],
            requested,
            device,
            config.seed,
            config.batch_size,
            max_grad_norm=config.max_grad_norm,
            cuda_graph=self.cuda_graph,
            compile=self.compile,
        )
        if PrecisionRequest(requested, mode="measure").measures:  # `auto`, as decide() reads it
            self.chosen = policy.name
        if calibration is not None:
            calibrated = f"; calibration took {calibration.seconds:.2f} s (not timed)"
        self.execution = self.trainer.execution.used
        self.note = (
            f"policy used {policy.name}: {policy.resolved.reason}{calibrated}; "
            f"{self.execution}: {self.trainer.execution.reason}"
        )

    def step(self, batch: Batch) -> None:
        self.trainer.step([batch], self._loss_fn, self._n)
        if self.trainer.execution.used != self.execution:  # a capture failed: eager since
            self.execution = self.trainer.execution.used
            self.note += f"; then {self.execution}: {self.trainer.execution.reason}"

    def skipped_steps(self) -> int:
        return int(self.trainer.summary().skipped_steps)


class _FoundInfTally:
    """Counts steps a `torch.amp.GradScaler` skipped, on the device, without a host sync."""

    def __init__(self, device: torch.device) -> None:
        self.total = torch.zeros((), device=device)

    def add(self, scaler: Any, optimizer: torch.optim.Optimizer) -> None:
        # Read between scaler.step() and scaler.update(): update() clears this state.
        found = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        for flag in found.values():
            self.total += flag.to(self.total.device)


class OursGraphRunner(OursRunner):
    """Our `Trainer` with `cuda_graph="on"`: the whole step replayed from a CUDA graph."""

    cuda_graph = "on"


class OursGraphCompileRunner(OursGraphRunner):
    """`ours-graph` with `compile="on"`: the model compiled by torch.compile (mode
    max-autotune-no-cudagraphs) inside the captured step. It compiles in its first warm-up
    step, outside the timed ones."""

    library = "torch._dynamo"
    compile = "on"


class HandWrittenRunner:
    """The floor of eager steps: the plain `torch.amp` loop a careful user writes by hand."""

    library = "torch.amp"
    note = "torch.autocast + torch.amp.GradScaler"
    execution = "eager"

    def prepare(self, workload: Workload, config: BenchConfig, device: torch.device) -> None:
        set_tf32(config.precision == "tf32")
        self.model, self.loss_fn, self.device = workload.model, workload.loss_fn, device
        self.dtype = _AUTOCAST_DTYPES.get(config.precision)
        self.optimizer = _optimizer(self.model, config)
        self.scaler = torch.amp.GradScaler(device.type, enabled=config.precision == "fp16")
        self.max_norm = config.max_grad_norm
        self.tally = _FoundInfTally(device)

    def _loss(self, batch: Batch, cache_enabled: bool | None = None) -> torch.Tensor:
        """The forward under autocast (none for fp32 and TF32), the loss in fp32."""
        on = self.dtype is not None
        with torch.autocast(self.device.type, self.dtype, on, cache_enabled=cache_enabled):
            return self.loss_fn(self.model, batch).float()

    def step(self, batch: Batch) -> None:
        self.scaler.scale(self._loss(batch)).backward()
        self.scaler.unscale_(self.optimizer)
        nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        self.scaler.step(self.optimizer)
        if self.scaler.is_enabled():
            self.tally.add(self.scaler, self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def skipped_steps(self) -> int:
        return int(self.tally.total.item())


class CompiledRunner(HandWrittenRunner):
    """The hand loop with `torch.compile(model)`: what a user tries first for speed."""

    library = "torch._dynamo"
    mode = "default"

    def prepare(self, workload: Workload, config: BenchConfig, device: torch.device) -> None:
        super().prepare(workload, config, device)
        # The optimizer holds the parameters themselves; the compiled module shares them.
        self.model = torch.compile(self.model, mode=self.mode)  # type: ignore[assignment]
        # reduce-overhead replays the forward and backward from CUDA graphs (torch's
        # cudagraph trees); scaler, clipping and the optimizer still launch eagerly.
        self.execution = "eager"
        self.note = f"torch.compile(model, mode={self.mode!r}) + torch.amp.GradScaler"


class CompiledReduceOverheadRunner(CompiledRunner):
    mode = "reduce-overhead"


class HandGraphRunner(HandWrittenRunner):
    """The anchor: the same step written by hand and replayed from one CUDA graph.

    Forward under autocast (cast cache off), fp32 loss, scaled backward, unscale with the
    overflow check, clipping, fused capturable AdamW that skips on overflow, and the scale
    update, all captured once after 3 eager warm-up steps on a side stream; each step then
    copies its batch into the static inputs and replays. No host sync per step. The hand
    loop's GradScaler only says whether fp16 scales: the graph keeps its own scale.
    """

    note = "whole step captured by hand: torch.cuda.graph + capturable fused AdamW"
    execution = "cuda_graph"
    WARMUP = 3

    def prepare(self, workload: Workload, config: BenchConfig, device: torch.device) -> None:
        super().prepare(workload, config, device)
        self.params = list(self.model.parameters())
        self.scale = torch.full((), 65536.0 if self.scaler.is_enabled() else 1.0, device=device)
        self.growth_tracker = torch.zeros((), dtype=torch.int32, device=device)
        self.found_inf = torch.zeros((), device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: Batch | None = None
        self.calls = 0

    def _step(self, batch: Batch) -> None:
        (self._loss(batch, cache_enabled=False) * self.scale).backward()
        grads = [p.grad for p in self.params if p.grad is not None]
        self.found_inf.zero_()
        torch._amp_foreach_non_finite_check_and_unscale_(
            grads, self.found_inf, self.scale.reciprocal()
        )
        nn.utils.clip_grad_norm_(self.params, self.max_norm, foreach=True)
        self.optimizer.grad_scale = None  # type: ignore[attr-defined]
        self.optimizer.found_inf = self.found_inf  # type: ignore[attr-defined]
        self.optimizer.step()
        del self.optimizer.grad_scale, self.optimizer.found_inf  # type: ignore[attr-defined]
        self.tally.total += self.found_inf
        if self.scaler.is_enabled():
            torch._amp_update_scale_(
                self.scale, self.growth_tracker, self.found_inf, 2.0, 0.5, 2000
            )
        self.optimizer.zero_grad(set_to_none=True)

    def step(self, batch: Batch) -> None:
        self.calls += 1
        if self.calls <= self.WARMUP:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self._step(batch)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return
        if self.graph is None:
            self.static = tuple(t.clone() for t in batch)  # type: ignore[assignment]
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._step(self.static)  # type: ignore[arg-type]
        for target, source in zip(self.static, batch, strict=True):  # type: ignore[arg-type]
            target.copy_(source, non_blocking=True)
        self.graph.replay()


class AccelerateRunner:
    """Hugging Face Accelerate with `mixed_precision=...`."""

    library = "accelerate"
    execution = "eager"
    MODES: ClassVar[dict[str, str]] = {"fp32": "no", "tf32": "no", "bf16": "bf16", "fp16": "fp16"}

    def prepare(self, workload: Workload, config: BenchConfig, device: torch.device) -> None:
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState, GradientState

        # Accelerate keeps a process-wide singleton; a fresh one per configuration.
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        mode = self.MODES[config.precision]
        self.accelerator = Accelerator(mixed_precision=mode, cpu=device.type == "cpu")
        set_tf32(config.precision == "tf32")
        self.note = (
            f"mixed_precision={mode!r} -> {self.accelerator.mixed_precision!r}, "
            f"native_amp={self.accelerator.native_amp}"
        )
        self.model, self.optimizer = self.accelerator.prepare(
            workload.model, _optimizer(workload.model, config)
        )
        self.loss_fn, self.max_norm, self.skipped = workload.loss_fn, config.max_grad_norm, 0

    def step(self, batch: Batch) -> None:
        with self.accelerator.autocast():
            loss = self.loss_fn(self.model, batch)
        self.accelerator.backward(loss.float())
        self.accelerator.clip_grad_norm_(self.model.parameters(), self.max_norm)
        self.optimizer.step()
        # Accelerate has already compared the scale before and after (its own host sync).
        self.skipped += int(self.optimizer.step_was_skipped)
        self.optimizer.zero_grad(set_to_none=True)

    def skipped_steps(self) -> int:
        return self.skipped


class FabricRunner:
    """Lightning Fabric with `precision=...`."""

    library = "lightning_fabric"
    execution = "eager"
    MODES: ClassVar[dict[str, str]] = {
        "fp32": "32-true",
        "tf32": "32-true",
        "bf16": "bf16-mixed",
        "fp16": "16-mixed",
    }

    def prepare(self, workload: Workload, config: BenchConfig, device: torch.device) -> None:
        from lightning_fabric import Fabric

        mode = self.MODES[config.precision]
        self.fabric = Fabric(accelerator=device.type, devices=1, precision=mode)  # type: ignore[arg-type]
        set_tf32(config.precision == "tf32")
        plugin = self.fabric._precision
        self.scaler = getattr(plugin, "scaler", None)
        self.note = (
            f"precision={mode!r} -> {type(plugin).__name__}({getattr(plugin, 'precision', '?')})"
        )
        self.model, self.optimizer = self.fabric.setup(
            workload.model, _optimizer(workload.model, config)
        )
        self.loss_fn, self.max_norm = workload.loss_fn, config.max_grad_norm
        self.tally = _FoundInfTally(device)

    def step(self, batch: Batch) -> None:
        # Fabric's module wrapper runs its own autocast around forward.
        loss = self.loss_fn(self.model, batch)
        self.fabric.backward(loss.float())
        self.fabric.clip_gradients(self.model, self.optimizer, max_norm=self.max_norm)
        if self.scaler is not None:
            scale_before = self.scaler._scale.clone()  # a device copy, not a host read
        self.optimizer.step()
        if self.scaler is not None:
            # GradScaler lowers its scale exactly when it skipped the step.
            self.tally.total += (self.scaler._scale < scale_before).squeeze()
        self.optimizer.zero_grad(set_to_none=True)

    def skipped_steps(self) -> int:
        return int(self.tally.total.item())


RUNNER_CLASSES: dict[str, type[Runner]] = {
    "ours": OursRunner,
    "hand": HandWrittenRunner,
    "accelerate": AccelerateRunner,
    "fabric": FabricRunner,
    "ours-graph": OursGraphRunner,
    "ours-graph-compile": OursGraphCompileRunner,
    "hand-graph": HandGraphRunner,
    "compile": CompiledRunner,
    "compile-ro": CompiledReduceOverheadRunner,
}
