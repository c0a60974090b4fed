"""What the drift report costs as the pool grows and as what is new grows, before and
after a change, in one process (issue 90 item 3).

    python benchmarks/drift_growth.py --before f277212d           # 10k+1k, 100k+1k, 100k+25k
    python benchmarks/drift_growth.py --sizes 2000:200 --repeats 1 --before f277212d

For each ``RECORDS:NEW`` of ``--sizes``: a generated pool of RECORDS records (seed
``--seed``), read as a run reads it, and the fingerprint of a served model that read
all but NEW of them (the last NEW in a seeded order). ``drift_report`` is timed on it
with the numbers handed in (as the run's task hands them: ``given``) and built by the
report (``built``); with ``--before REF``, drift.py as it was at that git commit is
loaded beside the tree's and timed on the same pool, interleaved, repeat by repeat, and
its report compared with the tree's (``same_report``). The median of ``--repeats`` is
kept. One JSON line per size to stdout; ``--out FILE`` also writes them there. Timings
on a loaded machine are only a comparison within the run: say the load.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import record_id_hash
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.world_model.features import numeric_rows

ROOT = Path(__file__).resolve().parents[1]
DRIFT = "infrastructure/genesis_fp16_infrastructure/recipes/retrain/drift.py"


def pool(records: int, new: int, seed: int) -> tuple[PoolColumns, DataFingerprint]:
    """A generated pool's columns, and the fingerprint of a served model that read all
    but its last ``new`` records (in a seeded order)."""
    trajectories = generate_pool(records, seed=seed)
    ids = sorted(trajectories["trajectories"], key=lambda k: record_id_hash(f"{seed}:{k}"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pool.json"
        path.write_text(json.dumps(trajectories))
        columns = read_trajectories(path, keep_text=False).columns
    served = set(ids[: records - new])
    held = np.array([columns.ids[r] in served for r in columns.labelled.tolist()], dtype=bool)
    hashes = torch.from_numpy(columns.id_hash[columns.labelled[held]])
    order = torch.argsort(hashes, stable=True)
    keys = torch.from_numpy(columns.key[held])
    return columns, DataFingerprint(int(held.sum()), "", hashes[order], keys[order])


def module_at(ref: str) -> ModuleType:
    """drift.py as it was at git commit ``ref``, loaded as a module of its own."""
    text = subprocess.run(
        ["git", "show", f"{ref}:{DRIFT}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    folder = Path(tempfile.mkdtemp())
    path = folder / f"drift_{ref}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"drift_{ref}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _seconds(
    module: ModuleType, columns: PoolColumns, served: DataFingerprint, numeric: Any
) -> float:
    start = time.perf_counter()
    module.drift_report(columns, served, 0, numeric)
    return time.perf_counter() - start


def measure(
    records: int, new: int, repeats: int, seed: int, before: dict[str, ModuleType]
) -> dict[str, Any]:
    """One size's row: each version's median seconds with the numbers given and built,
    and whether the earlier versions' reports are the tree's."""
    columns, served = pool(records, new, seed)
    numeric = numeric_rows(columns, columns.labelled)
    versions = {"tree": drift, **before}
    times: dict[str, list[float]] = {f"{v}_{m}": [] for v in versions for m in ("given", "built")}
    for module in versions.values():  # torch's first-call set-up aside
        module.drift_report(columns, served, 0, numeric)
    for _ in range(repeats):  # interleaved: a load that comes and goes hits each alike
        for name, module in versions.items():
            times[f"{name}_given"].append(_seconds(module, columns, served, numeric))
            times[f"{name}_built"].append(_seconds(module, columns, served, None))
    report = drift.drift_report(columns, served, 0, numeric)
    assert report is not None, (records, new)
    row: dict[str, Any] = {
        "records": records,
        "new": new,
        "new_records": report.new_records,
        "sampled": report.sampled,
        "flagged": list(report.flagged),
        "threads": torch.get_num_threads(),
    }
    for key, seconds in times.items():
        row[f"{key}_seconds"] = round(statistics.median(seconds), 4)
    for name, module in before.items():
        theirs = module.drift_report(columns, served, 0, numeric)
        row[f"same_report_as_{name}"] = theirs is not None and theirs.to_json() == report.to_json()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000:1000,100000:1000,100000:25000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", action="append", default=[], help="a git commit")
    parser.add_argument("--out", type=Path, default=None, help="a JSON-lines file")
    args = parser.parse_args(argv)
    sizes = []
    for size in args.sizes.split(","):
        records, _, new = size.partition(":")
        if not (records.isdigit() and new.isdigit() and 0 < int(new) < int(records)):
            parser.error(f"--sizes takes RECORDS:NEW with 0 < NEW < RECORDS, got {size!r}")
        sizes.append((int(records), int(new)))
    before = {ref: module_at(ref) for ref in args.before}
    rows = [measure(r, n, args.repeats, args.seed, before) for r, n in sizes]
    lines = "".join(json.dumps(row) + "\n" for row in rows)
    sys.stdout.write(lines)
    if args.out is not None:
        args.out.write_text(lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
