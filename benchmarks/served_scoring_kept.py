"""The served model's scoring in a resident run process, with its kept logits and without,
side by side in one process (issue 90, item 4: ``recipes/retrain/kept_outputs.py``).

A first se_darwin model is trained and judged on ``--pool`` minus ``--new`` records in
this process, as a resident run process serves a daemon's runs (the request's
``keep_in_memory_bytes``: its record cache, its kept rows and what its gate kept of the
candidate's logits). Then ``--new`` records arrive, and the judged run's first step, the
served model scored (``judging.served.Served``: the records held out and those it did not
know, listed and scored), is timed ``--repeats`` times each way, alternating:

* **kept**: as the next run does it, from what the first run left in memory (restored
  before each repeat: the new records are scored by the forward each time);
* **recomputed**: every record asked encoded and run through the model, as main did
  before this module (``scoring._logits`` replaced by that path).

Each from a fresh plan (the pool listed again, from the record cache's memory). The
listing (the run's ``read``) is reported apart from the scoring (its ``live``). The losses
of the two ways are compared record by record.

    python benchmarks/served_scoring_kept.py --pool 100000 --new 1000 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.agent_folder.pointer import checkpoint_of, read_pointer
from genesis_fp16_infrastructure.api import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.judging.run import run_plugin
from genesis_fp16_infrastructure.judging.served import Served
from genesis_fp16_infrastructure.recipes.retrain import evaluated, kept_outputs, scoring

KEEP = 1024 * 2**20  # the daemon's default GENESIS_FP16_RUN_RESIDENT_KEEP_MIB


def _arrive(source: Path, data: Path) -> None:
    target = data / source.name
    shutil.copy(source, target)
    past = time.time() - 120  # older than the record cache's racy window
    os.utime(target, (past, past))


def _request(work: Path, data: Path) -> TrainRequest:
    ck = work / "state" / "ck"
    pointer = read_pointer(ck) if ck.exists() else None
    return TrainRequest(
        agent="se_darwin",
        precision="fp32",  # type: ignore[arg-type]
        precision_reason="benchmark",
        state_dir=work / "state",
        checkpoint_dir=ck,
        data_path=data,
        steps=200,
        seed=3,
        keep_in_memory_bytes=KEEP,
        snapshot=AgentSnapshot(None, pointer=pointer, data=DataCheck(scan_files(data)[0])),
    )


def later_runs(
    pool: int, new: int, cache: Path, repeats: int, new_name: str = "pool-3099.json"
) -> Iterator[Callable[[], Any]]:
    """se_darwin's later judged run at ``pool`` records, ``new`` of them new (both files
    written once into ``cache``; ``new_name`` sorts before the old file's name by default,
    after it as ``zz-pool-3099.json``): the first model served, the new file arrived, then
    ``repeats`` times the state folder and this process's kept memory put back as the first
    run left them, and a call that runs the later run (its ``TrainResult``)."""
    torch.set_num_threads(1)
    cache.mkdir(parents=True, exist_ok=True)
    for name, count, seed in (("pool-99.json", pool - new, 99), (new_name, new, 3099)):
        if not (cache / name).exists():
            write_pool(cache / f"g{seed}", count, seed).rename(cache / name)
    with tempfile.TemporaryDirectory() as tmp:
        work, data = Path(tmp), Path(tmp) / "data"
        data.mkdir()
        _arrive(cache / "pool-99.json", data)
        run_plugin(plugin, _request(work, data))  # the first model, served
        _arrive(cache / new_name, data)
        shutil.copytree(work / "state", work / "first")
        memory = kept_in_memory.current()
        assert memory is not None
        saved = dict(memory._entries)
        for _ in range(repeats):
            shutil.rmtree(work / "state")
            shutil.copytree(work / "first", work / "state")
            memory._entries.clear()  # what the first run left, as it left it
            memory._entries.update(saved)
            yield lambda: run_plugin(plugin, _request(work, data))


def _scored(work: Path, data: Path) -> tuple[float, float, Any]:
    """One Served: its seconds outside the listing, the listing's, and its losses."""
    request = _request(work, data)
    started = time.perf_counter()
    served = Served(plugin, request)
    seconds = time.perf_counter() - started
    return seconds - served.read_seconds, served.read_seconds, served.losses


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        first = write_pool(work / "g1", args.pool - args.new, 99)
        new = write_pool(work / "g2", args.new, 3099)
        data = work / "data"
        data.mkdir()
        _arrive(first.rename(work / "pool-99.json"), data)
        run_plugin(plugin, _request(work, data))  # the first model, its logits kept
        _arrive(new.rename(work / "pool-3099.json"), data)
        pointer = read_pointer(work / "state" / "ck")
        assert pointer is not None
        served = checkpoint_of(work / "state" / "ck", pointer)
        digest = evaluated.checkpoint_digest(served)
        entry = kept_outputs.kept_logits(KEEP, digest)
        assert entry is not None, "the first run's gate kept nothing"
        memory = kept_in_memory.current()
        assert memory is not None
        real = scoring._logits

        def recomputed(request: Any, checkpoint: Any, predictor: Any, pool: Any, asked: Any) -> Any:
            """main's scoring of the served model: every record asked, encoded and run."""
            numeric = pool.numeric_of(asked)
            return scoring._forward(predictor, pool.data.columns, asked, numeric)

        times: dict[str, list[float]] = {"kept": [], "recomputed": []}
        listing: list[float] = []
        losses: dict[str, Any] = {}
        for k in range(args.repeats):
            for mode in ("kept", "recomputed") if k % 2 == 0 else ("recomputed", "kept"):
                size = kept_in_memory.estimate_bytes(entry)
                memory.put((kept_outputs.KIND, digest), digest, entry, size, "benchmark")
                scoring._logits = real if mode == "kept" else recomputed
                try:
                    seconds, read, losses[mode] = _scored(work, data)
                finally:
                    scoring._logits = real
                times[mode].append(seconds)
                listing.append(read)
        kept, again = losses["kept"], losses["recomputed"]
        assert kept.ids == again.ids
        gap = max(
            float(np.max(np.abs(np.asarray(kept.column(m)) - np.asarray(again.column(m)))))
            for m in kept.metrics()
        )
        lines = _report(args, argv, load, times, listing, len(kept.ids), len(entry.first), gap)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)


def _report(
    args: Any,
    argv: list[str] | None,
    load: tuple[float, float, float],
    times: dict[str, list[float]],
    listing: list[float],
    scored: int,
    kept: int,
    gap: float,
) -> list[str]:
    command = " ".join(["python benchmarks/served_scoring_kept.py", *(argv or sys.argv[1:])])
    lines = [
        "# The served model's scoring, its logits kept or recomputed (issue 90, item 4)",
        "",
        f"`{command}`; {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, one torch thread. Load average before: "
        f"{' '.join(f'{x:.2f}' for x in load)}; after: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
        f"Pool {args.pool:,} records, {args.new:,} new; the served model scored on "
        f"{scored:,} labelled records (held out, or new to it), {kept:,} of their logits "
        "kept by the first run. Seconds of `Served(...)` less its listing (the run's `live` "
        f"part of it); the listing (the run's `read`): median {statistics.median(listing):.3f} s.",
        "",
        "| way | min | median | max | repeats |",
        "| --- | --- | --- | --- | --- |",
    ]
    for mode, seconds in times.items():
        lines.append(
            f"| {mode} | {min(seconds):.3f} | {statistics.median(seconds):.3f} | "
            f"{max(seconds):.3f} | {len(seconds)} |"
        )
    lines += ["", f"Largest difference of a record's loss between the two ways: {gap:.3g}."]
    return lines


if __name__ == "__main__":
    main()
