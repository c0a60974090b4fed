"""A daemon's later run's pieces around training, in one process as a resident run process
has them (issue 90): the pool grown by the new file's records (``pool_extend.extended``),
its fingerprint grown (``extended_fingerprint``), the scorings' two views of its numeric
rows (``KeptNumeric.view``), the task (``WorldModelTask``: encode, split, kept encoded
rows) and the drift report. Thread CPU milliseconds (median, min, max) of ``--repeats``.

``--data`` is a folder ``run_anatomy.py --work`` leaves (``data-<pool>-<new>``). Each
repeat empties this process's store and runs a first task on the old pool (its rows,
reference and encoder kept, as the daemon's first run keeps them), then times the later
run's pieces. Run it under each tree's ``PYTHONPATH`` (it passes the numeric rows' stamps
to drift where the tree has ``KeptNumeric.stamps_of``), one after the other; ``--out``
writes the last drift report and digests of the encoded arrays (the training, validation
and held-out parts' features, the numeric rows), to compare the trees' byte for byte::

    PYTHONPATH=<tree>:<tree>/infrastructure:<tree>/agents \\
        python benchmarks/view38_later_pieces.py --data WORK/data-100000-1000 --repeats 5
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import json
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data.fingerprint import (
    DataFingerprint,
    compare,
    extended_fingerprint,
    fingerprint_of,
)
from genesis_fp16_infrastructure.data.pool_columns import roomy
from genesis_fp16_infrastructure.data.pool_extend import extended
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink
from genesis_fp16_infrastructure.data.readers import ReadResult, _file_records, read_trajectories
from genesis_fp16_infrastructure.kept_in_memory import process_memory
from genesis_fp16_infrastructure.recipes.retrain.drift import drift_report, keep_reference
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric

BUDGET = 1024 * 2**20
PIECES = ("grow", "fingerprint", "view1", "view2", "task", "drift")


def _stamps(kept: Any, numeric: torch.Tensor | None) -> list[Any]:
    """The rows' stamps as the run passes them, where the tree has them (an argument)."""
    stamp = kept.stamps_of(numeric) if hasattr(kept, "stamps_of") else None
    return [] if stamp is None else [stamp]


class _Timer:
    """Each piece's thread CPU ms, and its profile with ``--profile``."""

    def __init__(self, profile: bool) -> None:
        self.spent: dict[str, list[float]] = {k: [] for k in PIECES}
        self.profiles: dict[str, list[cProfile.Profile]] = {}
        self.profile = profile

    def __call__(self, name: str, piece: Callable[[], Any]) -> Any:
        profile = cProfile.Profile() if self.profile else None
        start = time.thread_time()
        if profile is not None:
            profile.enable()
        out = piece()
        if profile is not None:
            profile.disable()
            self.profiles.setdefault(name, []).append(profile)
        self.spent[name].append((time.thread_time() - start) * 1e3)
        return out


def one_repeat(old: Any, block: Any, folder: Path, timed: _Timer) -> tuple[str, bool]:
    """The first run on ``old`` (kept), then the later run's pieces timed; its drift
    report (JSON) and whether the drift had stamps."""
    kept_in_memory._PROCESS.clear()
    memory = process_memory(BUDGET)
    data, cache = folder / "data", folder / "cache"
    cache.mkdir()
    options = TaskOptions.from_mapping({})
    base = roomy(old)
    first_fp = fingerprint_of(base)
    kept = KeptNumeric(cache, data, memory)
    first = WorldModelTask(ReadResult(base, kept_fingerprint=first_fp), options, 3, kept=kept,
                           seen=first_fp)  # fmt: skip
    numeric = first.take_numeric_rows()
    keep_reference(base, numeric, BUDGET, *_stamps(kept, numeric))
    served = first.extra_state()
    del first, numeric
    gc.collect()
    grown = timed("grow", lambda: extended(base, [block]))[0]
    seen = timed("fingerprint", lambda: extended_fingerprint(first_fp, grown, len(base)))
    timed("view1", lambda: KeptNumeric(cache, data, memory).view(grown))
    timed("view2", lambda: KeptNumeric(cache, data, memory).view(grown))
    change = compare(served["data"], seen)
    kept = KeptNumeric(cache, data, memory)
    read = ReadResult(grown, kept_fingerprint=seen)
    task = timed("task", lambda: WorldModelTask(read, options, 3, kept=kept, seen=seen,
                                                served=served, change=change))  # fmt: skip
    encoded = _digest(task.train_data.batch().x, task.validation_data.x, task.eval_data.x)
    numeric = task.take_numeric_rows()
    assert numeric is not None
    encoded["numeric"] = _digest(numeric)["0"]
    stamps = _stamps(kept, numeric)
    before = DataFingerprint.from_state(served["data"])
    rows = numeric
    report = timed("drift", lambda: drift_report(grown, before, 0, rows, BUDGET, *stamps))
    del task
    gc.collect()
    return json.dumps({"drift": report.to_json(), "encoded": encoded}, sort_keys=True), bool(stamps)


def _digest(*tensors: torch.Tensor) -> dict[str, str]:
    """Each tensor's bytes hashed (the encoded arrays, compared between trees)."""
    return {
        str(k): hashlib.blake2b(t.contiguous().numpy().tobytes(), digest_size=16).hexdigest()
        for k, t in enumerate(tensors)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="run_anatomy's data-P-N")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", help="write each piece's profile to PROFILE-piece.prof")
    parser.add_argument("--out", type=Path, help="write the last drift report here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    old = read_trajectories(args.data / "old" / "data", keep_text=False).columns
    old.id_rank  # noqa: B018 (ranked by the first read, as the daemon's first run has it)
    new_file = args.data / "new" / "data" / "pool-3099.json"
    block = _file_records(new_file, QuarantineSink(None), None, False)
    timed = _Timer(args.profile is not None)
    reports, stamped = [], False
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            folder = Path(tmp) / str(k)
            folder.mkdir()
            report, stamped = one_repeat(old, block, folder, timed)
            reports.append(report)
    out: dict[str, Any] = {
        k: [round(statistics.median(v), 3), round(min(v), 3), round(max(v), 3)]
        for k, v in timed.spent.items()
    }
    out |= {"records": len(old) + len(block.trajectory_id), "stamped": stamped,
            "reports_same": len(set(reports)) == 1}  # fmt: skip
    print(json.dumps(out))
    if args.out is not None:
        args.out.write_text(reports[0])
    for name, profiles in timed.profiles.items():
        stats = pstats.Stats(profiles[0])
        for profile in profiles[1:]:
            stats.add(profile)
        stats.dump_stats(f"{args.profile}-{name}.prof")


if __name__ == "__main__":
    main()
