"""SE-Darwin's training memory in bytes, counted on the CPU: model, gradients, optimizer,
activations, and what the memory formula predicts from them.

The model and batch are the ones se_darwin builds for a generated pool (the daemon's
sample of 2,000 records by default: the cross-validated ensemble). Counted, not sampled
from an allocator: the parameters' bytes, the gradients' after one backward, AdamW's
state after one fused step, and the bytes autograd saves for backward in one step
(parameters excluded), in fp32 and under bf16 autocast (the CPU's 16-bit; fp16 saves
the same bytes). The CUDA graph's memory pool exists only on a GPU: with ``--device
cuda`` the script also captures se_darwin's fp32 step (``Trainer``, ``cuda_graph="on"``)
and reports the bytes of the graphs' pool (``StepGraphs.pool_bytes``); ``make gpu-check``
runs it so::

    python benchmarks/se_darwin_footprint.py --out benchmarks/results/se_darwin_footprint_cpu.md
    python benchmarks/se_darwin_footprint.py --device cuda --out results/se_darwin_footprint_cuda.md
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.bench.memory import predicted_saving
from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.training import PrecisionPolicy, Trainer, TrainerConfig


def _task(records: int, seed: int, device: str = "cpu") -> WorldModelTask:
    with tempfile.TemporaryDirectory() as folder:
        path = plugin.generate_sample_data(Path(folder), records, seed)
        return WorldModelTask(read_trajectories(path), TaskOptions(), seed, device)


def graph_pool_bytes(records: int, seed: int) -> int:
    """The CUDA graph pool of se_darwin's captured fp32 step (5 steps: 3 warm-ups, the
    capture, a replay), in bytes."""
    task = _task(records, seed, "cuda")
    batch, size = next(iter(task.train_batches(0, seed)))
    torch.manual_seed(0)
    model = task.build_model().to("cuda")
    policy = PrecisionPolicy.create("fp32", "cuda", announce=False)
    config = TrainerConfig(cuda_graph="on")
    trainer = Trainer(model, task.build_optimizers(model), policy, config)
    for _ in range(5):
        trainer.step([batch], task.loss, size)
    torch.cuda.synchronize()
    assert trainer.graphs is not None and trainer.graphs.captured_steps >= 1
    return trainer.graphs.pool_bytes()


def _saved_bytes(task: WorldModelTask, batch: Any, dtype: torch.dtype | None) -> int:
    """Bytes autograd saves for backward in one step of ``task``'s model on ``batch``."""
    torch.manual_seed(0)
    model = task.build_model()
    params = {p.data_ptr() for p in model.parameters()}
    seen: dict[tuple[int, int], int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.data_ptr() not in params:
            seen[(tensor.data_ptr(), tensor.numel())] = tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = task.loss(model, batch)
        loss.float().backward()
    return sum(seen.values())


def footprint(records: int, seed: int, device: str = "cpu") -> dict[str, Any]:
    """The counted bytes of one se_darwin training step on a generated pool."""
    task = _task(records, seed)
    batch, size = next(iter(task.train_batches(0, seed)))
    torch.manual_seed(0)
    model = task.build_model()
    (optimizer,) = task.build_optimizers(model)
    task.loss(model, batch).backward()
    optimizer.step()
    params = sum(p.numel() for p in model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    grad_bytes = sum(
        p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None
    )
    state_bytes = sum(
        v.numel() * v.element_size()
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    )
    fp32_saved = _saved_bytes(task, batch, None)
    bf16_saved = _saved_bytes(task, batch, torch.bfloat16)
    activations = round(fp32_saved / 4 / size)  # A: fp32 elements a sample
    return {
        "records": records,
        "model": str(task.config),
        "members": task.config.members,
        "batch": size,
        "parameters": params,
        "model_bytes": param_bytes,
        "gradient_bytes": grad_bytes,
        "optimizer_bytes": state_bytes,
        "activation_bytes_fp32": fp32_saved,
        "activation_bytes_bf16": bf16_saved,
        "autocast_weight_cache_bytes": 2 * params,
        "activations_per_sample": activations,
        "predicted_saving": predicted_saving(params, size, activations),
        "graph_pool_bytes": graph_pool_bytes(records, seed) if device == "cuda" else None,
        "device": device,
    }


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def render(found: dict[str, Any]) -> str:
    pool = found.get("graph_pool_bytes")
    total32 = (
        found["model_bytes"]
        + found["gradient_bytes"]
        + found["optimizer_bytes"]
        + found["activation_bytes_fp32"]
    )
    total16 = total32 - found["activation_bytes_fp32"] + found["activation_bytes_bf16"]
    total16 += found["autocast_weight_cache_bytes"]
    rows = [
        ("model (fp32 master weights)", found["model_bytes"], found["model_bytes"]),
        ("gradients (fp32)", found["gradient_bytes"], found["gradient_bytes"]),
        ("optimizer (fused AdamW state)", found["optimizer_bytes"], found["optimizer_bytes"]),
        (
            "activations saved for backward",
            found["activation_bytes_fp32"],
            found["activation_bytes_bf16"],
        ),
        (
            "autocast's 16-bit weight copies (2 bytes a parameter)",
            0,
            found["autocast_weight_cache_bytes"],
        ),
        (
            "CUDA graph memory pool (fp32 step, captured)",
            pool if pool is not None else "GPU only (make gpu-check)",
            "not measured",
        ),
        ("total counted", total32, total16),
    ]
    out = [
        "# se_darwin's training memory, counted on the CPU"
        + (" (the graph pool measured on CUDA)" if pool is not None else ""),
        "",
        f"`python benchmarks/se_darwin_footprint.py` on {_cpu()}, "
        f"torch {torch.__version__}: a generated pool of {found['records']:,} records, "
        f"{found['members']} member(s), batch {found['batch']}, {found['parameters']:,} "
        f"parameters, model {found['model']}.",
        "",
        "| part | fp32 bytes | 16-bit autocast bytes |",
        "| --- | --- | --- |",
    ]
    for name, a, b in rows:
        fa = f"{a:,}" if isinstance(a, int) else a
        fb = f"{b:,}" if isinstance(b, int) else b
        out.append(f"| {name} | {fa} | {fb} |")
    saving = 1 - total16 / total32
    out += [
        "",
        f"Counted saving of 16-bit autocast: {saving:+.1%}; the formula (2BA - 2P) / "
        f"(16P + 4BA) with A = {found['activations_per_sample']:,}: "
        f"{found['predicted_saving']:+.1%}. On a GPU the allocator's rounding, cuBLAS "
        "workspaces and the CUDA context add to both; at this size they dominate.",
    ]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    page = render(footprint(args.records, args.seed, args.device))
    print(page, end="")
    if args.out is not None:
        args.out.write_text(page)


if __name__ == "__main__":
    main()
