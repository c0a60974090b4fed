"""The judged run's ``live`` phase, main against a branch, in-process and paired (issue 90).

For each pool P and tree, a child process (the tree's ``genesis_fp16``, ``agents`` and
``infrastructure`` first on ``PYTHONPATH``) serves a first se_darwin model on P - n
records in a resident-like process (``keep_in_memory_bytes`` as the daemon's default),
then n new records arrive (a file that sorts last) and the measured run trains and is
judged: its phases from its own ``TrainResult.phases``. Trees alternate, repeat by
repeat (A B, B A, ...), so that a host's load falls on both alike.

Beside the phases, the floor of the issue's "drift, live and gate together <= 3x one
forward pass of the served model over the records they score": after the measured run,
the served model's checkpoint (the one the run scored), encoded and run forward over the
records the run's scorings asked for (the held-out ones and the new ones), in the same
process, median of three.

    python benchmarks/live_phase_ab.py --pools 10000,100000 --new 1000 --repeats 2 \\
        --trees .,../m5a --out benchmarks/results/live_phase_ab_90
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from other_tree import tree_child

CHILD = r"""
import json, os, shutil, statistics, sys, tempfile, time
from pathlib import Path
import numpy as np, torch
from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.agent_folder.pointer import checkpoint_of, read_pointer
from genesis_fp16_infrastructure.api import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.contract.split import HELD_OUT
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.judging.run import run_plugin
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.recipes.retrain import scoring
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint
from genesis_fp16_infrastructure.world_model.features import numeric_rows
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor
pool, new, steps = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(1)
def arrive(source, data, name):
    target = data / name
    shutil.copy(source, target)
    past = time.time() - 120  # older than the record cache's racy window
    os.utime(target, (past, past))
def request(work, data):
    ck = work / "state" / "ck"
    pointer = read_pointer(ck) if ck.exists() else None
    return TrainRequest(agent="se_darwin", precision="fp32", precision_reason="benchmark",
        state_dir=work / "state", checkpoint_dir=ck, data_path=data, steps=steps, seed=3,
        keep_in_memory_bytes=1024 * 2**20,
        snapshot=AgentSnapshot(None, pointer=pointer, data=DataCheck(scan_files(data)[0])))
with tempfile.TemporaryDirectory() as tmp:
    work = Path(tmp); data = work / "data"; data.mkdir()
    arrive(write_pool(work / "g1", pool - new, 99), data, "pool-99.json")
    run_plugin(plugin, request(work, data))
    arrive(write_pool(work / "g2", new, 3099), data, "zz-pool-3099.json")
    ck = work / "state" / "ck"
    served = checkpoint_of(ck, read_pointer(ck))
    req = request(work, data)
    result = run_plugin(plugin, req)
    # The floor: the served model's forward over the records its scorings asked for.
    pool_ = scoring._run_pool(req, scoring.TaskOptions.from_mapping(req.options))
    columns = pool_.data.columns
    known = stores.read_known_ids(served.parent)
    known_of = getattr(schema, "known", None) or stores.known  # stores' before walk39
    new = ~known_of(columns.judged, known)
    asked = np.flatnonzero(HELD_OUT.of_hashes(columns.judged) | new)
    numeric = numeric_rows(columns, columns.labelled[asked])
    predictor = WorldModelPredictor.of_state(load_checkpoint(served))
    took = []
    for _ in range(3):
        started = time.perf_counter()
        scoring._forward(predictor, columns, asked, numeric)
        took.append(time.perf_counter() - started)
    print(json.dumps({"phases": result.phases, "gate": result.gate.outcome,
                      "forward": statistics.median(took), "scored": len(asked)}))
"""


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--trees", default=".")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    rows: list[dict[str, Any]] = []
    for pool in (int(p) for p in args.pools.split(",")):
        for repeat in range(args.repeats):
            for tree in trees if repeat % 2 == 0 else trees[::-1]:
                load = _load()
                found = tree_child(tree, CHILD, pool, args.new, args.steps)
                rows.append(
                    {"tree": str(tree), "pool": pool, "repeat": repeat, "load": load, **found}
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    text = report(args, argv, trees, rows)
    print(text, end="")
    if args.out is not None:
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
        args.out.with_suffix(".md").write_text(text)


def report(args: Any, argv: list[str] | None, trees: list[Path], rows: list[dict[str, Any]]) -> str:
    command = " ".join(["python benchmarks/live_phase_ab.py", *(argv or sys.argv[1:])])
    lines = [
        "# The live phase, paired in-process runs (issue 90)",
        "",
        f"`{command}`; {os.cpu_count()} cores, one torch thread; load average at each "
        "child's start in the JSON beside this file. Seconds: medians over the repeats.",
        "",
        "| tree | pool | live | drift | gate | drift+live+gate | forward floor (records) "
        "| ratio to floor |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for tree in trees:
        for pool in sorted({r["pool"] for r in rows}):
            mine = [r for r in rows if r["tree"] == str(tree) and r["pool"] == pool]
            if not mine:
                continue
            med = {k: statistics.median(r["phases"].get(k, 0.0) for r in mine)
                   for k in ("live", "drift", "gate")}  # fmt: skip
            three = statistics.median(
                sum(r["phases"].get(k, 0.0) for k in ("live", "drift", "gate")) for r in mine
            )
            floor = statistics.median(r["forward"] for r in mine)
            lines.append(
                f"| {tree.name} | {pool:,} | {med['live']:.3f} | {med['drift']:.3f} | "
                f"{med['gate']:.3f} | {three:.3f} | {floor:.3f} ({mine[0]['scored']:,}) | "
                f"{three / floor:.1f}x |"
            )
    for tree in trees:
        live = {
            pool: statistics.median(
                r["phases"]["live"] for r in rows if r["tree"] == str(tree) and r["pool"] == pool
            )
            for pool in sorted({r["pool"] for r in rows})
        }
        pools = sorted(live)
        if len(pools) > 1:
            lines.append("")
            lines.append(
                f"{tree.name}: live at {pools[-1]:,} over live at {pools[0]:,}: "
                f"{live[pools[-1]] / live[pools[0]]:.2f}x"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
