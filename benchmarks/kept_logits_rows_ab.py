"""The served model's kept logits found by row (``kept_outputs.RowLogits``) against another
tree's ``kept_outputs`` (searched by key alone), in one process, interleaved (issue 90).

A later judged run's kept-logit work, as ``scoring._logits`` does it at a pool of P records
with ``--new`` of them new (the anatomy's later run): the first run's gate kept the
candidate's logits on its ~97% labelled records (``of``), the later run's watch scores that
model, now served, on the held-out fifth and the new records (``find``: the held-out ones
kept) and keeps the new ones' logits (``joined``); its gate keeps the next candidate's on
the held-out fifth (``of``). Keys are random 128-bit input keys (hashes: any others are
alike to a sort), rows as a grown pool's. Each step is timed in the thread's CPU time,
this tree's and the other's alternating repeat by repeat; what both find is compared (each
hit and each logit's bits) and what both keep (the sorted keys and logits, bit for bit).

    python benchmarks/kept_logits_rows_ab.py --against /work/base37 --pools 10000,100000 \\
        --new 1000 --repeats 41
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from other_tree import module_from

from genesis_fp16_infrastructure.recipes.retrain import kept_outputs

STEPS = ("first gate: of", "watch: find", "watch: joined", "gate: of")


def _run(
    module: ModuleType, case: dict[str, Any], rows: bool, seconds: dict[str, list[float]]
) -> Any:
    """One later run's kept-logit steps with ``module``'s KeptLogits (``rows``: passing
    each key's row, as this tree's scoring does), each step's CPU seconds appended."""
    keys = module.InputKeys
    first_keys = keys(case["first"], case["second"])
    at = case["asked"]
    asked_keys = keys(case["first"][at], case["second"][at])
    gate_at = case["gate"]
    gate_keys = keys(case["first"][gate_at], case["second"][gate_at])

    def timed(step: str, call: Callable[[], Any]) -> Any:
        started = time.thread_time()
        out = call()
        seconds[step].append(time.thread_time() - started)
        return out

    labelled = case["labelled"]
    extra = (labelled,) if rows else ()
    kept = timed(STEPS[0], lambda: module.KeptLogits.of(
        keys(first_keys.first[labelled], first_keys.second[labelled]), case["logit"][labelled],
        *extra))  # fmt: skip
    found = timed(STEPS[1], lambda: kept.find(asked_keys, *((at,) if rows else ())))
    missed = np.flatnonzero(~found[0])
    new_keys = keys(asked_keys.first[missed], asked_keys.second[missed])
    new_logit = case["logit"][at][missed]
    joined = timed(STEPS[2], lambda: kept.joined(new_keys, new_logit))
    timed(STEPS[3], lambda: module.KeptLogits.of(gate_keys, case["logit"][gate_at],
                                                 *((gate_at,) if rows else ())))  # fmt: skip
    return found, joined


def _case(pool: int, new: int, seed: int) -> dict[str, Any]:
    """A pool's keys and logits: the first ``pool - new`` records labelled at ~97% (the
    first run's), its held-out fifth and the ``new`` at the end asked (the watch's), the
    held-out fifth of the grown pool (the next gate's)."""
    rng = np.random.default_rng(seed)
    first = rng.integers(0, 2**63, pool, dtype=np.int64).astype(np.uint64)
    second = rng.integers(0, 2**63, pool, dtype=np.int64).astype(np.uint64)
    held = rng.random(pool) < 0.2
    old = pool - new
    labelled = np.flatnonzero(rng.random(old) < 0.97)
    asked = np.flatnonzero(held | (np.arange(pool) >= old))
    return {
        "first": first,
        "second": second,
        "logit": rng.standard_normal(pool).astype(np.float32),
        "labelled": labelled,
        "asked": asked,
        "gate": np.flatnonzero(held),
    }


def _same(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    """Whether both trees found the same (hits, logits' bits) and kept the same joined."""
    (hit_a, logit_a), joined_a = a
    (hit_b, logit_b), joined_b = b
    same = hit_a.tolist() == hit_b.tolist() and logit_a.tobytes() == logit_b.tobytes()
    for name in ("first", "second", "logit"):
        same = same and getattr(joined_a, name).tobytes() == getattr(joined_b, name).tobytes()
    return same


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True, help="the other checkout")
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    path = args.against / "infrastructure/genesis_fp16_infrastructure/recipes/retrain"
    other = module_from(path / "kept_outputs.py", "other_kept_outputs")
    load = os.getloadavg()
    table: dict[tuple[int, str, str], float] = {}
    for pool in (int(p) for p in args.pools.split(",")):
        case = _case(pool, args.new, pool)
        mine: dict[str, list[float]] = {s: [] for s in STEPS}
        theirs: dict[str, list[float]] = {s: [] for s in STEPS}
        for k in range(args.repeats):
            order = ((kept_outputs, True, mine), (other, False, theirs))
            for module, rows, seconds in order if k % 2 == 0 else order[::-1]:
                result = _run(module, case, rows, seconds)
                if module is other:
                    found_other = result
                else:
                    found_mine = result
            if not _same(found_mine, found_other):
                raise SystemExit(f"pool {pool}: the trees found or kept different logits")
        for step in STEPS:
            table[(pool, step, "other")] = statistics.median(theirs[step]) * 1000
            table[(pool, step, "this")] = statistics.median(mine[step]) * 1000
    print(_report(args, argv, load, table), end="")
    if args.out is not None:
        args.out.write_text(_report(args, argv, load, table))


def _report(
    args: Any, argv: list[str] | None, load: tuple[float, ...], table: dict[Any, float]
) -> str:
    command = " ".join(["python benchmarks/kept_logits_rows_ab.py", *(argv or sys.argv[1:])])
    after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        f"`{command}`; {platform.processor() or platform.machine()}, {os.cpu_count()} cores. "
        f"Load average before {' '.join(f'{x:.2f}' for x in load)}, after {after}. CPU ms "
        f"of the thread, medians of {args.repeats}, the trees alternating; every repeat's "
        "hits, logits and joined entries compared bit for bit (the same).",
        "",
        f"| pool | step | {args.against.name} | this tree |",
        "| --- | --- | --- | --- |",
    ]
    for (pool, step, tree), ms in table.items():
        if tree == "other":
            lines.append(f"| {pool:,} | {step} | {ms:.3f} | {table[(pool, step, 'this')]:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
