"""What a reload that changed nothing costs the next run: a daemon per tree, a first run of
se_darwin on ``--pool`` records, SIGHUP with the ``.env`` as it was, then a run after 1%
new records; that run's phases, wall and job seconds from the daemon's own finished line,
and whether the daemon replaced its run worker before it (a new worker, a new resident
run process: the run and its job start cold).

::

    python benchmarks/reload_worker.py --trees .,/work/wt/base --pool 50000 --rounds 2

Each tree's daemon runs its own code (``python -m`` in a folder of its own, the tree first
on ``PYTHONPATH``); the data is written by this tree's ``data generate``. The daemon is
``daemon_judging_cost.py``'s (fp32, the agent alone, runs asked for by ``genesis-fp16
run``). One JSON line a run, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import daemon_judging_cost as daemon

TREE = Path(__file__).resolve().parents[1]
RELOAD_WAIT_S = 2.0  # the daemon's loop looks for a reload every 0.5 s


def _path(tree: Path) -> str:
    return os.pathsep.join(str(tree / part) for part in ("", "infrastructure", "agents"))


def _commit(tree: Path) -> str:
    command = ["git", "-C", str(tree), "rev-parse", "--short=8", "HEAD"]
    return subprocess.check_output(command, text=True).strip()


def measure(tree: Path, pool: int, work: Path) -> dict[str, Any]:
    """One daemon of ``tree``: a first run, SIGHUP, a later run (module docstring)."""
    root = work / f"{tree.name}-{time.monotonic_ns()}"
    root.mkdir(parents=True)
    env = {**daemon._env("se_darwin", root), "PYTHONPATH": _path(tree)}
    writer = {**env, "PYTHONPATH": _path(TREE)}
    daemon._batch("se_darwin", root, writer, pool - pool // 100, daemon.SEEDS[0])
    here = Path.cwd()
    os.chdir(root)  # python -m puts the folder it starts in first on sys.path

    def before(done: int) -> None:
        if done == 1:
            daemon._batch("se_darwin", root, writer, pool // 100, daemon.SEEDS[2])
            serve = subprocess.check_output(["pgrep", "-f", "-o", "genesis_fp16 serve"])
            os.kill(int(serve.split()[0]), signal.SIGHUP)
            time.sleep(RELOAD_WAIT_S)

    try:
        first, second = daemon._runs("se_darwin", root, env, 2, before=before)
    finally:
        os.chdir(here)
    log = (root / "daemon.log").read_text()
    return {
        "tree": str(tree),
        "commit": _commit(tree),
        "pool": pool,
        "reloaded": "config reloaded" in log,
        "replaced": "replacing the run worker" in log,
        "phases": second.get("phases"),
        "wall_seconds": second["wall_seconds"],
        "job_seconds": second["duration_seconds"],
        "first_wall_seconds": first["wall_seconds"],
        "loadavg": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", default=str(TREE), help="checkouts, comma-separated")
    parser.add_argument("--pool", type=int, default=50_000, help="records of the first run")
    parser.add_argument("--rounds", type=int, default=1, help="passes over the trees")
    parser.add_argument("--out", type=Path, help="append each row's JSON line here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.rounds):
            for tree in args.trees.split(","):
                row = measure(Path(tree).resolve(), args.pool, Path(work))
                print(json.dumps(row), flush=True)
                if args.out is not None:
                    with args.out.open("a") as out:
                        out.write(json.dumps(row) + "\n")
                rows.append(row)
    print("| commit | replaced after SIGHUP | read | live | run | job |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        phases = row["phases"] or {}
        print(
            f"| {row['commit']} | {'yes' if row['replaced'] else 'no'} | "
            f"{phases.get('read', 0):.3f} | {phases.get('live', 0):.3f} | "
            f"{row['wall_seconds']:.3f} | {row['job_seconds']:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
