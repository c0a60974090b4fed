"""Wall time of successive se_darwin runs through the launcher and the run worker: a child
forked per run against the device's resident run process (issue 91,
genesis_fp16/commands/resident.py). Each mode gets a fresh worker and RUNS runs of STEPS fixed
steps on the same 100-record pool; the first run pays the worker's start (its imports).

    python benchmarks/resident_runs.py --steps 20 --runs 3 --rounds 2

Prints one line per run: mode, run index, wall seconds from the launcher's call to its
result, and the steps taken. Modes alternate, round after round, so that the host's load
falls on both.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from genesis_fp16.commands.resident import MAX_MIB
from genesis_fp16.launch import launcher
from genesis_fp16.launch.run_worker import RunWorker
from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_infrastructure.data.synthetic import generate_pool


def measure(folder: Path, steps: int, runs: int, resident: bool) -> list[float]:
    """Wall seconds of ``runs`` runs through one new worker."""
    pool = folder / "pool.json"
    pool.write_text(json.dumps(generate_pool(100, seed=0)))
    worker = RunWorker()
    walls = []
    try:
        for index in range(runs):
            request = TrainRequest(
                agent="se_darwin",
                precision="fp32",
                precision_reason="benchmark",
                state_dir=folder,
                checkpoint_dir=folder / f"ck{index}",  # a fresh run each time, not resumed
                data_path=pool,
                steps=steps,
            )
            started = time.perf_counter()
            result = launcher.train_in_child(
                request, timeout=600, worker=worker, resident_max_mib=MAX_MIB if resident else None
            )
            walls.append(time.perf_counter() - started)
            mode = "resident" if resident else "forked"
            print(f"{mode} run {index} {walls[-1]:.2f} s, {result.steps} steps", flush=True)
    finally:
        worker.close()
    return walls


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    for _ in range(args.rounds):
        for resident in (False, True):
            with tempfile.TemporaryDirectory() as folder:
                measure(Path(folder), args.steps, args.runs, resident)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
