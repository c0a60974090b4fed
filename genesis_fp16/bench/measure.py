"""Measure one configuration: warm up, time the steady steps, evaluate, report a row.

``python -m genesis_fp16.bench.measure`` measures one in this (fresh) process: config
JSON on stdin, the row on stdout. A process of its own gives the configuration its own
CPU peak RSS (a lifetime peak: ``peak_rss_mib``, this process's VmHWM) and its own
Accelerate singleton and TF32 flags.

What actually ran is measured too, the benchmark's honesty checks: the dtype seen inside
the forward, host syncs, peak memory, device. A runner can ask for bf16 and get fp32 (a
library that quietly ignores the request, an autocast disabled behind its back); the
`DtypeProbe` looks at a real layer's output inside the timed forward, so the row reports
what ran, not what was asked.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import torch
from torch import nn

from genesis_fp16.bench.config import BenchConfig
from genesis_fp16.bench.report import Row, device_slug
from genesis_fp16.bench.runners import RUNNER_CLASSES, Runner, set_tf32
from genesis_fp16_infrastructure.api import Workload, peak_rss_mib

_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


class DtypeProbe:
    """Records the output dtype of the model's first `nn.Linear`, once, when armed.

    >>> model = nn.Sequential(nn.Linear(4, 4))
    >>> probe = DtypeProbe(model)
    >>> probe.arm()
    >>> with torch.autocast("cpu", torch.bfloat16):
    ...     _ = model(torch.randn(2, 4))
    >>> probe.ran
    'bf16'
    """

    def __init__(self, model: nn.Module) -> None:
        layer = next((m for m in model.modules() if isinstance(m, nn.Linear)), None)
        if layer is None:
            raise ValueError(f"{type(model).__name__} has no nn.Linear for the dtype probe")
        self._armed = False
        self.ran: str | None = None
        self._device_type = next(layer.parameters()).device.type
        self._handle = layer.register_forward_hook(self._record)

    def arm(self) -> None:
        """Record the next forward (call this at the start of the timed steps)."""
        self._armed = True

    def _record(self, module: nn.Module, args: Any, output: Any) -> None:
        if not self._armed:
            return
        self._armed = False
        name = _DTYPE_NAMES.get(output.dtype, str(output.dtype))
        if name == "fp32" and self._device_type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
            name = "tf32"  # its matmuls may use TF32 tensor cores now
        self.ran = name

    def remove(self) -> None:
        self._handle.remove()


# The text of the warning c10 raises for each synchronising call in sync debug mode "warn"
# (c10/cuda/CUDAFunctions.cpp, warn_or_error_on_sync; the same from torch 1.10 to 2.11).
# Other warnings in the counted region are not syncs: torch 2.11 also warns, once, that
# "Synchronization debug mode is a prototype feature", which a substring match on
# "synchroniz" counted as one sync of device-only work.
SYNC_WARNING = "called a synchronizing CUDA operation"


def count_sync_warnings(messages: Iterable[str]) -> int:
    """How many of ``messages`` report a synchronising CUDA call.

    >>> count_sync_warnings(["called a synchronizing CUDA operation",
    ...                      "Synchronization debug mode is a prototype feature"])
    1
    """
    return sum(SYNC_WARNING in message for message in messages)


class SyncCounter:
    """Counts host-device synchronisations on CUDA through torch's sync debug mode.

    In "warn" mode every synchronising call (`.item()`, a device-to-host copy, `nonzero`,
    ...) raises a UserWarning with :data:`SYNC_WARNING`; those are counted, and only
    those. Outside CUDA, `count` stays None: there is no device to wait for.
    """

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda"
        self.count: int | None = None

    @contextmanager
    def counting(self) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        previous = torch.cuda.get_sync_debug_mode()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield
            finally:
                torch.cuda.set_sync_debug_mode(previous)
        self.count = count_sync_warnings(str(w.message) for w in caught)


def current_rss_mb() -> float:
    """Resident set size of this process now, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def machine_slug(device: torch.device) -> str:
    """A benchmark result file's machine part (``device_slug``): the GPU model, or the CPU
    model from /proc/cpuinfo and the core count; the CPUs this project runs on vary (AMD
    EPYC, Intel Xeon), and a figure is only worth its machine's name.

    >>> machine_slug(torch.device("cpu")).startswith("cpu-")
    True
    """
    if device.type == "cuda":
        return device_slug("cuda", torch.cuda.get_device_name(device))
    return device_slug("cpu", device_name(device).replace("(R)", "").replace("Processor", ""))


def device_name(device: torch.device) -> str:
    """A human name for the device: the GPU model, or the CPU model and core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


class _StepClock:
    """Per-step durations. On CUDA, events recorded in the stream: no sync until `read()`."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._spans: list[Any] = []

    @contextmanager
    def step(self) -> Iterator[None]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._spans.append((start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._spans.append(time.perf_counter() - t0)

    def read_ms(self) -> list[float]:
        """Step times in milliseconds (call after the device has been synchronised)."""
        if self.cuda:
            return [s.elapsed_time(e) for s, e in self._spans]
        return [s * 1000 for s in self._spans]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def _sync_debug_paused(device: torch.device) -> Iterator[None]:
    """Evaluation between timed steps reads the device on purpose: do not count it."""
    if device.type != "cuda":
        yield
        return
    mode = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(0)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(mode)


def _train(
    runner: Runner,
    workload: Workload,
    config: BenchConfig,
    device: torch.device,
    probe: DtypeProbe,
) -> tuple[list[float], int | None, dict[int, float]]:
    """Run warm-up and timed steps; return the step times, host syncs and mid-run evals."""
    evals: dict[int, float] = {}

    def after(step: int) -> None:
        if step in config.eval_at and step != config.total_steps:
            with _sync_debug_paused(device):
                evals[step] = workload.eval_loss(workload.model)

    for step in range(config.warmup_steps):
        runner.step(workload.batch(step))
        after(step + 1)
    clock, syncs = _StepClock(device), SyncCounter(device)
    _sync(device)
    probe.arm()
    with syncs.counting():
        for step in range(config.warmup_steps, config.total_steps):
            with clock.step():
                runner.step(workload.batch(step))
            after(step + 1)
    _sync(device)
    return clock.read_ms(), syncs.count, evals


KERNEL_STEPS = 3  # profiled steps after the timed ones, for kernels_per_step


def _kernels_per_step(
    runner: Runner, workload: Workload, config: BenchConfig, device: torch.device
) -> float | None:
    """CUDA kernels launched per step, counted by torch.profiler (None off CUDA).

    Runs after the evaluation, so the profiled steps neither slow the timed ones nor
    change the eval loss. Copies and memsets are not kernels and are not counted.
    """
    if device.type != "cuda":
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(KERNEL_STEPS):
            runner.step(workload.batch(config.total_steps + i))
        torch.cuda.synchronize(device)
    kernels = [
        e
        for e in prof.events()
        if e.device_type == DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset"))
    ]
    return len(kernels) / KERNEL_STEPS


def _fresh_device_state(device: torch.device) -> float:
    """Start memory accounting for this configuration; returns its baseline: the CPU's
    RSS, or on CUDA the bytes still allocated (in MiB) when the peak is reset.

    The peak is reset per row, and what an earlier row of this process left allocated
    (a graph pool, a compiled cache, a cycle not yet collected) is the baseline, taken
    off the row's peak: the H100 rows rose 262 -> 1,114 MiB at batch 64 across rows of
    one process while the peak included what came before."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device) / 2**20
    return current_rss_mb()


def _peak_memory(device: torch.device, baseline: float, isolated: bool) -> tuple[float | None, str]:
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**20 - baseline
        return peak, "cuda_max_memory_allocated_over_row_start"
    if not isolated:
        return None, "not measured (CPU, in-process run)"
    return peak_rss_mib() - baseline, "cpu_peak_rss_over_baseline"


def run_config(config: BenchConfig, isolated: bool) -> Row:
    """Measure one configuration and return its row of measured columns.

    `isolated` says this process runs only this configuration, so its lifetime peak RSS
    belongs to it; in-process runs on CPU leave the memory column empty.
    """
    device = torch.device(config.device)
    threads_before = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        return _measure(config, device, isolated)
    finally:
        torch.set_num_threads(threads_before)  # in-process runs leave the caller as it was


def _measure(config: BenchConfig, device: torch.device, isolated: bool) -> Row:
    runner_class = RUNNER_CLASSES[config.runner]
    importlib.import_module(runner_class.library)  # its imports are not the row's peak
    # On CUDA the row's data counts (it is on the device); a CPU row's RSS baseline is
    # taken after reading it, as before (the reader's own allocations are not the row's).
    cuda_baseline = _fresh_device_state(device) if device.type == "cuda" else 0.0
    with tempfile.TemporaryDirectory() as folder:
        data_path = Path(
            config.data_path or Workload.write_data(Path(folder), config.tiny, config.seed)
        )
        data = Workload.load_data(data_path, config.batch_size, device)
    rss_baseline = cuda_baseline if device.type == "cuda" else _fresh_device_state(device)
    workload = Workload.build(config.size, data, config.seed, config.tiny, device)
    runner = runner_class()
    probe = DtypeProbe(workload.model)
    try:
        runner.prepare(workload, config, device)
        times, syncs, evals = _train(runner, workload, config, device, probe)
        eval_loss = workload.eval_loss(workload.model)
        skipped = runner.skipped_steps()
        kernels = _kernels_per_step(runner, workload, config, device)
    finally:
        probe.remove()
        set_tf32(False)
    peak, mem_kind = _peak_memory(device, rss_baseline, isolated)
    evals[config.total_steps] = eval_loss
    return {
        "device": device.type,
        "device_name": device_name(device),
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "size": config.size,
        "params": workload.parameters,
        "runner": config.runner,
        "precision_requested": config.precision,
        "precision_ran": probe.ran or "unknown",
        # auto is honest when what ran is what it chose (the choice is in the note)
        "honest": probe.ran == (getattr(runner, "chosen", None) or config.precision),
        "batch_size": config.batch_size,
        "warmup_steps": config.warmup_steps,
        "timed_steps": config.timed_steps,
        "median_step_ms": statistics.median(times),
        # From the summed step times, so an evaluation between steps does not count.
        "samples_per_s": config.batch_size * len(times) / (sum(times) / 1000),
        "peak_mem_mb": peak,
        "mem_measure": mem_kind,
        "eval_loss": eval_loss,
        "eval_loss_at": {str(k): v for k, v in sorted(evals.items())},
        "skipped_steps": skipped,
        "overflow_rate": skipped / config.total_steps,
        "host_syncs_per_step": None if syncs is None else syncs / config.timed_steps,
        "kernels_per_step": kernels,
        "execution": getattr(runner, "execution", "eager"),
        "runner_note": runner.note,
    }


ROW_MARKER = "BENCH_ROW "  # libraries print banners on stdout; the row is the marked line


def main() -> int:
    config = msgspec.json.decode(sys.stdin.buffer.read(), type=BenchConfig)
    row = run_config(config, isolated=True)
    print(ROW_MARKER + json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
