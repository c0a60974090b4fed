"""A scheduled run's start: from the launcher's start of a process-isolated run to its first
training step, with the run's child started by exec and forked by the run worker, paired.

Calls the daemon's own launcher (``train_in_child``, genesis_fp16/launch/launcher.py) for a
few-step se_darwin run in fp32 (no calibration: that is the precision's cost, not the
start's), every run in one state folder after a warm-up run, with ``log_interval=1``: the
child's first ``{"progress": ...}`` line comes after its first optimizer step, and the clock stops
when the launcher reads it (``on_log``). Each round runs ``exec`` then ``worker`` (or the
other way round, alternating), so load on a shared machine falls on both; printed: median
and quartiles of each, and the median of the paired differences. The worker is started
(and its torch imported) before the first round, as the daemon's is by its first run; its
resident memory and start time are reported too::

    python benchmarks/run_start.py --runs 7 \\
        --out benchmarks/results/run_start_cpu-amd-epyc-2-cores.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from genesis_fp16.config.plugins import load_plugin
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.run_request import RequestOverrides, plan_request
from genesis_fp16.launch.launcher import train_in_child
from genesis_fp16.launch.run_worker import RunWorker
from genesis_fp16.plugin_api import TrainRequest


def _request(state: Path, steps: int, sample_count: int, device: str) -> TrainRequest:
    settings = Settings(state_dir=state, sample_count=sample_count)
    overrides = RequestOverrides(precision="fp32", steps=steps, log_interval=1)
    request = plan_request(settings, "se_darwin", *load_plugin("se_darwin"), device, overrides)
    return replace(request, checkpoint_steps=10**6)  # one checkpoint, at the end


def _time_run(request: TrainRequest, worker: RunWorker | None) -> dict[str, float]:
    """Seconds from the launcher's start to the first step and to the run's result."""
    started = time.perf_counter()
    marks: dict[str, float] = {}

    def on_log(summary: Any) -> None:
        marks.setdefault("first_step_s", time.perf_counter() - started)

    timed = request.with_callbacks(on_log=on_log, should_stop=lambda: False)
    train_in_child(timed, timeout=600, worker=worker)
    marks["run_s"] = time.perf_counter() - started
    if "first_step_s" not in marks:
        raise SystemExit(f"run_start: no progress line from the run ({marks})")
    return marks


def _stats(values: list[float]) -> dict[str, float]:
    q1, _, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values * 3)
    return {"median": round(statistics.median(values), 3), "q1": round(q1, 3), "q3": round(q3, 3)}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            names = [line.split(":", 1)[1].strip() for line in handle if "model name" in line]
    except OSError:
        names = []
    return names[0] if names else platform.processor() or platform.machine()


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _gpu_name(device: str) -> str | None:
    """The GPU's name (asked after the runs: this process is neither the worker nor a run)."""
    if not device.startswith("cuda"):
        return None
    import torch

    return str(torch.cuda.get_device_name(torch.device(device)))


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="paired rounds")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sample-count", type=int, default=200)
    parser.add_argument("--device", default="cpu", help="the runs' device (cpu, cuda)")
    parser.add_argument("--out", type=Path, help="write the results JSON here too")
    args = parser.parse_args()
    # The children's relayed log records: warnings only, or they drown the figures.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    worker = RunWorker()
    load_before = _loadavg()
    rounds: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as folder:
        request = _request(Path(folder), args.steps, args.sample_count, args.device)
        _time_run(request, None)  # warm-up: sample data, first checkpoint, the page cache
        started = time.perf_counter()
        _time_run(request, worker)  # the worker's start, as at the daemon's first run
        worker_first_run = time.perf_counter() - started
        for i in range(args.runs):
            order = ("exec", "worker") if i % 2 == 0 else ("worker", "exec")
            rounds.append(
                {how: _time_run(request, worker if how == "worker" else None) for how in order}
            )
            print(f"round {i + 1}: {rounds[-1]}", file=sys.stderr)
    worker.close()
    report: dict[str, Any] = {
        "command": "python benchmarks/run_start.py " + " ".join(sys.argv[1:]),
        "machine": _cpu_model(),
        "device": args.device,
        "gpu": _gpu_name(args.device),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "torch": _torch_version(),
        "loadavg_before": load_before,
        "loadavg_after": _loadavg(),
        "runs": args.runs,
        "steps": args.steps,
        "worker": {**worker.ready, "first_run_s": round(worker_first_run, 3)},
    }
    for phase in ("first_step_s", "run_s"):
        exec_s = [r["exec"][phase] for r in rounds]
        fork_s = [r["worker"][phase] for r in rounds]
        paired = [f - e for f, e in zip(fork_s, exec_s, strict=True)]
        report[phase] = {
            "exec": _stats(exec_s),
            "worker": _stats(fork_s),
            "paired_diff_median": round(statistics.median(paired), 3),
            "raw_exec": [round(x, 3) for x in exec_s],
            "raw_worker": [round(x, 3) for x in fork_s],
        }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
