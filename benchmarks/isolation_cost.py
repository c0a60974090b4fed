"""What the daemon's isolation costs: se_darwin runs in its resident run process against
the same runs in this process.

Runs the daemon's own job function (``run_agent_job``) for se_darwin, alternating the
product's one isolation model (``resident``: the device's resident run process, forked by
the run worker; the first run pays the worker's imports and the fork) with ``in_process``
(the tests' seam, tests/genesis_fp16/in_process.py: no process at all, which no setting
selects: the floor), each run a few steps on generated sample data in a state folder of
its own (a run on a folder whose data is unchanged since its last run takes no step: the
data check answers it), and prints each one's wall seconds per run (median and range)::

    python benchmarks/isolation_cost.py --runs 5 --steps 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from genesis_fp16.config.plugins import load_plugin
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs import agent_job
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.launch.run_worker import WORKER
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "genesis_fp16"))
from in_process import execute_in_process  # the tests' seam

MODES = ("in_process", "resident")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per mode, interleaved")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sample-count", type=int, default=2000)
    args = parser.parse_args()
    for key in [k for k in os.environ if k.startswith("GENESIS_FP16_")]:
        del os.environ[key]
    loaded = load_plugin("se_darwin")
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    product = agent_job.execute_run
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.runs):
            for mode in MODES:
                agent_job.execute_run = execute_in_process if mode == "in_process" else product
                settings = Settings(
                    state_dir=Path(folder) / mode / str(round_),
                    steps_per_run=args.steps,
                    sample_count=args.sample_count,
                    auto_precision="rule",
                )
                metrics = DaemonMetrics(CollectorRegistry(), "bench")
                ctx = JobContext(settings, metrics, DeviceSlots(1), threading.Event())
                started = time.perf_counter()
                run_agent_job(ctx, "se_darwin", *loaded)
                seconds[mode].append(time.perf_counter() - started)
                ok = metrics.registry.get_sample_value(
                    "genesis_fp16_training_runs_total",
                    {"agent": "se_darwin", "outcome": "success"},
                )
                if ok != 1:
                    raise SystemExit(f"isolation_cost: a {mode} run did not succeed")
    agent_job.execute_run = product
    WORKER.close(wait=5.0)
    report = {
        mode: {
            "median_s": round(statistics.median(values), 2),
            "min_s": round(min(values), 2),
            "max_s": round(max(values), 2),
            "runs": len(values),
        }
        for mode, values in seconds.items()
    }
    # Every run generates its sample data; the first resident one also starts the worker
    # (the median leaves it out).
    report["resident_minus_in_process_median_s"] = round(
        report["resident"]["median_s"] - report["in_process"]["median_s"], 2
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
