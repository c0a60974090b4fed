"""How close the read of new data files runs to its parser's floor (issue 90, item 1).

    python benchmarks/read_floor.py [--count 25000] [--repeat 7] [--layouts json,jsonl]
        [--clock wall|cpu] [--workers N]

One process, one file of generated se_darwin records (``data.synthetic``, the sample
generator ``data generate`` uses): a pool ``.json`` and the same records as ``.jsonl``.
On the same bytes, interleaved, ``--repeat`` times each (the median):

* **floor**: msgspec decoding the file's bytes, already in memory, into the record type
  the reader decodes (``data.fast_records._Record``: a pool's ``trajectories`` as a dict of
  them, a ``.jsonl`` with ``Decoder.decode_lines``), with the garbage collector paused
  as the read pauses it;
* **read**: ``read_trajectories(file, quarantine, keep_text=False)``, a daemon run's read
  of a new file (its records into the pool's columns, labels, hashes, own numbers), from
  the file;
* **read+cache**: the same with a fresh record cache, as a run reads a file it has not
  seen: parsed, then its block stored.

``--workers N``: each read shares the file with N helper processes
(``data.read_workers``, the daemon's ``GENESIS_FP16_READ_WORKERS``; started before the
first timed read, as a resident run process keeps them). The floor stays msgspec on one
core; ``--clock cpu`` counts this process's CPU alone, not its helpers', so with helpers
only wall seconds say what a run waits.

And two parts of the read, on the same records decoded beforehand, to say what stands
between the read and its floor: **hashes**, each labelled record's fingerprint text (its
attempt's repr, change included) and its blake2b digests (``labelled_hash``, the judged
id's), which a block holds and which no decoder makes; and **own**, its own numbers.

The ratio is the read's throughput over the floor's (floor seconds / read seconds): 1.0
is a read as fast as msgspec alone. Issue 90 asks for at least 0.5. Timings on a shared,
loaded host swing with the load, so the floor and the read alternate, run by run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from genesis_fp16_infrastructure.data import batch_block, struct_columns
from genesis_fp16_infrastructure.data.fast_records import _Record, _settled
from genesis_fp16_infrastructure.data.manifest import RACY_NS, scan_files
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.schema import derive_outcomes
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.machine_memory import paused_gc


class _Pool(msgspec.Struct):
    """A pool's records, decoded into the reader's record type (the header left out)."""

    trajectories: dict[str, _Record]


def write_files(folder: Path, count: int, seed: int = 0) -> dict[str, Path]:
    """The same generated records as a pool ``.json`` and a ``.jsonl``, each alone in
    its own folder (a read of the folder reads that one file)."""
    pool = generate_pool(count, seed=seed)
    paths = {"json": folder / "json" / "pool.json", "jsonl": folder / "jsonl" / "pool.jsonl"}
    for path in paths.values():
        path.parent.mkdir(parents=True)
    paths["json"].write_text(json.dumps(pool))
    lines = (json.dumps(record) for record in pool["trajectories"].values())
    paths["jsonl"].write_text("\n".join(lines) + "\n")
    return paths


def decode(data: bytes, layout: str) -> list[Any]:
    """msgspec alone: the bytes into the record type."""
    with paused_gc():
        if layout == "json":
            return list(msgspec.json.decode(data, type=_Pool).trajectories.values())
        return msgspec.json.Decoder(_Record).decode_lines(data)


def floor(data: bytes, layout: str) -> int:
    """The floor: how many records msgspec decoded."""
    return len(decode(data, layout))


def parts(data: bytes, layout: str) -> dict[str, Callable[[], int]]:
    """The read's hashes and own numbers of the file's records, each a step to time."""
    settled = [_settled(record, None) for record in decode(data, layout)]
    records = [fast[0] for fast in settled if fast is not None]  # every one has an id
    batch = struct_columns.columns_of(records, sum(fast[1] for fast in settled if fast is not None))
    score = np.array(batch.score, "<f8").reshape(len(records))
    outcome = derive_outcomes(batch.word, score)
    coded = {name: batch_block._coded(getattr(batch, name)) for name in batch_block._CODED_NAMES}
    codes, tool_lists = coded["tools_used"]
    tools = np.array([float(len(set(t))) for t in tool_lists])[codes]
    created = np.array(batch.created, "<f8").reshape(len(records))

    def hashes() -> int:
        with paused_gc():
            return len(batch_block._label_hashes(batch, created, outcome, score, coded)[0])

    def own() -> int:
        with paused_gc():
            files = batch_block._coded(batch.modified_files)
            return len(batch_block._own_columns(batch, tools, files))

    return {"hashes": hashes, "own": own}


def measure(
    path: Path,
    layout: str,
    repeat: int,
    work: Path,
    clock: Callable[[], float] = time.perf_counter,
    workers: int = 0,
) -> dict[str, Any]:
    """Median seconds of the floor, the read and the read with a fresh record cache,
    interleaved; the ratios of their throughputs."""
    data = path.read_bytes()
    time.sleep(RACY_NS / 1e9 + 0.1)  # the file older than the manifest's racy window
    manifest, _ = scan_files(path)
    runs: dict[str, list[float]] = {}
    records = {"floor": floor(data, layout)}

    def read() -> int:
        return len(
            read_trajectories(path, work / "q.jsonl", keep_text=False, workers=workers).columns
        )

    def read_cache() -> int:
        cache = RecordCache(Path(tempfile.mkdtemp(dir=work)), manifest)
        found = read_trajectories(
            path, work / "q.jsonl", keep_text=False, cache=cache, workers=workers
        )
        return len(found.columns)

    read()  # the helpers started, as a resident run process keeps them (none without)

    steps: dict[str, Callable[[], int]] = {
        "floor": lambda: floor(data, layout), "read": read, "read_cache": read_cache,
        **parts(data, layout),
    }  # fmt: skip
    for _ in range(repeat):
        for name, step in steps.items():
            start = clock()
            records[name] = step()
            runs.setdefault(name, []).append(clock() - start)
    if len(set(records.values())) != 1:
        raise RuntimeError(f"the floor and the read disagree on the records: {records}")
    median = {name: statistics.median(seconds) for name, seconds in runs.items()}
    return {
        "layout": layout,
        "records": records["floor"],
        "mb": len(data) / 1e6,
        **median,
        "ratio_read": median["floor"] / median["read"],
        "ratio_read_cache": median["floor"] / median["read_cache"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=25_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--layouts", default="json,jsonl")
    # cpu: this process's CPU seconds (time.process_time), which a host loaded by others
    # moves far less than wall seconds
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--workers", type=int, default=0, help="helper processes of each read")
    args = parser.parse_args()
    print(f"loadavg: {_loadavg()}; clock: {args.clock}; read helpers: {args.workers}")
    print(
        "| file | records | MB | floor s | read s | read+cache s | read/floor | +cache/floor "
        "| hashes s | own s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_files(Path(tmp), args.count)
        for layout in args.layouts.split(","):
            clock = time.perf_counter if args.clock == "wall" else time.process_time
            row = measure(paths[layout], layout, args.repeat, Path(tmp), clock, args.workers)
            print(
                f"| .{layout} | {row['records']:,} | {row['mb']:.1f} | {row['floor']:.3f} | "
                f"{row['read']:.3f} | {row['read_cache']:.3f} | {row['ratio_read']:.2f} | "
                f"{row['ratio_read_cache']:.2f} | {row['hashes']:.3f} | {row['own']:.3f} |"
            )
    print(f"loadavg: {_loadavg()}")


def _loadavg() -> str:
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


if __name__ == "__main__":
    main()
