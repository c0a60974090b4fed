"""A later judged run's phases, base tree against a branch, in-process and paired (issue
90: kept numeric rows and kept outputs found in proportion to what is new).

For each pool P and tree, a child process (the tree's ``genesis_fp16``, ``agents`` and
``infrastructure`` first on ``PYTHONPATH``) serves a first se_darwin model on P - n
records as a resident run process does (``keep_in_memory_bytes`` 1 GiB), then n new
records arrive (``zz-pool-3099.json``: a file sorting last, as ``run_anatomy.py
--new-after`` names it) and the measured run trains and is judged: its phases from its
own ``TrainResult.phases``. Beside them, what must not change: the SHA-256 of each
numeric-rows tensor ``KeptNumeric.rows`` gave the run's encode, of the weights of every
checkpoint left, and the gate's verdict. Trees alternate round by round (A B, B A). The
data is written once per pool under ``--data``::

    python benchmarks/kept_keys_ab.py --pools 10000,100000 --new 1000 --rounds 2 \\
        --trees /work/wt/b28,. --out benchmarks/results/kept_keys_ab_90
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

from other_tree import tree_child

CHILD = r"""
import hashlib, json, os, shutil, sys, tempfile, time
from pathlib import Path
import numpy as np, torch
from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.api import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.judging.run import run_plugin
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint
from genesis_fp16_infrastructure.world_model import kept_numeric
pool, new, cache = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
torch.set_num_threads(1)
cache.mkdir(parents=True, exist_ok=True)
for name, count, seed in (("pool-99.json", pool - new, 99), ("zz-pool-3099.json", new, 3099)):
    if not (cache / name).exists():
        write_pool(cache / f"g{seed}", count, seed).rename(cache / name)
def arrive(source, data):
    target = data / source.name
    shutil.copy(source, target)
    past = time.time() - 120  # older than the record cache's racy window
    os.utime(target, (past, past))
def request(work, data):
    ck = work / "state" / "ck"
    pointer = read_pointer(ck) if ck.exists() else None
    return TrainRequest(agent="se_darwin", precision="fp32", precision_reason="benchmark",
        state_dir=work / "state", checkpoint_dir=ck, data_path=data, steps=200, seed=3,
        keep_in_memory_bytes=1024 * 2**20,
        snapshot=AgentSnapshot(None, pointer=pointer, data=DataCheck(scan_files(data)[0])))
seen = []
real = kept_numeric.KeptNumeric.rows
def rows(self, columns, asked=None):
    got = real(self, columns, asked)
    seen.append(hashlib.sha256(np.ascontiguousarray(got.numpy()).tobytes()).hexdigest()[:16])
    return got
kept_numeric.KeptNumeric.rows = rows
# The thread's CPU seconds (time.thread_time: a loaded host's waits left out) of what this
# work touches: the scorings' _logits less their model forwards (the kept rows, the input
# keys, the kept outputs found), and the encode's KeptNumeric.rows outside a scoring.
from genesis_fp16_infrastructure.recipes.retrain import scoring
cpu = {"scoring": 0.0, "forward": 0.0, "encode_rows": 0.0}
inside = []
def timed(name, real, nested=False):
    def call(*a, **k):
        if nested and inside:
            return real(*a, **k)
        inside.append(name)
        started = time.thread_time()
        try:
            return real(*a, **k)
        finally:
            cpu[name] += time.thread_time() - started
            inside.pop()
    return call
scoring._logits = timed("scoring", scoring._logits)
scoring._forward = timed("forward", scoring._forward)
kept_numeric.KeptNumeric.rows = timed("encode_rows", kept_numeric.KeptNumeric.rows, True)
with tempfile.TemporaryDirectory() as tmp:
    work = Path(tmp); data = work / "data"; data.mkdir()
    arrive(cache / "pool-99.json", data)
    run_plugin(plugin, request(work, data))
    arrive(cache / "zz-pool-3099.json", data)
    seen.clear()
    for k in cpu:
        cpu[k] = 0.0
    result = run_plugin(plugin, request(work, data))
    weights = hashlib.sha256()
    for f in sorted((work / "state" / "ck").rglob("*")):
        if f.suffix not in (".pt", ".ckpt", ".safetensors"):
            continue
        model = load_checkpoint(f).get("model")
        for k in sorted(model or {}):
            if torch.is_tensor(model[k]):
                weights.update(k.encode()); weights.update(model[k].numpy().tobytes())
    print(json.dumps({"phases": result.phases, "gate": [result.gate.outcome, result.gate.reason],
                      "rows": seen, "weights": weights.hexdigest()[:16],
                      "cpu": {"scoring less forward": cpu["scoring"] - cpu["forward"],
                              "encode rows": cpu["encode_rows"]}}))
"""
PHASES = ("read", "encode", "eval", "drift", "live", "gate")
CPU = ("scoring less forward", "encode rows")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _commit(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short=8", "HEAD"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", default=".")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "kept_keys_ab")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    rows: list[dict[str, Any]] = []
    for pool in (int(p) for p in args.pools.split(",")):
        for k in range(args.rounds):
            for tree in trees if k % 2 == 0 else trees[::-1]:
                load = _load()
                found = tree_child(tree, CHILD, pool, args.new, args.data / str(pool))
                rows.append({"tree": str(tree), "pool": pool, "round": k, "load": load, **found})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    text = report(argv, trees, rows)
    print(text, end="")
    if args.out is not None:
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
        args.out.with_suffix(".md").write_text(text)


def report(argv: list[str] | None, trees: list[Path], rows: list[dict[str, Any]]) -> str:
    command = " ".join(["python benchmarks/kept_keys_ab.py", *(argv or sys.argv[1:])])
    lines = [
        "# A later run's phases, trees paired in-process (issue 90: kept rows and outputs)",
        "",
        f"`{command}`; {os.cpu_count()} cores, one torch thread; the load average at each "
        "child's start is in the JSON beside this file. Seconds: medians over the rounds.",
        "",
        "| tree | commit | pool | " + " | ".join(PHASES) + " | but train | train |",
        "| --- | --- | --- | " + " | ".join("---" for _ in PHASES) + " | --- | --- |",
    ]
    for pool in sorted({r["pool"] for r in rows}):
        for tree in trees:
            mine = [r for r in rows if r["tree"] == str(tree) and r["pool"] == pool]
            if not mine:
                continue
            med = [statistics.median(r["phases"].get(p, 0.0) for r in mine) for p in PHASES]
            but = statistics.median(
                sum(v for k, v in r["phases"].items() if k != "train") for r in mine
            )
            train = statistics.median(r["phases"]["train"] for r in mine)
            lines.append(
                f"| {tree.name} | {_commit(tree)} | {pool:,} | "
                + " | ".join(f"{m:.3f}" for m in med)
                + f" | {but:.3f} | {train:.3f} |"
            )
    lines += [
        "",
        "CPU seconds of the thread (medians): the scorings' `_logits` less their forwards "
        "(kept rows, input keys, kept outputs found) and the encode's `KeptNumeric.rows`:",
        "",
        "| tree | pool | scoring less forward | encode rows | both |",
        "| --- | --- | --- | --- | --- |",
    ]
    for pool in sorted({r["pool"] for r in rows}):
        for tree in trees:
            mine = [r for r in rows if r["tree"] == str(tree) and r["pool"] == pool]
            if not mine or "cpu" not in mine[0]:
                continue
            got = [statistics.median(r["cpu"][k] for r in mine) for k in CPU]
            both = statistics.median(sum(r["cpu"].values()) for r in mine)
            lines.append(f"| {tree.name} | {pool:,} | {got[0]:.4f} | {got[1]:.4f} | {both:.4f} |")
    lines += ["", "What must not change, per pool (every tree's and round's run):", ""]
    for pool in sorted({r["pool"] for r in rows}):
        mine = [r for r in rows if r["pool"] == pool]
        rows_seen = {r["rows"][-1] if r["rows"] else "" for r in mine}
        weights = {r["weights"] for r in mine}
        verdicts = {json.dumps(r["gate"]) for r in mine}
        lines.append(
            f"- {pool:,}: encode's numeric rows {sorted(rows_seen)}, checkpoint weights "
            f"{sorted(weights)}, verdicts {len(verdicts)} distinct: {sorted(verdicts)}"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
