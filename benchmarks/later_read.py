"""A later run's read in one resident process: the pool read before, plus new records.

Issue 90: a later run's read should cost what is new. In one process, as a resident run
process holds it (``kept_in_memory``, a 1 GiB budget, the daemon's default): the pool's
old files are read once (the first run), a new file of ``--new`` records is added, and
the read a run makes is timed: the manifest's scan, the record cache's read and the
fingerprint of its labelled records (``recipes/retrain/run.py``'s ``read`` phase). Before
each timed read the new file is taken away and the old files read again, so each repeat
finds the old pool kept and the new file new. Medians of ``--repeats``. Works on a tree
before the incremental join too (it fingerprints the columns itself there)::

    python benchmarks/later_read.py --pools 10000,100000 --new 1000 --repeats 7
    python benchmarks/later_read.py --pools 100000 --first  # a new file sorting first
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory

OLD_FILE = 50_000  # records an old file holds (the daemon's `data generate` writes several)


def _aged(file: Path) -> None:
    past = time.time_ns() - 60 * 10**9  # older than the cache's RACY_NS: kept
    os.utime(file, ns=(past, past))


def _write(file: Path, count: int, seed: int) -> None:
    file.write_text(json.dumps(generate_pool(count, seed=seed)))
    _aged(file)


def _read(
    folder: Path, cache: Path, memory: KeptInMemory, manifest: object
) -> tuple[object, float]:
    started = time.perf_counter()
    scanned, _ = scan_files(folder, manifest)  # type: ignore[arg-type]
    data = read_trajectories(folder, cache=RecordCache(cache, scanned, memory), keep_text=False)
    seen = getattr(data, "fingerprint", None)  # the tree's own kept one, else worked out
    if seen is None:
        fingerprint_of(data.columns)
    return scanned, time.perf_counter() - started


def measure(pool: int, new: int, repeats: int, root: Path, name: str) -> dict[str, object]:
    folder, spare, cache = root / "pool", root / "spare", root / "cache"
    folder.mkdir()
    spare.mkdir()
    old = pool - new
    for k in range(0, old, OLD_FILE):
        _write(folder / f"old-{k // OLD_FILE:03d}.json", min(OLD_FILE, old - k), seed=100 + k)
    for r in range(repeats):  # new records each time: no cache entry holds their bytes
        _write(spare / f"new-{r}.json", new, seed=9000 + r)
    memory = KeptInMemory(1024 * 2**20)
    manifest, _ = _read(folder, cache, memory, None)  # the first run
    later, unchanged = [], []
    for r in range(repeats):
        (folder / name).unlink(missing_ok=True)
        manifest, _ = _read(folder, cache, memory, manifest)  # the old pool kept again
        manifest, seconds = _read(folder, cache, memory, manifest)
        unchanged.append(seconds)
        shutil.copy2(spare / f"new-{r}.json", folder / name)  # its date kept
        manifest, seconds = _read(folder, cache, memory, manifest)
        later.append(seconds)
    return {
        "pool": pool,
        "new": new,
        "new_file": name,
        "later_read_s": statistics.median(later),
        "later_read_all_s": [round(s, 4) for s in later],
        "unchanged_read_s": statistics.median(unchanged),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--first",
        action="store_true",
        help="the new file sorts before the old ones (aa-new.json, not zz-new.json): "
        "its records come first, and the whole pool is joined",
    )
    args = parser.parse_args()
    tree = Path(fingerprint_of.__code__.co_filename).parents[3]  # the tree read from
    commit = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    for pool in [int(p) for p in args.pools.split(",")]:
        with tempfile.TemporaryDirectory() as root:
            name = "aa-new.json" if args.first else "zz-new.json"
            row = measure(pool, args.new, args.repeats, Path(root), name)
        row["commit"], row["tree"] = commit, str(tree)
        row["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
        print(json.dumps(row), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
