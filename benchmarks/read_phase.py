"""A daemon run's ``read`` phase in one process, the second run a resident process serves.

Issue 90 item 1: ``read`` should cost what is new. The daemon's ``read`` phase is two
reads (``judging.up_to_date.judged_phases``): the judged run's listing of the records
(``recipes.retrain.scoring.record_ids``: the pool read, its judged ids and segments),
then the training run's own read (``record_cache`` and ``read_pool``: the pool the
listing kept in memory, and its fingerprint). For each pool P this writes the data as
``run_anatomy.py`` does (P - n records in one file, seed 99; then n more in a file that
sorts after it, seed 3099 + repeat), and in one process with a 1 GiB store
(``kept_in_memory``, the daemon's default) makes a first run's read of the old file,
adds the new one, and times the later run's read. Each repeat starts from a fresh
store, cache and state folder. Medians of ``--repeats``, in seconds of wall time and of
this process's CPU time (the CPU time is the steadier on a loaded host). ``--earlier G``
grows the pool by G files of ``--new`` records (each read as a later run's) before the
measured one, as a resident process's runs do day after day; ``store_cpu_s`` is the CPU
time inside the record cache's ``extend_pool`` and ``load_pool`` (the kept pool grown, kept
and taken back: issue 90's copies of the whole pool), ``peak_mib`` the process's peak
resident size over the measured read (Linux's VmHWM, reset before it) and ``kept_mib`` the
memory store's own estimate of what it holds after it. Run it with each tree first on
``PYTHONPATH``, interleaved, for an A/B::

    PYTHONPATH=<tree>:<tree>/agents:<tree>/infrastructure \\
        python benchmarks/read_phase.py --pools 10000,100000 --new 1000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import genesis_fp16_infrastructure
from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.api import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.data.manifest import Manifest, scan_files
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import scoring
from genesis_fp16_infrastructure.recipes.retrain.freshness import record_cache
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.run import read_pool

KEEP = 1024 * 2**20  # GENESIS_FP16_RUN_RESIDENT_KEEP_MIB's default, in bytes


def _write(file: Path, count: int, seed: int) -> None:
    if not file.exists():
        file.write_text(json.dumps(generate_pool(count, seed=seed)))
    past = time.time_ns() - 60 * 10**9  # older than the cache's RACY_NS: kept
    os.utime(file, ns=(past, past))


def _request(work: Path, manifest: Manifest) -> TrainRequest:
    return TrainRequest(
        agent="se_darwin",
        precision_reason="benchmark",
        state_dir=work / "state",
        checkpoint_dir=work / "checkpoints",
        data_path=work / "data",
        quarantine_path=work / "quarantine.jsonl",
        keep_in_memory_bytes=KEEP,
        snapshot=AgentSnapshot(data=DataCheck(scan=manifest)),
    )


def _read_phase(request: TrainRequest) -> None:
    """The listing's read, then the training run's (recipes/retrain/run.py's ``read``)."""
    scoring.record_ids(request)
    assert request.snapshot is not None and request.snapshot.data is not None
    cache = record_cache(request, request.snapshot.data.scan)
    options = TaskOptions.from_mapping(request.options)
    data = read_pool(request, options, request.quarantine_path, cache)
    data.fingerprint  # noqa: B018 (the run keeps it with the pool)


def _reset_peak() -> None:
    """Reset this process's VmHWM to its resident size now (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def _peak_mib() -> float:
    """This process's VmHWM (peak resident size since the reset), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _StoreClock:
    """CPU seconds spent inside the record cache's ``extend_pool`` and ``load_pool``."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, name: str) -> None:
        inner = getattr(RecordCache, name)

        def timed(cache: RecordCache, *args: Any) -> Any:
            start = time.process_time()
            try:
                return inner(cache, *args)
            finally:
                self.seconds += time.process_time() - start

        setattr(RecordCache, name, timed)


def measure(
    pool: int, new: int, repeats: int, data: Path, root: Path, earlier: int = 0
) -> dict[str, Any]:
    data.mkdir(parents=True, exist_ok=True)
    old = data / f"pool-99-{pool - new * (1 + earlier)}.json"
    _write(old, pool - new * (1 + earlier), 99)
    walls, cpus, stores, peaks, kept = [], [], [], [], []
    clock = _StoreClock()
    for name in ("extend_pool", "load_pool"):
        clock.wrap(name)
    for r in range(repeats):  # new records each time: no cache entry holds their bytes
        work = root / f"run-{r}"
        for folder in ("data", "state", "checkpoints"):
            (work / folder).mkdir(parents=True)
        shutil.copy2(old, work / "data" / "pool-99.json")
        kept_in_memory._PROCESS.clear()  # a fresh resident process's store
        scoring._RUN_POOL.clear()
        scan, _ = scan_files(work / "data", None)
        _read_phase(_request(work, scan))  # the first run
        for g in range(earlier + 1):  # the earlier growths, then the measured one
            seed = 3099 + r * (earlier + 1) + g
            _write(data / f"new-{seed}.json", new, seed)
            shutil.copy2(data / f"new-{seed}.json", work / "data" / f"zz-pool-{g:03d}.json")
            scan, _ = scan_files(work / "data", scan)  # the plan's scan: not in the phase
            request = _request(work, scan)
            _reset_peak()
            wall, cpu, clock.seconds = time.perf_counter(), time.process_time(), 0.0
            _read_phase(request)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        stores.append(clock.seconds)
        peaks.append(_peak_mib())
        store = kept_in_memory.current()
        kept.append(0.0 if store is None else store.used / 2**20)
        shutil.rmtree(work)
    return {
        "pool": pool,
        "new": new,
        "earlier": earlier,
        "read_wall_s": round(statistics.median(walls), 4),
        "read_cpu_s": round(statistics.median(cpus), 4),
        "store_cpu_s": round(statistics.median(stores), 4),
        "wall_all": [round(s, 4) for s in walls],
        "cpu_all": [round(s, 4) for s in cpus],
        "store_all": [round(s, 4) for s in stores],
        "peak_mib": round(max(peaks), 1),  # VmHWM over the measured read (reset before it)
        "kept_mib": round(statistics.median(kept), 1),  # the store's own estimate after it
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--earlier", type=int, default=0, help="growths before the measured")
    parser.add_argument("--data", type=Path, default=None, help="keep the written data here")
    args = parser.parse_args()
    tree = Path(genesis_fp16_infrastructure.__file__).resolve().parents[2]
    rows = []
    for pool in [int(p) for p in args.pools.split(",")]:
        with tempfile.TemporaryDirectory() as root:
            data = (args.data or Path(root) / "made") / f"pool-{pool}"
            row = measure(pool, args.new, args.repeats, data, Path(root), args.earlier)
        row["tree"] = str(tree)
        row["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
        rows.append(row)
        print(json.dumps(row), flush=True)
    if len(rows) == 2:
        keys = ("read_wall_s", "read_cpu_s", "store_cpu_s")
        ratio = {k: round(rows[1][k] / max(rows[0][k], 1e-9), 3) for k in keys}
        print(json.dumps({"tree": str(tree), "ratio": ratio}), flush=True)


if __name__ == "__main__":
    main()
