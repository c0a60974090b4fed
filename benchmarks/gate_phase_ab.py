"""The gate phase of a later judged run, in one process per tree, trees back to back.

Issue 90: the gate should cost what is new. For each ``--pools`` size P: se_darwin data
as ``run_anatomy.py`` writes it (P - ``--new`` records, seed 99, then ``--new`` more,
seed 3099, in a file sorting last; cached under ``--data``); a first model trained and
served on the first file through ``run_plugin`` in this process (as a resident run
process serves it: the request's ``keep_in_memory_bytes``), then the measured run after
the new file, ``--repeats`` times, each from the state folder and the process's memory
store as the first run left them. Its ``gate`` phase (the run's own figure) and its
verdict per repeat. With ``--trees A,B`` each tree's run is a process of its own
(its three roots first on ``PYTHONPATH``), the trees alternating in order per round::

    python benchmarks/gate_phase_ab.py --pools 10000,100000 --new 1000 --repeats 3 \
        --rounds 2 --trees /work/wt/gate90,/work/wt/m5a --out benchmarks/results/x.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def measure(pool: int, new: int, repeats: int, cache: Path) -> dict[str, Any]:
    """This tree's gate seconds and verdicts at ``pool`` with ``new`` new records."""
    # The served scoring benchmark's later run, imported here, in the tree's own process,
    # as that module imports the tree's code when it loads.
    from served_scoring_kept import later_runs

    gates, verdicts = [], []
    for later in later_runs(pool, new, cache, repeats):
        result = later()
        assert result.gate is not None and result.phases is not None
        gates.append(result.phases["gate"])
        verdicts.append([result.gate.outcome, result.gate.reason])
    return {"gate": gates, "verdicts": verdicts}


def _one(tree: str, pool: int, args: argparse.Namespace) -> dict[str, Any]:
    roots = [tree, f"{tree}/agents", f"{tree}/infrastructure"]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(roots), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--one", str(pool), "--new", str(args.new)]
    command += ["--repeats", str(args.repeats), "--data", str(args.data)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _commit(tree: str) -> str:
    return subprocess.run(
        ["git", "-C", tree, "rev-parse", "--short=8", "HEAD"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", default=".")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "gate_ab")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.one, args.new, args.repeats, args.data / str(args.one))))
        return
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    load = Path("/proc/loadavg").read_text().split()[:3]
    seconds: dict[tuple[str, int], list[float]] = {}
    verdicts: dict[tuple[str, int], set[str]] = {}
    for pool in (int(p) for p in args.pools.split(",")):
        for k in range(args.rounds):
            for tree in trees if k % 2 == 0 else trees[::-1]:
                got = _one(tree, pool, args)
                seconds.setdefault((tree, pool), []).extend(got["gate"])
                verdicts.setdefault((tree, pool), set()).update(
                    json.dumps(v) for v in got["verdicts"]
                )
                print(tree, pool, got["gate"], file=sys.stderr, flush=True)
    after = Path("/proc/loadavg").read_text().split()[:3]
    lines = [
        "# The gate phase of a later judged run, trees back to back (issue 90)",
        "",
        f"`python benchmarks/gate_phase_ab.py {' '.join(argv or sys.argv[1:])}`; "
        f"{os.cpu_count()} cores, one torch thread; load average {' '.join(load)} before, "
        f"{' '.join(after)} after (a shared host: the seconds are paired, not absolute).",
        "",
        "| tree | commit | pool | new | gate s, median | min | max | runs | verdicts |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (tree, pool), s in seconds.items():
        found = verdicts[tree, pool]
        lines.append(
            f"| {tree} | {_commit(tree)} | {pool:,} | {args.new:,} | {statistics.median(s):.4f} "
            f"| {min(s):.4f} | {max(s):.4f} | {len(s)} | {len(found)} distinct |"
        )
    lines += ["", "Verdicts (outcome, reason), per tree and pool:", ""]
    for (tree, pool), found in verdicts.items():
        lines += [f"- {Path(tree).name} {pool:,}: {v}" for v in sorted(found)]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
