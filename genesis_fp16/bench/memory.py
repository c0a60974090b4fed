"""Memory measured, and the formula it is held against.

Mixed precision keeps fp32 master weights, their fp32 gradients and AdamW's two fp32
moments (16 bytes a parameter), and autocast adds a 16-bit copy of the weights (2 bytes
a parameter); what it saves is half of each saved activation. For P parameters, batch B
and A saved activation elements a sample::

    fp32:   16P + 4BA bytes          mixed:  18P + 2BA bytes
    saving = (2BA - 2P) / (16P + 4BA)    (none while BA <= P; 40% only from BA ~ 21P)

so the saving depends on the batch, and on a small batch it is negative (the H100's
``large`` rows at batch 64: autocast 268 MiB against fp32's 261). ``predicted_saving`` is
the formula; ``saved_activation_elements`` counts A for a model on the CPU (the tensors
autograd saves for backward, parameters excluded, in fp32); ``memory_table`` sets the
bench's measured peaks beside it (``make gpu-check`` runs the CUDA table::

    genesis-fp16 bench --device cuda --sizes large --runners ours,ours-graph \\
        --precisions fp32,bf16,fp16 --batch-sizes 64,1024,8192,16384 --steps 5

then ``python -m genesis_fp16.bench.memory <the bench's CSV>``). The formula leaves out
the CUDA graph's memory pool, the allocator's rounding and cuBLAS workspaces: the
measured rows include them.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.api import Workload

MIB = 2**20
TABLE_RUNNERS = {"ours": "eager", "ours-graph": "captured"}


def predicted_saving(params: int, batch: int, activations: int) -> float:
    """(2BA - 2P) / (16P + 4BA): the share of fp32's memory mixed precision saves.

    >>> predicted_saving(1000, 1, 1000)  # BA = P: nothing saved
    0.0
    >>> round(predicted_saving(1000, 21, 1000), 3)  # BA = 21P: 40%
    0.4
    """
    ba = batch * activations
    return (2 * ba - 2 * params) / (16 * params + 4 * ba)


def predicted_bytes(params: int, batch: int, activations: int, mixed: bool) -> int:
    """The formula's total: 16P + 4BA in fp32, 18P + 2BA in mixed precision."""
    ba = batch * activations
    return 18 * params + 2 * ba if mixed else 16 * params + 4 * ba


def saved_activation_elements(
    model: nn.Module, loss_fn: Callable[[nn.Module, Any], torch.Tensor], batch: Any, size: int
) -> int:
    """A: elements autograd saves for backward per sample, parameters excluded (fp32,
    one forward and backward of ``batch`` of ``size`` samples)."""
    params = {p.data_ptr() for p in model.parameters()}
    seen: dict[tuple[int, int], int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.data_ptr() not in params:  # a weight saved for backward is not an activation
            seen[(tensor.data_ptr(), tensor.numel())] = tensor.numel()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn(model, batch).backward()
    model.zero_grad(set_to_none=True)
    return round(sum(seen.values()) / size)


def large_model_figures(seed: int = 0, batch: int = 64) -> tuple[int, int]:
    """(P, A) of the bench's ``large`` world model, on the CPU."""
    with tempfile.TemporaryDirectory() as folder:
        data_path = Workload.write_data(Path(folder), False, seed)
        data = Workload.load_data(data_path, batch, torch.device("cpu"))
    workload = Workload.build("large", data, seed, False, torch.device("cpu"))
    activations = saved_activation_elements(
        workload.model, workload.loss_fn, workload.batch(0), batch
    )
    return workload.parameters, activations


def memory_table(rows: Iterable[Mapping[str, Any]], params: int, activations: int) -> str:
    """Markdown: each row's measured peak, its saving against fp32 of the same execution and
    batch, and the formula's prediction beside it."""
    peaks: dict[tuple[str, int, str], float] = {}
    for row in rows:
        runner = str(row["runner"])
        if runner not in TABLE_RUNNERS or not row.get("peak_mem_mb"):
            continue
        key = (TABLE_RUNNERS[runner], int(row["batch_size"]), str(row["precision_requested"]))
        peaks[key] = float(row["peak_mem_mb"])
    out = [
        f"P = {params:,} parameters, A = {activations:,} saved activation elements a sample "
        "(counted on the CPU); saving = (2BA - 2P) / (16P + 4BA)",
        "",
        "| execution | batch | precision | peak MiB | saving vs fp32 | predicted saving "
        "| predicted MiB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for execution, batch, precision in sorted(peaks, key=lambda k: (k[0], k[1], k[2] != "fp32")):
        peak = peaks[(execution, batch, precision)]
        fp32 = peaks.get((execution, batch, "fp32"))
        mixed = precision != "fp32"
        measured = f"{1 - peak / fp32:+.1%}" if mixed and fp32 else "-"
        predicted = f"{predicted_saving(params, batch, activations):+.1%}" if mixed else "-"
        bytes_ = predicted_bytes(params, batch, activations, mixed) / MIB
        out.append(
            f"| {execution} | {batch:,} | {precision} | {peak:.0f} | {measured} | {predicted} "
            f"| {bytes_:.0f} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the memory table beside the formula")
    parser.add_argument("csv", type=Path, help="a bench CSV with the memory rows")
    parser.add_argument("--out", type=Path, default=None, help="write the table here too")
    args = parser.parse_args(argv)
    with args.csv.open() as handle:
        rows = list(csv.DictReader(handle))
    params, activations = large_model_figures()
    table = memory_table(rows, params, activations)
    print(table, end="")
    if args.out is not None:
        args.out.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
