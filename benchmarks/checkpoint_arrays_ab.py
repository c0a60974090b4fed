"""What keeping a checkpoint's per-record arrays in a side file saves, paired in one
process (issue 90): every place a judged run writes, hashes, copies or loads a checkpoint,
timed on the same state both ways, alternating, medians of CPU and wall milliseconds.

Each ``--checkpoints`` file is a real se_darwin checkpoint written before side files (its
arrays inline: the trained ids and the pool's fingerprint). The **inline** way saves that
state as it is, which is what code before side files wrote (the save, load, copy and
hash code paths for such a state are the code's before it, bar a check for the
``per_record`` key); the **side** way saves the same state with ``extra["per_record"]``
naming its arrays (what ``recipes/retrain/task.py`` now writes). In a resident process's
memory store (1 GiB, as the daemon's run process has), per repeat and way, in a fresh
folder:

* ``save``: ``CheckpointManager.save`` (pickle, SHA-256, fsynced pair, summary, the kept
  copy of the state; the side way writes its side file: the first save of a run);
* ``save again``: a second save of the same arrays at another step (the side file is
  not written again);
* ``trained_ids``: ``judging.trained_ids.trained_ids`` of the checkpoint in a fresh
  ``reusing_loads`` block (load with its SHA-256, the ids read), then
  ``score_on_copy`` of it with a plugin that does nothing (the copy written from the
  bytes that load read, hashed after): the judged run's order;
* ``load``: ``load_checkpoint`` outside a block (a read, a SHA-256, an unpickle);
* ``copy + read``: ``copy_checkpoint`` into a candidate folder, then the retrain run's
  read of that copy with its arrays (``read_checkpoint`` and ``with_arrays``).

    python benchmarks/checkpoint_arrays_ab.py --checkpoints A.pt,B.pt --repeats 7
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
from genesis_fp16_infrastructure.judging.scoring_copy import copy_checkpoint, score_on_copy
from genesis_fp16_infrastructure.judging.trained_ids import trained_ids
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint_arrays import PER_RECORD, PREFIX, with_arrays
from genesis_fp16_infrastructure.training.checkpoint_load import (
    load_checkpoint,
    read_checkpoint,
    reusing_loads,
)

ARRAYS = ["trained_ids", "data/ids", "data/labelled"]
STEPS = ("save", "save again", "trained_ids", "score_on_copy", "load", "copy + read")


def _timed(work: Callable[[], Any]) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    value = work()
    return (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000, value


def one_way(state: dict[str, Any], folder: Path) -> tuple[dict[str, tuple[float, float]], Any]:
    """Each step's CPU and wall ms for ``state`` saved in ``folder``; the ids named."""
    out: dict[str, tuple[float, float]] = {}
    found: dict[str, Any] = {}

    def timed(step: str, work: Callable[[], Any]) -> None:
        cpu, wall, found[step] = _timed(work)
        out[step] = (cpu, wall)

    manager = CheckpointManager(folder / "a", keep=3)
    timed("save", lambda: manager.save(state))
    path = found["save"]
    timed("save again", lambda: manager.save({**state, keys.STEP: 201}))
    scoring, candidate = folder / "scoring", folder / "candidate"
    scoring.mkdir()
    candidate.mkdir()
    with reusing_loads():  # the judged run's order: the records it names, then its copy
        timed("trained_ids", lambda: trained_ids(path))
        timed("score_on_copy", lambda: score_on_copy(lambda p: None, path, scoring, "bench"))
    timed("load", lambda: load_checkpoint(path))

    def copy_and_read() -> Any:
        copy_checkpoint(path, candidate)
        copied = candidate / path.name
        return with_arrays(read_checkpoint(copied).state, copied)[keys.EXTRA]["data"]["records"]

    timed("copy + read", copy_and_read)
    return out, found["trained_ids"]


def sizes(state: dict[str, Any], folder: Path) -> tuple[int, int]:
    """The checkpoint file's bytes and its side files'."""
    path = CheckpointManager(folder).save(state)
    side = sum(p.stat().st_size for p in folder.glob(f"{PREFIX}*"))
    return path.stat().st_size, side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", required=True, help="comma-separated .pt files")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    kept_in_memory.process_memory(1024 * 2**20)
    print(f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at start")
    for checkpoint in args.checkpoints.split(","):
        base = torch.load(checkpoint, map_location="cpu", weights_only=True)
        inline = {**base, keys.EXTRA: {k: v for k, v in base[keys.EXTRA].items()}}
        inline[keys.EXTRA].pop(PER_RECORD, None)
        side = {**inline, keys.EXTRA: {**inline[keys.EXTRA], PER_RECORD: ARRAYS}}
        records = int(inline[keys.EXTRA]["data"]["records"])
        ways = {"inline": inline, "side": side}
        times: dict[str, dict[str, list[tuple[float, float]]]] = {w: {} for w in ways}
        named: dict[str, Any] = {}
        with tempfile.TemporaryDirectory() as temp:
            for way, state in ways.items():
                checkpoint_bytes, side_bytes = sizes(state, Path(temp) / f"size-{way}")
                print(f"{records} records, {way}: checkpoint {checkpoint_bytes:,} bytes, "
                      f"side files {side_bytes:,} bytes")  # fmt: skip
            for repeat in range(args.repeats):
                order = list(ways) if repeat % 2 == 0 else list(reversed(ways))
                for way in order:
                    folder = Path(temp) / f"{way}-{repeat}"
                    folder.mkdir()
                    out, named[way] = one_way(ways[way], folder)
                    for step, value in out.items():
                        times[way].setdefault(step, []).append(value)
        assert named["inline"] is not None and (named["inline"] == named["side"]).all()
        print(f"| {records} records | inline CPU ms | side CPU ms | inline wall | side wall |")
        print("| --- | --- | --- | --- | --- |")
        totals = {w: [0.0, 0.0] for w in ways}
        for step in STEPS:
            cells = []
            for i in (0, 1):
                for way in ways:
                    median = statistics.median(t[i] for t in times[way][step])
                    cells.append(median)
                    totals[way][i] += median
            print(f"| {step} | {cells[0]:.2f} | {cells[1]:.2f} | {cells[2]:.2f} | {cells[3]:.2f} |")
        print(
            f"| all | {totals['inline'][0]:.2f} | {totals['side'][0]:.2f} | "
            f"{totals['inline'][1]:.2f} | {totals['side'][1]:.2f} |"
        )
    print(f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at end")


if __name__ == "__main__":
    main()
