"""Every phase of a later judged run, and its id lookups, in one process per tree, trees
back to back (issue 90: id lookups cost what is new, judging/stores.py:ranked).

For each ``--pools`` size P: se_darwin data as ``run_anatomy.py --new-after`` writes it
(P - ``--new`` records, seed 99, then ``--new`` more, seed 3099, in ``zz-pool-3099.json``,
sorting last; cached under ``--data``); a first model trained and served on the first file
through ``run_plugin`` in this process (as a resident run process serves it: the
request's ``keep_in_memory_bytes``), then the measured run after the new file,
``--repeats`` times, each from the state folder and the process's memory store as the
first run left them. Per repeat: each phase (the run's own figures), the seconds and
calls of the judged run's id lookups (``data.schema.known``, ``judging.stores.known`` in
a tree before walk39, timed around it), the verdict and the drift flags. With ``--trees
A,B`` each tree's run is a process of its own (its three roots first on ``PYTHONPATH``),
the trees alternating in order per round::

    python benchmarks/id_lookups_ab.py --pools 10000,100000 --new 1000 --repeats 3 \
        --rounds 2 --trees /work/wt/b28,. --out benchmarks/results/x.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PHASES = ("read", "encode", "eval", "drift", "live", "gate")


def measure(pool: int, new: int, repeats: int, cache: Path) -> dict[str, Any]:
    """This tree's phases, lookups, verdicts and drift flags at ``pool``, ``new`` new."""
    # The served scoring benchmark's later run, imported in this tree's process.
    from served_scoring_kept import later_runs

    from genesis_fp16_infrastructure.data import schema
    from genesis_fp16_infrastructure.judging import stores

    home = schema if hasattr(schema, "known") else stores  # a tree before walk39: stores
    lookups = [0.0, 0]
    real = home.known

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            lookups[0] += time.perf_counter() - started
            lookups[1] += 1

    home.known = timed
    runs = []
    for later in later_runs(pool, new, cache, repeats, "zz-pool-3099.json"):
        lookups[:] = [0.0, 0]
        result = later()
        assert result.gate is not None and result.phases is not None
        phases = {k: result.phases.get(k, 0.0) for k in (*PHASES, "train")}
        drift = None if result.drift is None else list(result.drift.flagged)
        runs.append({
            "phases": phases, "lookup_s": lookups[0], "lookups": lookups[1],
            "verdict": [result.gate.outcome, result.gate.reason], "drift": drift,
        })  # fmt: skip
    return {"runs": runs}


def _one(tree: str, pool: int, args: argparse.Namespace) -> dict[str, Any]:
    roots = [tree, f"{tree}/agents", f"{tree}/infrastructure"]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(roots), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--one", str(pool), "--new", str(args.new)]
    command += ["--repeats", str(args.repeats), "--data", str(args.data)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _commit(tree: str) -> str:
    return subprocess.run(
        ["git", "-C", tree, "rev-parse", "--short=8", "HEAD"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def _median(runs: list[dict[str, Any]], pick: Any) -> float:
    return statistics.median(pick(r) for r in runs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", default=".")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "ids_ab")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.one, args.new, args.repeats, args.data / str(args.one))))
        return
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    load = Path("/proc/loadavg").read_text().split()[:3]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for pool in (int(p) for p in args.pools.split(",")):
        for k in range(args.rounds):
            for tree in trees if k % 2 == 0 else trees[::-1]:
                got = _one(tree, pool, args)["runs"]
                runs.setdefault((tree, pool), []).extend(got)
                print(tree, pool, [r["lookup_s"] for r in got], file=sys.stderr, flush=True)
    after = Path("/proc/loadavg").read_text().split()[:3]
    heads = " | ".join(PHASES)
    lines = [
        "# Every phase of a later judged run and its id lookups, trees back to back (issue 90)",
        "",
        f"`python benchmarks/id_lookups_ab.py {' '.join(argv or sys.argv[1:])}`; "
        f"{os.cpu_count()} cores, one torch thread; load average {' '.join(load)} before, "
        f"{' '.join(after)} after (a shared host: the seconds are paired, not absolute). "
        "Medians of every repeat; `lookups` is `data.schema.known` (`judging.stores.known` "
        "before walk39), its calls a run.",
        "",
        f"| tree | commit | pool | {heads} | but train | train | lookups s | calls | runs |",
        "| --- " * (9 + len(PHASES)) + "|",
    ]
    for (tree, pool), got in runs.items():
        cells = [f"{_median(got, lambda r, k=k: r['phases'][k]):.3f}" for k in PHASES]
        but = _median(got, lambda r: sum(r["phases"][k] for k in PHASES))
        lines.append(
            f"| {Path(tree).name} | {_commit(tree)} | {pool:,} | {' | '.join(cells)} "
            f"| {but:.3f} | {_median(got, lambda r: r['phases']['train']):.3f} "
            f"| {_median(got, lambda r: r['lookup_s']):.4f} "
            f"| {_median(got, lambda r: r['lookups']):.0f} | {len(got)} |"
        )
    lines += ["", "Verdicts (outcome, reason) and drift flags, per tree and pool:", ""]
    for (tree, pool), got in runs.items():
        seen = sorted({json.dumps([r["verdict"], r["drift"]]) for r in got})
        lines += [f"- {Path(tree).name} {pool:,}: {v}" for v in seen]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
