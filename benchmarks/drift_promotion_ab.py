"""A promotion's next drift report, two trees' ``drift.py`` in one process, paired and
interleaved (issue 90 item 3): the first report of a newly served model, which a resident
process has kept nothing of but what earlier reports of the same pool kept (the order of
its record hashes).

For each ``--pools`` size P: a pool of P - 2 x ``--new`` records (seed 99), a served model
trained on it (its fingerprint), a report after ``--new`` more (seed 3099) with that model
served, kept; then the model trained on both is served (promoted) and the report after
``--new`` more again (seed 4099) is timed, each repeat from the store as the first report
left it. CPU milliseconds of this process (``time.process_time``); the two trees' reports
compared field for field.

    python benchmarks/drift_promotion_ab.py --pools 10000,100000 --new 1000 --before ../base
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from drift_ab_90 import BUDGET, _module, ab_arguments

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain import drift
from genesis_fp16_infrastructure.world_model.features import numeric_rows


def _reads(pool: int, new: int) -> list[Any]:
    """The three reads: the served model's pool, it grown once, then twice."""
    reads = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        for k, (count, seed) in enumerate(((pool - 2 * new, 99), (new, 3099), (new, 4099))):
            write_pool(Path(tmp) / f"g{k}", count, seed).rename(data / f"pool-{k}.json")
            reads.append(read_trajectories(data, keep_text=False).columns)
    return reads


def _row(pool: int, new: int, repeats: int, trees: dict[str, ModuleType]) -> str:
    first, grown, later = _reads(pool, new)
    served, promoted = fingerprint_of(first), fingerprint_of(grown)
    numeric = {id(c): numeric_rows(c, c.labelled) for c in (grown, later)}
    kept: dict[str, dict[Any, Any]] = {}
    for name, module in trees.items():  # the report before the promotion, kept
        kept_in_memory._PROCESS.clear()
        module.drift_report(grown, served, 0, numeric[id(grown)], BUDGET)
        kept[name] = dict(kept_in_memory._PROCESS[0]._entries)
    seconds: dict[str, list[float]] = {name: [] for name in trees}
    outs: dict[str, Any] = {}
    for k in range(repeats):
        for name in trees if k % 2 == 0 else reversed(list(trees)):
            memory = kept_in_memory._PROCESS[0]
            memory._entries.clear()
            memory._entries.update(kept[name])
            memory.used = sum(entry.size for entry in kept[name].values())
            started = time.process_time()
            outs[name] = trees[name].drift_report(later, promoted, 0, numeric[id(later)], BUDGET)
            seconds[name].append(time.process_time() - started)
    kept_in_memory._PROCESS.clear()
    same = len({json.dumps(o.to_json(), sort_keys=True) for o in outs.values()}) == 1
    shown = " | ".join(f"{statistics.median(s) * 1000:.1f}" for s in seconds.values())
    return f"| {pool:,} | {new:,} | {shown} | {'same' if same else 'DIFFERENT'} |"


def main(argv: list[str] | None = None) -> None:
    args = ab_arguments(__doc__.splitlines()[0]).parse_args(argv)
    torch.set_num_threads(1)
    trees = {"before": _module(args.before), "this tree": drift}
    load = Path("/proc/loadavg").read_text().strip()
    rows = [_row(int(p), args.new, args.repeats, trees) for p in args.pools.split(",")]
    print(f"load average {load} before, {Path('/proc/loadavg').read_text().strip()} after;")
    print("CPU ms, median\n\n| pool | new | before | this tree | reports |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
