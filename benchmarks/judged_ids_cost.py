"""What naming a pool's judged ids costs (issue 90): ``split.judged_ids`` of every
labelled record of a generated pool, as a run with nothing kept names them (a resident
run process's first run, a fresh daemon's, a first model's), median of ``--repeat``, in
one process, one thread. ``--trees A,B`` runs each tree's code in a child of its own,
alternating, so that the host's load falls on both alike::

    python benchmarks/judged_ids_cost.py --records 100000 --trees .,/work/wt/base
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from other_tree import tree_child

CHILD = r"""
import json, statistics, sys, tempfile, time
from pathlib import Path
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain import split
records, repeat = int(sys.argv[1]), int(sys.argv[2])
with tempfile.TemporaryDirectory() as tmp:
    columns = read_trajectories(write_pool(Path(tmp) / "p", records, 99), keep_text=False).columns
    took = []
    for _ in range(repeat):
        started = time.perf_counter()
        named = split.judged_ids(columns)
        took.append(time.perf_counter() - started)
print(json.dumps({"labelled": len(named), "seconds": statistics.median(took), "all": took}))
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trees", default=".")
    args = parser.parse_args(argv)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    seconds: dict[Path, list[float]] = {tree: [] for tree in trees}
    for round_ in range(args.rounds):
        for tree in trees if round_ % 2 == 0 else trees[::-1]:
            found = tree_child(tree, CHILD, args.records, args.repeat)
            seconds[tree].append(found["seconds"])
            print(json.dumps({"tree": str(tree), "round": round_, **found}), flush=True)
    for tree, each in seconds.items():
        print(
            f"{tree}: median {statistics.median(each) * 1e3:.1f} ms over {len(each)} rounds "
            f"({', '.join(f'{s * 1e3:.1f}' for s in each)})"
        )


if __name__ == "__main__":
    main()
