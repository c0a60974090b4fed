"""The trainer's step against the hand-written loop, in two trees, interleaved (CPU).

Does a change of the tree change what a training step costs? The bench's ``ours`` rows
(this project's trainer) and ``hand`` rows (a hand-written torch.amp loop, the yardstick)
are timed in tree A and tree B, runs alternating A, B, A, B, ...::

    python benchmarks/step_ab.py /work/before /work/main --rounds 10 --out /tmp/ab

Each run is one process, ``python -m genesis_fp16 bench --device cpu --in-process
--sizes default --precisions fp32,bf16 --runners ours,hand --threads 1 --steps 200``
(``--bench`` adds to it), with ``PYTHONPATH`` set to the tree's three source roots (the
tree, ``agents/``, ``infrastructure/``) and the working directory ``--out``, so that the
tree is what is imported whatever this interpreter has installed (each run checks it:
it stops when ``genesis_fp16`` comes from elsewhere), under ``nice``, writing no
``__pycache__`` into the trees. The 1-minute load
average (``os.getloadavg``) is noted at each run's start: the machine is shared.

Read the ratio ``ours/hand`` of each run, not its times: other work on the machine moves
both runners of a run alike. Printed: one Markdown table, each cell the median over a
tree's runs with (min-max), and the B/A ratio of the medians.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

BENCH = [
    *("--device", "cpu", "--in-process", "--sizes", "default", "--precisions", "fp32,bf16"),
    *("--runners", "ours,hand", "--threads", "1", "--steps", "200"),
]
PRECISIONS = ("fp32", "bf16")


def roots(tree: Path) -> str:
    """The ``PYTHONPATH`` that imports ``tree``'s packages first."""
    return os.pathsep.join(str(tree / p) for p in ("", "agents", "infrastructure"))


def run_once(tree: Path, out: Path, extra: Sequence[str]) -> dict[tuple[str, str], float]:
    """One bench run of ``tree``: each (precision, runner)'s median step in ms."""
    out.mkdir(parents=True, exist_ok=True)
    # No __pycache__ written into a tree that is only measured (another checkout).
    env = {**os.environ, "PYTHONPATH": roots(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    check = "import genesis_fp16, sys; print(genesis_fp16.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", check], env=env, cwd=out, capture_output=True, text=True
    )
    if not where.stdout.startswith(str(tree.resolve())):
        raise SystemExit(f"step_ab: {tree} imports genesis_fp16 from {where.stdout.strip()}")
    command = ["nice", sys.executable, "-m", "genesis_fp16", "bench", *BENCH, *extra]
    subprocess.run(
        [*command, "--out-dir", str(out)], env=env, cwd=out, check=True, capture_output=True
    )
    (table,) = out.glob("bench_*.csv")
    with table.open(newline="") as f:
        return {
            (row["precision_ran"], row["runner"]): float(row["median_step_ms"])
            for row in csv.DictReader(f)
        }


def cell(values: Sequence[float]) -> str:
    """``median (min-max)``."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="tree A (run first in each round)")
    parser.add_argument("b", type=Path, help="tree B")
    parser.add_argument("--rounds", type=int, default=10, help="runs per tree (default 10)")
    parser.add_argument("--out", type=Path, required=True, help="a folder for the runs")
    parser.add_argument("--bench", default="", help="more bench arguments, one string")
    args = parser.parse_args(argv)
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    runs: dict[str, list[dict[tuple[str, str], float]]] = {"A": [], "B": []}
    for i in range(args.rounds):
        for name, tree in trees.items():
            load = os.getloadavg()[0]
            times = run_once(tree, args.out / f"{i:02d}-{name}", args.bench.split())
            runs[name].append(times)
            ratios = " ".join(f"{p} {times[p, 'ours'] / times[p, 'hand']:.3f}" for p in PRECISIONS)
            print(f"round {i} {name} load {load:.2f}: ours/hand {ratios}", file=sys.stderr)
    print(f"A: {trees['A']}, B: {trees['B']}, {args.rounds} runs each, interleaved\n")
    print("| precision | runner | A ms: median (min-max) | B ms: median (min-max) | B/A |")
    print("|---|---|---|---|---|")
    for precision in PRECISIONS:
        for runner in ("ours", "hand", "ours/hand"):
            columns = []
            for name in trees:
                if runner == "ours/hand":
                    values = [r[precision, "ours"] / r[precision, "hand"] for r in runs[name]]
                else:
                    values = [r[precision, runner] for r in runs[name]]
                columns.append(values)
            ratio = statistics.median(columns[1]) / statistics.median(columns[0])
            a, b = cell(columns[0]), cell(columns[1])
            print(f"| {precision} | {runner} | {a} | {b} | {ratio:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
