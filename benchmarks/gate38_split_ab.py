"""The held-out split's draw and splitmix64, two trees' ``contract/split.py`` in one
process, interleaved (issue 90: what a judged run draws grows with the pool).

What a later run at a pool of P records draws and mixes: the held-out sides of the
candidate's trained ids (``held_out_check``: about 0.8 P hashes, new every run, drawn
whole), those of the new records' hashes (1,000), and the mixing of ``input_keys``
(``recipes/retrain/kept_outputs.py``: about a fifth of the pool keyed in a first run's
gate, the new records' in a later one). CPU milliseconds of this thread
(``time.thread_time``), medians of ``--repeats``, the trees alternating; ``same``: both
trees' answers equal bit for bit::

    python benchmarks/gate38_split_ab.py --pools 10000,100000 --repeats 101 --before /work/base38
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
from other_tree import module_from

from genesis_fp16_infrastructure.contract import split

INF = Path("infrastructure/genesis_fp16_infrastructure")


def _cpu_ms(call: Callable[[], object]) -> float:
    started = time.thread_time()
    call()
    return (time.thread_time() - started) * 1e3


def _pieces(
    tree: ModuleType, pool: int, rng: np.random.Generator
) -> dict[str, Callable[[], object]]:
    trained = np.sort(rng.integers(0, 2**64 - 1, pool * 4 // 5, dtype=np.uint64))
    new = rng.integers(0, 2**64 - 1, 1000, dtype=np.uint64)
    keyed = rng.integers(0, 2**64 - 1, pool // 5, dtype=np.uint64)
    drawn = tree.HeldOutSplit()
    seed = np.uint64(0x6A09E667F3BCC908)
    return {
        "trained ids' sides": lambda: drawn._draw(trained),
        "new records' sides": lambda: drawn._draw(new),
        "a fifth's mixing": lambda: tree.splitmix64(keyed, seed),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=101)
    parser.add_argument("--before", type=Path, required=True)
    args = parser.parse_args(argv)
    trees = {"before": module_from(args.before / INF / "contract/split.py", "split_before")}
    trees["this"] = split
    load = os.getloadavg()
    print(f"Load average {' '.join(f'{x:.2f}' for x in load)}; CPU ms, medians of {args.repeats}")
    print("\n| pool | piece | before | this | same |\n|---:|---|---:|---:|---|")
    for pool in (int(p) for p in args.pools.split(",")):
        made = {
            name: _pieces(tree, pool, np.random.default_rng(pool)) for name, tree in trees.items()
        }
        times: dict[tuple[str, str], list[float]] = {}
        for k in range(args.repeats):
            for name in ("before", "this") if k % 2 == 0 else ("this", "before"):
                for piece, call in made[name].items():
                    times.setdefault((name, piece), []).append(_cpu_ms(call))
        for piece in made["this"]:
            same = np.array_equal(made["before"][piece](), made["this"][piece]())
            a, b = (statistics.median(times[(n, piece)]) for n in ("before", "this"))
            print(f"| {pool:,} | {piece} | {a:.3f} | {b:.3f} | {same} |")
    after = os.getloadavg()
    print(f"\nLoad average after {' '.join(f'{x:.2f}' for x in after)}")


if __name__ == "__main__":
    main()
