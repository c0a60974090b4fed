"""The kept numeric rows' cost at a pool with new records, before and after, in one process.

Issue 90: the kept rows (``world_model.kept_numeric``) should cost what is new. For each
pool P it writes ``data generate se_darwin`` data as ``run_anatomy.py`` does (P - n
records, seed 99, then n more, seed 3099), reads both pools' columns once, keeps the
first pool's file with each variant, then times ``KeptNumeric.rows`` of the second pool
(the file put back as the first pool left it before every call), the variants
interleaved, ``--reps`` times; medians. The variants: this tree's ``kept_numeric``, and
``--base``'s (its ``kept_numeric.py`` loaded from git into this process; what it imports
is this tree's, which computes the same index at the same cost). Also: the bytes each
variant writes, and each variant's rows checked against working every record out::

    python benchmarks/kept_rows_ab.py --pools 10000,100000 --new 1000 --base 4aa671e0 \
        --data /tmp/kept_rows_data
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from other_tree import module_from

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.world_model import features, kept_numeric

TREE = Path(__file__).resolve().parents[1]
MODULE = "infrastructure/genesis_fp16_infrastructure/world_model/kept_numeric.py"


def _base(commit: str) -> ModuleType:
    """``commit``'s kept_numeric module, loaded under another name."""
    source = subprocess.run(
        ["git", "-C", str(TREE), "show", f"{commit}:{MODULE}"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "kept_numeric_base.py"
    path.write_text(source)
    return module_from(path, "kept_numeric_base")


def _generate(folder: Path, count: int, seed: int, name: str) -> None:
    if (folder / name).exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"generated-{seed}"
    args = ["data", "generate", "se_darwin", "--out", str(out), "--count", str(count)]
    written = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args, "--seed", str(seed)],
        check=True, capture_output=True, text=True,
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    shutil.move(written, folder / name)
    shutil.rmtree(out)


def _pools(data: Path, pool: int, new: int) -> tuple[PoolColumns, PoolColumns]:
    """The first pool (pool - new records) and the second (the new ones added)."""
    first, second = data / f"{pool}-first", data / f"{pool}-second"
    _generate(first, pool - new, 99, "pool-99.json")
    _generate(second, new, 3099, "pool-3099.json")
    if not (second / "pool-99.json").exists():
        os.link(first / "pool-99.json", second / "pool-99.json")
    read = [read_trajectories(f, keep_text=False).columns for f in (first, second)]
    return read[0], read[1]


def _measure(pool: int, new: int, reps: int, data: Path, base: ModuleType) -> dict[str, Any]:
    first, second = _pools(data, pool, new)
    want = features.numeric_rows(second, second.labelled).numpy().view(np.int64)
    variants = {"before": base, "after": kept_numeric}
    saved: dict[str, tuple[Path, bytes]] = {}
    times: dict[str, list[float]] = {name: [] for name in variants}
    written: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, module in variants.items():
            kept = module.KeptNumeric(Path(tmp) / name, data / "kept")
            kept.rows(first)
            saved[name] = (kept.path, kept.path.read_bytes())
        for _ in range(reps):
            for name, module in variants.items():
                path, raw = saved[name]
                path.write_bytes(raw)
                before = path.stat().st_mtime_ns
                kept = module.KeptNumeric(path.parent, data / "kept")
                start = time.perf_counter()
                got = kept.rows(second)
                times[name].append(time.perf_counter() - start)
                same = np.array_equal(got.numpy().view(np.int64), want)
                assert same, f"{name}: rows differ from working every record out"
                changed = path.stat().st_mtime_ns != before
                written[name] = path.stat().st_size if changed else 0
                assert kept.computed < len(second.labelled), f"{name}: the pool worked out"
    return {
        "pool": pool,
        "new": new,
        **{f"{n}_s": statistics.median(t) for n, t in times.items()},
        **{f"{n}_written": b for n, b in written.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--base", default="4aa671e0")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "kept_rows")
    args = parser.parse_args()
    base = _base(args.base)
    print(f"load before: {Path('/proc/loadavg').read_text().strip()}")
    rows = [_measure(int(p), args.new, args.reps, args.data, base) for p in args.pools.split(",")]
    print(f"load after: {Path('/proc/loadavg').read_text().strip()}")
    print("| pool | new | before s | after s | before bytes written | after bytes written |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['pool']:,} | {r['new']:,} | {r['before_s']:.3f} | {r['after_s']:.3f} "
            f"| {r['before_written']:,} | {r['after_written']:,} |"
        )
    if len(rows) > 1:
        for name in ("before", "after"):
            ratio = rows[-1][f"{name}_s"] / rows[0][f"{name}_s"]
            print(f"{name}: {rows[-1]['pool']:,} over {rows[0]['pool']:,} = {ratio:.2f}x")


if __name__ == "__main__":
    main()
