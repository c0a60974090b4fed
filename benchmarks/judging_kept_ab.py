"""What a resident process's kept drift reference saves, paired in one process (issue 90
item 3) and kept judged ids save (item 4, ``split.judged_ids``): each way timed on the
same pool, alternating, with the work each did counted (references sorted, ids named).

For each ``--pools`` size P: a served model's pool of P - ``--new`` records (seed 99) and
``--new`` more (seed 3099) in a file sorting after, read as a run reads them. Then,
``--repeats`` times each way:

* **drift**: ``drift_report`` with nothing kept (``keep_in_memory_bytes`` 0), and with the
  reference a previous run over the same served model kept (a run after a rejected
  candidate: a promoted one is another served model, whose reference is measured);
* **judged ids**: the pool's judged ids named from nothing, and with the previous run's
  (the pool less its new file) kept: the new records named alone.

The reports and ids of both ways are compared, field for field.

    python benchmarks/judging_kept_ab.py --pools 10000,100000 --new 1000 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain import drift, split
from genesis_fp16_infrastructure.world_model.features import numeric_rows

BUDGET = 1024 * 2**20


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    out = call()
    return time.perf_counter() - started, out


def _case(pool: int, new: int, repeats: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        write_pool(Path(tmp) / "g1", pool - new, 99).rename(data / "pool-1.json")
        old = read_trajectories(data, keep_text=False).columns
        write_pool(Path(tmp) / "g2", new, 3099).rename(data / "pool-2.json")
        columns = read_trajectories(data, keep_text=False).columns
    served = fingerprint_of(old)
    numeric = numeric_rows(columns, columns.labelled)
    kept_in_memory._PROCESS.clear()
    drift.drift_report(columns, served, 0, numeric, BUDGET)  # the previous run's reference
    split.judged_ids(old, BUDGET)  # the previous run's pool's ids
    memory = kept_in_memory.current()
    assert memory is not None
    saved = dict(memory._entries)
    ways: dict[str, dict[str, Callable[[], Any]]] = {
        "drift": {
            "from nothing": lambda: drift.drift_report(columns, served, 0, numeric, 0),
            "kept": lambda: drift.drift_report(columns, served, 0, numeric, BUDGET),
        },
        "judged ids": {
            "from nothing": lambda: split.judged_ids(columns, 0),
            "kept": lambda: split.judged_ids(columns, BUDGET),
        },
    }
    lines = []
    for part, both in ways.items():
        seconds: dict[str, list[float]] = {w: [] for w in both}
        outs: dict[str, Any] = {}
        counts: dict[str, str] = {}
        for k in range(repeats):
            for way in both if k % 2 == 0 else reversed(list(both)):
                memory._entries.clear()  # what the previous run left, as it left it
                memory._entries.update(saved)
                drift.KEPT.clear()
                split.JUDGED.clear()
                took, outs[way] = _timed(both[way])
                seconds[way].append(took)
                counts[way] = (
                    f"{drift.KEPT['measured'] + drift.KEPT['stale']} reference(s) sorted"
                    if part == "drift"
                    else f"{split.JUDGED['named']:,} of {len(outs[way]):,} ids named"
                )
        a, b = outs["from nothing"], outs["kept"]
        same = a.to_json() == b.to_json() if part == "drift" else a == b
        for way, s in seconds.items():
            lines.append(
                f"| {pool:,} | {new:,} | {part} | {way} | {statistics.median(s):.4f} | "
                f"{min(s):.4f} | {counts[way]} | {'same' if same else 'DIFFERENT'} |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = []
    for pool in (int(p) for p in args.pools.split(",")):
        rows += _case(pool, args.new, args.repeats)
    after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = "\n".join(
        [
            "# The kept drift reference and judged ids, paired in one process (issue 90)",
            "",
            f"`python benchmarks/judging_kept_ab.py --pools {args.pools} --new {args.new} "
            f"--repeats {args.repeats}`; {os.cpu_count()} cores, torch {torch.__version__}, "
            f"one torch thread. Load average {load} before, {after} after: a shared host, "
            "the seconds are paired, not absolute.",
            "",
            "| pool | new | part | way | median s | min s | work | result |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
        ]
    )
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
