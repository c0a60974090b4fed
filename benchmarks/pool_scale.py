"""What an SE-Darwin run costs as its pool grows: up to date, first ingest, +1% records.

    python benchmarks/pool_scale.py [--sizes 10000,100000] [--layouts json,jsonl] [--full 10000] \
        [--keep-pools DIR]

For each pool size and layout (``json``: one trajectory pool file, as ``genesis-fp16 data
generate`` writes it; ``jsonl``: the same records as ten daily ``.jsonl`` files, one record
a line), each row is one ``genesis-fp16 train se_darwin --json`` process, measured from
outside (wall seconds, user+system CPU seconds and peak RSS of the process, by ``wait4``):

* **first**: a fresh folder, fp32, the default budget capped at one epoch
  (``--option max_epochs=1``, so that 100k records finish here); its ``phases``
  say where the time went, and ``extra.peak_rss_mib`` the process's peak resident memory
  as each phase ended (where it first reaches the RSS column is where the memory went);
* **up_to_date**: the same command with ``--resume`` on the unchanged pool (the data
  manifest answers: no parse, no task);
* **check_in_daemon**: the same check as the daemon asks it before starting a child
  (``SEDarwinPlugin.check_data``), timed in this process where torch is already
  imported, as it is in the daemon: CPU seconds of the call alone;
* **plus_1pct**: 1% more records, the same command with ``--resume`` (the data changed:
  ``json``, a second pool file, parsed while the first comes from the record cache;
  ``jsonl``, lines appended to the last day's file, of which only the new lines are
  parsed; the model is trained afresh on the whole pool);
* **full** (``--full`` sizes only): a fresh default run (early stopping, no cap).

With ``--pool-read`` it measures instead, in this process, what a warm read costs when
the whole pool comes from its entry (``pool-<key>.gfpool``, ``data/pool_file.py``), and
what of that the entry's checks cost (issue 92): for each size, one ``json`` pool read
twice through the record cache (the second, every file from its own entry, writes the
pool entry), then ``--repeat`` times each of (the median):

* **warm read**: ``read_trajectories(keep_text=False)`` served from the pool entry;
* **entry read**: ``read_pool_file`` alone (open, size, header, columns mapped, every
  column's CRC-32, every code and row's range);
* **checksums**: the CRC-32 of every column of a mapped entry (its pages already read
  in: the CRC's own cost), and of the ``score`` column alone.

    python benchmarks/pool_scale.py --pool-read --sizes 100000 [--repeat 5]

Writes a Markdown table to stdout. The machine is named by the caller in the results file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.data import pool_file
from genesis_fp16_infrastructure.data.manifest import RACY_NS, scan_files
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.record_cache import POOL_VERSION, RecordCache
from genesis_fp16_infrastructure.data.synthetic import generate_pool

CLI = str(Path(sys.executable).with_name("genesis-fp16"))
CAP = ["--option", "max_epochs=1"]


def write_layout(folder: Path, count: int, layout: str, seed: int = 0) -> None:
    """``count`` generated records under ``folder``: one pool file, or ten .jsonl days.
    With a ``seed`` other than 0, the records are more of the pool: a second pool file,
    or lines appended to the last day's .jsonl (as a writer appends to today's file)."""
    folder.mkdir(parents=True, exist_ok=True)
    pool = generate_pool(count, seed=seed)
    if layout == "json":
        (folder / f"pool-{seed}.json").write_text(json.dumps(pool))
        return
    records = list(pool["trajectories"].values())
    if seed:
        with max(folder.glob("day-*.jsonl")).open("a") as handle:
            for record in records:
                handle.write(json.dumps(record) + "\n")
        return
    days = 10 if count >= 1000 else 1
    size = -(-len(records) // days)
    for day in range(days):
        with (folder / f"day-{seed}-{day:02d}.jsonl").open("w") as handle:
            for record in records[day * size : (day + 1) * size]:
                handle.write(json.dumps(record) + "\n")


# Started by a small launcher process, not by this one: Linux keeps the high-water RSS
# of the memory a process had before its exec, so a child forked from this process (which
# holds the generated pool and torch) would report this process's RSS as its own peak.
_LAUNCHER = """
import json, os, sys, time
start = time.perf_counter()
pid = os.spawnv(os.P_NOWAIT, sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump({"wall": time.perf_counter() - start, "code": os.waitstatus_to_exitcode(status),
               "cpu": usage.ru_utime + usage.ru_stime, "rss_kib": usage.ru_maxrss}, out)
"""


def run_train(data: Path, ckpt: Path, *extra: str) -> dict[str, Any]:
    """One ``train --json`` process: its result, wall, CPU and peak RSS."""
    command = [CLI, "train", "se_darwin", "--data", str(data), "--checkpoint-dir", str(ckpt)]
    command += ["--precision", "fp32", "--json", *extra]
    usage_file = ckpt.parent / "usage.json"
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, str(usage_file), *command],
        capture_output=True,
        check=True,
        env={**os.environ, "GENESIS_FP16_STATE_DIR": str(ckpt.parent / "state")},
    )
    out = done.stdout
    usage = json.loads(usage_file.read_text())
    if usage["code"] != 0:
        tail = done.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(command)} exited {usage['code']}:\n{tail}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    return {
        "wall": usage["wall"],
        "cpu": usage["cpu"],
        "rss_mb": usage["rss_kib"] / 1024,  # KiB on Linux
        "result": result,
    }


def check_in_daemon(data: Path, ckpt: Path) -> dict[str, Any]:
    request = TrainRequest(
        agent="se_darwin",
        precision="fp32",
        precision_reason="benchmark",
        state_dir=ckpt.parent,
        checkpoint_dir=ckpt,
        data_path=data,
        seed=0,
        resume=True,
        options={"max_epochs": 1},
    )
    cpu, start = time.process_time(), time.perf_counter()
    result = plugin.check_data(request).up_to_date
    return {
        "wall": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "rss_mb": float("nan"),
        "result": None if result is None else dict(result),
    }


def write_in_child(folder: Path, count: int, layout: str, seed: int = 0) -> None:
    """write_layout in a process of its own: a million generated records would otherwise
    stay in this process's memory beside the runs it measures."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from pool_scale import write_layout; "
        "from pathlib import Path; write_layout(Path(sys.argv[2]), int(sys.argv[3]), "
        "sys.argv[4], int(sys.argv[5]))"
    )
    here = str(Path(__file__).parent)
    args = [here, str(folder), str(count), layout, str(seed)]
    subprocess.run([sys.executable, "-c", code, *args], check=True)


def measure(
    count: int, layout: str, full: bool, root: Path, kept: Path | None = None
) -> list[dict[str, Any]]:
    data, ckpt = root / f"{layout}-{count}" / "pool", root / f"{layout}-{count}" / "ck"
    if kept is None:
        write_in_child(data, count, layout)
    else:  # generated once (minutes at 1M), copied for each measurement
        source = kept / f"{layout}-{count}"
        if not source.exists():
            write_in_child(source.with_suffix(".partial"), count, layout)
            source.with_suffix(".partial").rename(source)
        shutil.copytree(source, data)
    # Data written this close to a run's scan is not cached (the manifest's racy window,
    # RACY_NS): a daemon's pool is written before its run, not within the same 2 s.
    time.sleep(RACY_NS / 1e9 + 0.5)
    rows = []
    first = run_train(data, ckpt, *CAP)
    rows.append({"what": "first", **first})
    rows.append({"what": "up_to_date", **run_train(data, ckpt, "--resume", *CAP)})
    rows.append({"what": "check_in_daemon", **check_in_daemon(data, ckpt)})
    write_in_child(data, max(1, count // 100), layout, seed=1)
    rows.append({"what": "plus_1pct", **run_train(data, ckpt, "--resume", *CAP)})
    if full:
        fresh = root / f"{layout}-{count}" / "full"
        rows.append({"what": "full", **run_train(data, fresh)})
    shutil.rmtree(root / f"{layout}-{count}")
    for row in rows:
        row.update(pool=count, layout=layout)
    return rows


def _row(row: dict[str, Any]) -> str:
    result = row["result"] or {}
    extra = result.get("extra", {})
    phases = result.get("phases") or {}
    shown = ", ".join(f"{k} {v:.3f}" for k, v in phases.items())
    peaks = ", ".join(f"{k} {v:,.0f}" for k, v in extra.get("peak_rss_mib", {}).items())
    outcome = result.get("outcome", "none" if row["what"] == "check_in_daemon" else "?")
    auc = result.get("eval", {}).get("auc")
    return (
        f"| {row['pool']:,} | {row['layout']} | {row['what']} | {outcome} | {row['wall']:.3f} | "
        f"{row['cpu']:.3f} | {row['rss_mb']:.0f} | {result.get('steps', '')} | "
        f"{'' if auc is None else f'{auc:.3f}'} | {shown} | {peaks} |"
    )


def measure_pool_read(count: int, root: Path, repeat: int) -> dict[str, Any]:
    """A warm read served from the pool entry, and its checks' share: median seconds."""
    data, cache = root / f"read-{count}" / "pool", root / f"read-{count}" / "cache"
    write_in_child(data, count, "json")
    time.sleep(RACY_NS / 1e9 + 0.5)  # older than the manifest's racy window: cached
    manifest, _ = scan_files(data)

    def read() -> RecordCache:
        records = RecordCache(cache, manifest)
        read_trajectories(data, cache=records, keep_text=False)
        return records

    for _ in range(2):  # parsed; then every file from its own entry: the pool's written
        read()
    if not read().pool_hit:
        raise RuntimeError(f"the pool of {count} records was not served from its entry")
    (entry,) = cache.glob("pool-*.gfpool")
    limit = entry.stat().st_size  # the entry is the one this build wrote

    def mapped() -> dict[str, Any]:
        return pool_file.arrays_of(pool_file.read_pool_file(entry, POOL_VERSION, limit).columns)

    def timed(work: Callable[[Any], object], prepare: Callable[[], Any] = lambda: None) -> float:
        """The median seconds of ``work`` on what ``prepare`` gives, prepared unclocked."""
        seconds = []
        for _ in range(repeat):
            given = prepare()
            start = time.perf_counter()
            work(given)
            seconds.append(time.perf_counter() - start)
        return sorted(seconds)[len(seconds) // 2]

    # The checksums on a mapping of their own, made (and so read in) before the clock
    # starts: the CRC-32's own cost. Reading the pages in is the entry read's, which a
    # run would pay anyway when it first reads its columns.
    return {
        "pool": count,
        "entry_mb": limit / 2**20,
        "warm_read": timed(lambda _: read()),
        "entry_read": timed(lambda _: pool_file.read_pool_file(entry, POOL_VERSION, limit)),
        "checksums": timed(pool_file.checksums, mapped),
        "score": timed(lambda a: pool_file.checksums({"score": a["score"]}), mapped),
    }


def main_pool_read(sizes: list[int], repeat: int) -> None:
    print("| pool | entry MB | warm read s | entry read s | all CRC-32 s | score CRC-32 s |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for count in sizes:
            row = measure_pool_read(count, Path(tmp), repeat)
            print(
                f"| {row['pool']:,} | {row['entry_mb']:.1f} | {row['warm_read']:.4f} | "
                f"{row['entry_read']:.4f} | {row['checksums']:.4f} | {row['score']:.5f} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--layouts", default="json,jsonl")
    parser.add_argument("--full", default="10000", help="sizes that also run a full default run")
    parser.add_argument(
        "--keep-pools", type=Path, help="keep generated pools here and reuse them on later calls"
    )
    parser.add_argument(
        "--pool-read", action="store_true", help="time a warm read from the pool entry instead"
    )
    parser.add_argument("--repeat", type=int, default=5, help="--pool-read: runs of each")
    args = parser.parse_args()
    if args.pool_read:
        main_pool_read([int(s) for s in args.sizes.split(",")], args.repeat)
        return
    full = {int(s) for s in args.full.split(",") if s}
    print(
        "| pool | layout | run | outcome | wall s | CPU s | RSS MB | steps | AUC | phases s "
        "| peak RSS MiB as each phase ended |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(s) for s in args.sizes.split(",")):
            for layout in args.layouts.split(","):
                for row in measure(count, layout, count in full, Path(tmp), args.keep_pools):
                    print(_row(row), flush=True)


if __name__ == "__main__":
    main()
