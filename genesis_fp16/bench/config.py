"""What `bench` may run, and one configuration of it: plain data that crosses the subprocess
boundary, importable without torch (the `bench` parser is built from it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from genesis_fp16_infrastructure.api import RequestedName

SIZES: tuple[str, ...] = ("default", "large")
# Where a run writes unless --out-dir says otherwise: a fresh folder per run, named by its
# UTC start time, so that no run replaces another's files (or the committed ones, which
# live in COMMITTED_OUT and are written only when --out-dir names it).
RUNS_ROOT = Path("bench-runs")
COMMITTED_OUT = Path("benchmarks/results")
# fp16 matmuls have no native CPU kernels (10-100x slower than fp32): fewer steps there.
CPU_FP16_WARMUP, CPU_FP16_STEPS = 1, 2
# Untimed steps of a row by default: the graph runners' 3 eager warm-up steps and their
# capture, so that every timed step of theirs is a replay (a capture is slow and, before
# this, ours-graph's pre-capture state copy read the device inside the timed window).
# Every runner gets the same count, so the rows train the same steps.
UNTIMED_STEPS = 4
# ours-graph: our Trainer with cuda_graph="on" (ours-graph-compile: and compile="on", the
# model compiled inside the captured step); hand-graph: the same step written by hand
# and replayed from one CUDA graph (the anchor: the limit of this workload on the device);
# compile / compile-ro: the hand loop with torch.compile(model), default mode and
# "reduce-overhead" (what a user would try first to cut launch overhead).
RUNNERS: tuple[str, ...] = (
    "ours",
    "hand",
    "accelerate",
    "fabric",
    "ours-graph",
    "ours-graph-compile",
    "hand-graph",
    "compile",
    "compile-ro",
)
CUDA_ONLY_RUNNERS: tuple[str, ...] = ("ours-graph", "ours-graph-compile", "hand-graph")
# The runners a plain `bench` runs per device. compile on a CPU needs a C++ toolchain and
# minutes of compiling per row; ask for it with --runners.
DEFAULT_RUNNERS: dict[str, tuple[str, ...]] = {
    "cpu": ("ours", "hand", "accelerate", "fabric"),
    "cuda": RUNNERS,
}
# `bench --tiny`, a smoke test under a minute on a 2-core CPU: one size, the project and
# the hand-written loop, one process (--sizes, --runners, --precisions widen it).
TINY_SIZES: tuple[str, ...] = ("default",)
TINY_RUNNERS: tuple[str, ...] = ("ours", "hand")
# Batch sizes a plain `bench` runs: on CUDA one launch-bound and one compute-bound size
# of the large world model (h100-2026-11-22.md); on a CPU the step is compute-bound at 64.
DEFAULT_BATCH_SIZES: dict[str, tuple[int, ...]] = {"cpu": (64,), "cuda": (64, 8192)}
# TF32 is a precision of its own only where it exists: NVIDIA GPUs from Ampere on. auto is
# resolved as the daemon resolves it, by measurement (calibration.py): our runners only.
BenchPrecision = Literal["tf32", RequestedName]
"""What `bench` times: a requested precision, or TF32 (fp32 on TF32 tensor cores)."""
PRECISIONS_BY_DEVICE: dict[str, tuple[BenchPrecision, ...]] = {
    "cpu": ("fp32", "bf16", "fp16", "auto"),
    "cuda": ("fp32", "tf32", "bf16", "fp16", "auto"),
}
AUTO_RUNNERS: tuple[str, ...] = ("ours", "ours-graph")


@dataclass(frozen=True)
class BenchConfig:
    """One row of the benchmark: a model size trained at one precision by one runner.

    >>> BenchConfig(size="default", precision="bf16", runner="ours").runner
    'ours'
    """

    size: str
    precision: BenchPrecision
    runner: str
    device: str = "cpu"
    batch_size: int = 64
    warmup_steps: int = UNTIMED_STEPS
    timed_steps: int = 20
    seed: int = 0
    lr: float = 1e-3
    max_grad_norm: float = 1.0
    # Extra step counts after which the eval loss is also recorded (outside the timed
    # steps), so that a row with fewer steps has an fp32 reference at its own length.
    eval_at: tuple[int, ...] = field(default_factory=tuple)
    threads: int | None = None  # torch intra-op threads; None keeps torch's default
    tiny: bool = False  # each size scaled down (workload.TINY_MODELS) on a small pool
    data_path: str | None = None  # the synthetic pool; generated per process when None

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.timed_steps
