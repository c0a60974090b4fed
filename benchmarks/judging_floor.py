"""Judging against its floor in a daemon's later run (issue 90: "drift, live and gate
together <= 3x one forward pass of the served model over the records they score").

    python benchmarks/judging_floor.py                       # 10,000 and 100,000, 1,000 new
    python benchmarks/judging_floor.py --pools 200 --new 5 --steps 3 --repeats 1 --served 1

For each pool, a real ``serve`` trains a first model on the old records, then, after the
new ones arrive, the measured run (``run``, the last its resident run process serves;
with ``--served 1`` the second, as ``run_anatomy.py --modes later --new-after`` makes
it). With ``--served 2`` (the default), a second run comes between them, after a middle
batch of as many records as are new: the model it serves (when its gate promotes it) has
a predecessor, so the measured run's live watch scores the new records with that one
too, runs its test and its A/A self-test and writes its figures, as every later run of a
daemon whose agent has promoted twice does. ``--served 1`` is the earlier measure, where
the watch has no predecessor and does none of that. Whether the watch ran is in each row
(``watched``). The measured run's drift, live and gate seconds come from its own
finished line. Then, in this process, one forward pass of the model that run judged
against (the one served before it) over the records the live watch and the gate score:
every labelled record of the measured run's pool that is in the judged run's held-out
fifth (``contract.split.HELD_OUT``) or new. Their inputs are encoded beforehand; the
forward is the product's own (``forward_chunked``), with one torch thread, as the
daemon's runs here have (``OMP_NUM_THREADS=1``), timed ``--repeats`` times; the median
is kept. The same host, another process: the ratio compares the daemon's seconds with
this forward's, not two figures of one process. Each row and the ratio go to stdout as
JSON lines; ``--out`` writes them as ``.json`` and ``.md``. Timings on a loaded machine
mean little: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import run_anatomy as anatomy
import torch

from genesis_fp16_infrastructure.contract.split import HELD_OUT, id_hashes
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint
from genesis_fp16_infrastructure.world_model.features import Categorical, numeric_rows
from genesis_fp16_infrastructure.world_model.predict import (
    WorldModelPredictor,
    forward_chunked,
)

BOUND = 3.0  # the ceiling: judging over one served forward
JUDGING = ("drift", "live", "gate")
AGENT = "se_darwin"


def _made(root: Path, pool: int, new: int, served: int) -> Path:
    """``run_anatomy.write_data``'s data (``middle`` with two models served before the
    measured run), unless it is there already (then it is reused, never changed)."""
    made = root / (f"data-{pool}-{new}" + ("-middle" if served == 2 else ""))
    if not (made / "new" / "data").is_dir():
        anatomy.write_data(AGENT, root, pool, new, 1, middle=served == 2)
    return made


def _judged_against(runs: list[dict[str, Any]]) -> Path:
    """The checkpoint the measured run (the last) judged against: the last earlier run's
    whose gate promoted it, else the first run's."""
    for run in reversed(runs[:-1]):
        if (run.get("gate") or {}).get("outcome") == "promoted" and run.get("checkpoint"):
            return Path(run["checkpoint"])
    return Path(runs[0]["checkpoint"])


def scored_rows(folder: Path, made: Path) -> tuple[Any, np.ndarray]:
    """The measured run's pool (``folder/data``) and the rows of its labelled records that
    the live watch and the gate score: held out by the judged run's split, or new."""
    columns = read_trajectories(folder / "data", keep_text=False).columns
    new_ids = set(read_trajectories(made / "new" / "data", keep_text=False).columns.ids)
    labelled = columns.labelled
    ids = [columns.ids[r] for r in labelled.tolist()]
    held = HELD_OUT.of_hashes(id_hashes(ids))
    new = np.fromiter((i in new_ids for i in ids), dtype=bool, count=len(ids))
    return columns, labelled[held | new]


def forward_seconds(checkpoint: Path, columns: Any, rows: np.ndarray, repeats: int) -> list[float]:
    """One forward pass of ``checkpoint``'s served weights over ``rows``, timed
    ``repeats`` times with one torch thread (inputs encoded before the first)."""
    predictor = WorldModelPredictor.of_state(load_checkpoint(checkpoint))
    x = predictor.encoder.encode_parts(
        Categorical.of_rows(columns, rows), numeric_rows(columns, rows)
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = []
        with torch.no_grad():
            forward_chunked(predictor.model, x)  # warm-up: the allocator's first blocks
            for _ in range(repeats):
                start = time.perf_counter()
                forward_chunked(predictor.model, x).success_logit.sum().item()
                times.append(time.perf_counter() - start)
        return times
    finally:
        torch.set_num_threads(threads)


def measure(
    pool: int, new: int, steps: int, repeats: int, root: Path, served: int = 2
) -> dict[str, Any]:
    """One row: the measured run's judging seconds and the forward's (module docstring)."""
    made = _made(root, pool, new, served)
    folder = root / f"floor-{pool}-{new}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    env = anatomy._tree_env(AGENT, folder, anatomy.TREE, "cpu", steps)
    mode = "watched" if served == 2 else "later"
    runs, load, _ = anatomy._runs_then_new(AGENT, made, folder, env, mode, after_old=True)
    finished = runs[-1]
    phases = finished.get("phases") or {}
    missing = [name for name in JUDGING if name not in phases]
    if missing or not runs[0].get("checkpoint"):
        raise SystemExit(
            f"judging_floor: the measured run at {pool:,} records has no "
            f"{', '.join(missing) or 'first checkpoint'} (outcome {finished.get('outcome')})"
        )
    columns, rows = scored_rows(folder, made)
    times = forward_seconds(_judged_against(runs), columns, rows, repeats)
    judging = sum(phases[name] for name in JUDGING)
    forward = statistics.median(times)
    return {
        "pool": pool,
        "new": new,
        "steps": steps,
        "outcome": finished.get("outcome"),
        "served_before": served,
        "gates": [(run.get("gate") or {}).get("outcome") for run in runs],
        "watched": anatomy.watched(folder, AGENT),
        "loadavg_before": load,
        "judging": {name: phases[name] for name in JUDGING},
        "judging_seconds": judging,
        "scored_records": len(rows),
        "forward_seconds": forward,
        "forward_times": times,
        "ratio": judging / forward,
        "within_3": judging / forward <= BOUND,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Judging against one served forward (issue 90)",
        "",
        f"`{result['command']}`",
        "",
        f"Host: {result['host']}; torch {result['torch']}; load before "
        f"{result['loadavg_before']}, after {result['loadavg_after']}. {result['note']}".rstrip(),
        "",
        "Seconds. drift, live, gate: the measured run's finished line; forward: one pass of "
        "the served model over the records they score, in the benchmark's process (one "
        "thread, median of the repeats).",
        "",
        "| pool | new | served before | watched | drift | live | gate | judging "
        "| records scored | forward | **ratio** | ≤ 3 | load before |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        j = row["judging"]
        lines.append(
            f"| {row['pool']:,} | {row['new']:,} | {row['served_before']} | "
            f"{'yes' if row['watched'] else 'no'} | {j['drift']:.3f} | {j['live']:.3f} | "
            f"{j['gate']:.3f} | {row['judging_seconds']:.3f} | {row['scored_records']:,} | "
            f"{row['forward_seconds']:.4f} | **{row['ratio']:.2f}** | "
            f"{'yes' if row['within_3'] else 'no'} | {row['loadavg_before']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pools", default="10000,100000", help="pool sizes, comma-separated")
    parser.add_argument("--new", type=int, default=1000, help="new records in each")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--served", type=int, choices=(1, 2), default=2,
        help="models served before the measured run (2: its live watch has a predecessor)",
    )  # fmt: skip
    parser.add_argument("--work", type=Path, default=None, help="data kept here and reused")
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=None, help="results path, no suffix")
    args = parser.parse_args(argv)
    try:
        pools = [int(p) for p in args.pools.split(",")]
    except ValueError:
        parser.error(f"--pools: {args.pools!r} is not a list of counts")
    if any(not 0 < args.served * args.new < p for p in pools) or args.repeats < 1:
        parser.error(
            "--new (twice it with --served 2) must be below every pool and above 0, "
            "--repeats at least 1"
        )
    command = "python benchmarks/judging_floor.py " + shlex.join(argv or sys.argv[1:])
    result: dict[str, Any] = {
        "command": command.strip(),
        "host": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "torch": torch.__version__,
        "note": args.note,
        "loadavg_before": anatomy._load(),
        "rows": [],
    }
    root = args.work or Path(tempfile.mkdtemp(prefix="judging-floor-"))
    try:
        for pool in pools:
            row = measure(pool, args.new, args.steps, args.repeats, root, args.served)
            print(json.dumps(row), flush=True)
            result["rows"].append(row)
    finally:
        for pool in pools:
            shutil.rmtree(root / f"floor-{pool}-{args.new}", ignore_errors=True)
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)
    result["loadavg_after"] = anatomy._load()
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.out}.json").write_text(json.dumps(result, indent=1) + "\n")
        Path(f"{args.out}.md").write_text(markdown(result))
    return result


if __name__ == "__main__":
    main()
