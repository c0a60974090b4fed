"""What the live watch's bets and its A/A self-test cost (issue 90: the live phase of a
later run whose served model has a predecessor).

Each judged run whose served model has a predecessor runs the watch's test over every
record watched so far and its A/A self-test: 200 replays of the last 2,000 records, for
each loss column the overall test and each segment's (``judging.segment_tests``). Both are
``confidence_sequence._bets`` over arrays of that size.

In one process, one thread, median of ``--repeat``: ``segment_tests.self_test`` of two loss
columns (se_darwin's: log-loss and Brier score, both at its span of 4.6) of 2,000 paired
differences in 4 segments, drawn from normal distributions of the spreads below (se_darwin's
consecutive models differ by about that much a record), and ``_bets`` of one
200 x 2,000 replay of the first column. ``capped`` is the share of those bets at ``CAP``.
``--trees A,B`` runs each tree's code in a child of its own, alternating::

    python benchmarks/watch_bets_cost.py --trees .,/work/wt/base
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from other_tree import tree_child

CHILD = r"""
import json, statistics, sys, time
import numpy as np
try:
    from genesis_fp16_infrastructure.judging import confidence_sequence as bound
    from genesis_fp16_infrastructure.judging import segment_tests as tests
except ImportError:  # a tree before the split: watch.py held both
    from genesis_fp16_infrastructure.judging import watch as bound
    tests = bound
repeat, spread = int(sys.argv[1]), float(sys.argv[2])
rng = np.random.default_rng(0)
n, span = 2000, 4.6
names = rng.choice(np.array(["a", "b", "c", "d"]), n)
columns = [(rng.normal(0.0, spread, n), names, 0.01),
           (rng.normal(0.0, spread / 4, n), names, 0.002)]
d = columns[0][0]
replay = np.clip(0.01 + rng.choice((-1.0, 1.0), (200, n)) * (d - d.mean()), -span, span)
x = np.clip((replay + span) / (2 * span), 0.0, 1.0)
took = {"self_test": [], "bets": []}
for _ in range(repeat):
    started = time.perf_counter()
    test = tests.self_test(columns, span, 0.025, seed=n)
    took["self_test"].append(time.perf_counter() - started)
    started = time.perf_counter()
    lam, _ = bound._bets(x.copy(), 0.0125)
    took["bets"].append(time.perf_counter() - started)
print(json.dumps({**{k: statistics.median(v) for k, v in took.items()},
                  "capped": float((lam == bound.CAP).mean()), "false": test.false_rollbacks}))
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spreads", default="0.2,1.0", help="the log-loss column's spreads")
    parser.add_argument("--trees", default=".")
    args = parser.parse_args(argv)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    for spread in (float(s) for s in args.spreads.split(",")):
        found: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
        for round_ in range(args.rounds):
            for tree in trees if round_ % 2 == 0 else trees[::-1]:
                row = tree_child(tree, CHILD, args.repeat, spread)
                found[tree].append(row)
                print(json.dumps({"tree": str(tree), "spread": spread, **row}), flush=True)
        for tree, rows in found.items():
            med = {k: statistics.median(r[k] for r in rows) for k in ("self_test", "bets")}
            print(
                f"{tree} spread {spread}: self_test {med['self_test'] * 1e3:.1f} ms, _bets "
                f"{med['bets'] * 1e3:.1f} ms (medians of {len(rows)} rounds; capped "
                f"{rows[0]['capped']:.2f}, false rollbacks {rows[0]['false']})"
            )


if __name__ == "__main__":
    main()
