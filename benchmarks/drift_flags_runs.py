"""se_darwin's judged runs in one resident-like process, each run's gate verdict and
drift report printed as JSON lines: run under two trees (``PYTHONPATH``), the lines are
compared with ``diff`` (issue 90: the same verdicts and drift flags, timings aside).

A first model on ``--records`` records (seed 99), then three runs, each after a file of
``--new`` records sorting last: clean (seed 3099), every new record's generation x10
(seed 4099), every new record written by another agent (seed 5099); each request keeps
``--keep-mib`` in memory from run to run, as the daemon's resident run process does.

    python benchmarks/drift_flags_runs.py --records 2000 --new 300 > flags.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.api import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.judging.run import run_plugin


def edit_record(name: str, record: dict[str, Any]) -> None:
    """The drift tests' edits (tests/.../drift_edits.py): generation x10, or another agent."""
    if name == "generation_x10":
        record["generation"] = 10 * record["generation"]
    elif name == "agent_qa":
        record["agent_name"] = "qa"


STEPS = [
    ("clean", 3099, "none"),
    ("generation_x10", 4099, "generation_x10"),
    ("agent_qa", 5099, "agent_qa"),
]


def _arrive(data: Path, name: str, pool: dict[str, Any]) -> None:
    target = data / name
    target.write_text(json.dumps(pool))
    past = time.time() - 120  # older than the record cache's racy window
    os.utime(target, (past, past))


def _run(work: Path, data: Path, keep: int) -> dict[str, Any]:
    ck = work / "ck"
    pointer = read_pointer(ck) if ck.exists() else None
    request = TrainRequest(
        agent="se_darwin",
        precision="fp32",  # type: ignore[arg-type]
        precision_reason="benchmark",
        state_dir=work / "state",
        checkpoint_dir=ck,
        data_path=data,
        steps=60,
        seed=3,
        keep_in_memory_bytes=keep,
        snapshot=AgentSnapshot(None, pointer=pointer, data=DataCheck(scan_files(data)[0])),
    )
    result = run_plugin(plugin, request)
    gate = result.gate
    return {
        "outcome": None if gate is None else str(gate.outcome),
        "reason": None if gate is None else gate.reason,
        "drift": None if result.drift is None else result.drift.to_json(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--new", type=int, default=300)
    parser.add_argument("--keep-mib", type=int, default=1024)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    keep = args.keep_mib * 2**20
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        _arrive(data, "pool-0.json", generate_pool(args.records, 99))
        print(json.dumps({"run": "first", **_run(work, data, keep)}), flush=True)
        for k, (name, seed, edit) in enumerate(STEPS, start=1):
            pool = generate_pool(args.new, seed)
            for record in pool["trajectories"].values():
                edit_record(edit, record)
            _arrive(data, f"pool-{k}.json", pool)
            print(json.dumps({"run": name, **_run(work, data, keep)}), flush=True)


if __name__ == "__main__":
    main()
