"""The live and gate phases of a later judged run, in one process per tree, trees back to
back: what the typed judging records' checks and the scoring rows cost (issue 90).

For each ``--pools`` size P: se_darwin data as ``gate_phase_ab.py`` writes it (P - ``--new``
records, seed 99, then ``--new`` more, seed 3099, in a file sorting last; cached under
``--data``); a first model trained and served through ``run_plugin`` in this process (as a
resident run process serves it), then the measured run after the new file, ``--repeats``
times, each from the state folder and the memory store as the first run left them. Its
``live`` and ``gate`` phases (the run's own figures) and its verdict per repeat. With
``--trees A,B`` each tree's runs are a process of their own (its three roots first on
``PYTHONPATH``), the trees alternating in order per round. ``--profile`` instead profiles
one measured run of each tree and prints the cumulative seconds of the checks and the
scoring rows (``contract/judging.py``, ``contract/split.py``, ``scoring_rows``)::

    python benchmarks/judging_checks_ab.py --pools 10000,100000 --new 1000 --repeats 3 \
        --rounds 2 --trees /work/wt/checks90,/work/wt/b28 --out benchmarks/results/x.md
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# The record types' modules: contract/record_losses.py since they left contract/judging.py
WATCHED = ("contract/judging.py", "contract/record_losses.py", "contract/split.py",
           "contract/train_request.py")  # fmt: skip


def measure(pool: int, new: int, repeats: int, cache: Path, profile: bool) -> dict[str, Any]:
    """This tree's live and gate seconds and verdicts at ``pool`` with ``new`` new records;
    with ``profile``, one profiled run's cumulative seconds in the watched modules."""
    # The served scoring benchmark's later run (gate_phase_ab's), in this tree's process.
    from served_scoring_kept import later_runs

    found: dict[str, Any] = {"live": [], "gate": [], "verdicts": [], "profile": {}}
    for later in later_runs(pool, new, cache, 1 if profile else repeats):
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        result = later()
        if profiler is not None:
            profiler.disable()
            found["profile"] = _watched(profiler)
            profiler.dump_stats(cache / "last.pstats")  # for pstats' callers and callees
        assert result.gate is not None and result.phases is not None
        found["live"].append(result.phases["live"])
        found["gate"].append(result.phases["gate"])
        found["verdicts"].append([result.gate.outcome, result.gate.reason])
    return found


def parts(pool: int, repeats: int) -> dict[str, Any]:
    """The judged run's records at ``pool`` as a later run builds them, timed alone (best
    of ``repeats``): a listing of ``pool`` ids with segments and hashes, and two scorings
    of a fifth of them (two loss columns, from float32 arrays), each built and then
    copied where the run uses it (base: rebuilt from its fields; here: ``copy_of``)."""
    import time

    import numpy as np

    try:  # where the tree defines the record types (other_tree.record_types_path)
        from genesis_fp16_infrastructure.contract import record_losses as judging
    except ImportError:  # a checkout from before they left contract/judging.py
        from genesis_fp16_infrastructure.contract import judging  # type: ignore[no-redef]
    from genesis_fp16_infrastructure.contract.split import id_hashes

    ids = [f"trajectory-{i:07d}#{i * 2654435761 % 2**64:016x}" for i in range(pool)]
    segments = [("explore", "exploit", "repair")[i % 3] for i in range(pool)]
    hashes = id_hashes(ids)
    rng = np.random.default_rng(0)
    asked = np.flatnonzero(rng.random(pool) < 0.21).tolist()
    columns = {
        "log_loss": rng.random(len(asked), np.float32),
        "brier": rng.random(len(asked), np.float32),
    }
    copy_ids = getattr(judging.RecordIds, "copy_of", None)
    copy_losses = getattr(judging.RecordLosses, "copy_of", None)
    best = {"listing": np.inf, "scorings": np.inf}
    for _ in range(repeats):
        started = time.perf_counter()
        listed = judging.RecordIds(tuple(ids), tuple(segments), hashes)
        if copy_ids is not None:
            copy_ids(listed)
        else:
            judging.RecordIds(listed.ids, listed.segments, listed.hashes)
        middle = time.perf_counter()
        for _ in range(2):
            scored = judging.RecordLosses.of(
                [ids[i] for i in asked], columns, [segments[i] for i in asked], 0
            )
            if copy_losses is not None:
                copy_losses(scored)
            else:
                fields = scored.ids, scored.losses, scored.segments, scored.quarantined
                judging.RecordLosses(*fields, scored.primary)
        ended = time.perf_counter()
        best["listing"] = min(best["listing"], middle - started)
        best["scorings"] = min(best["scorings"], ended - middle)
    return best


def _watched(profiler: cProfile.Profile) -> dict[str, list[float]]:
    """Cumulative and own seconds of each function of the watched modules."""
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows: dict[str, list[float]] = {}
    for (path, line, name), (_, _, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        short = "/".join(Path(path).parts[-2:])
        if short in WATCHED or name in ("<built-in method builtins.all>",):
            rows[f"{short}:{line} {name}"] = [round(cumulative, 4), round(own, 4)]
    return dict(sorted(rows.items(), key=lambda kv: -kv[1][0]))


def _one(tree: str, pool: int, args: argparse.Namespace) -> dict[str, Any]:
    roots = [tree, f"{tree}/agents", f"{tree}/infrastructure"]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(roots), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--one", str(pool), "--new", str(args.new)]
    command += ["--repeats", str(args.repeats), "--data", str(args.data)]
    command += ["--profile"] if args.profile else []
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return,unused-ignore]


def _commit(tree: str) -> str:
    return subprocess.run(
        ["git", "-C", tree, "rev-parse", "--short=8", "HEAD"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def _report(args: argparse.Namespace, argv: list[str], found: dict[Any, Any], load: str) -> str:
    after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    lines = [
        "# The live and gate phases of a later judged run, trees back to back (issue 90)",
        "",
        f"`python benchmarks/judging_checks_ab.py {' '.join(argv)}`; "
        f"{os.cpu_count()} cores, one torch thread; load average {load} before, "
        f"{after} after (a shared host: the seconds are paired, not absolute).",
        "",
        "| tree | commit | pool | new | live s, median | gate s, median | live+gate, min | runs "
        "| verdicts |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (tree, pool), got in found.items():
        both = [a + b for a, b in zip(got["live"], got["gate"], strict=True)]
        lines.append(
            f"| {Path(tree).name} | {_commit(tree)} | {pool:,} | {args.new:,} "
            f"| {statistics.median(got['live']):.4f} | {statistics.median(got['gate']):.4f} "
            f"| {min(both):.4f} | {len(both)} | {len({json.dumps(v) for v in got['verdicts']})} "
            "distinct |"
        )
    lines += ["", "Verdicts (outcome, reason), per tree and pool:", ""]
    for (tree, pool), got in found.items():
        verdicts = sorted({json.dumps(v) for v in got["verdicts"]})
        lines += [f"- {Path(tree).name} {pool:,}: {v}" for v in verdicts]
    for (tree, pool), got in found.items():
        if got["profile"]:
            lines += ["", f"Profile, {Path(tree).name} at {pool:,} (cumulative s, own s):", ""]
            lines += [f"- `{k}`: {v[0]}, {v[1]}" for k, v in list(got["profile"].items())[:12]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", default=".")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "checks_ab")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--parts", type=int, help="time the records alone at this pool")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.parts:
        print(json.dumps(parts(args.parts, args.repeats)))
        return
    if args.one is not None:
        got = measure(args.one, args.new, args.repeats, args.data / str(args.one), args.profile)
        print(json.dumps(got))
        return
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for pool in (int(p) for p in args.pools.split(",")):
        for k in range(1 if args.profile else args.rounds):
            for tree in trees if k % 2 == 0 else trees[::-1]:
                got = _one(tree, pool, args)
                into = found.setdefault((tree, pool), {"live": [], "gate": [], "verdicts": []})
                for key in ("live", "gate", "verdicts"):
                    into[key].extend(got[key])
                into["profile"] = got["profile"]
                print(tree, pool, got["live"], got["gate"], file=sys.stderr, flush=True)
    text = _report(args, argv if argv is not None else sys.argv[1:], found, load)
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
