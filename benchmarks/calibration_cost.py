"""What a measured ``auto`` costs on se_darwin's own task, all in, cold and reused.

Builds se_darwin's world-model task on a generated pool (``--records``), then runs the
calibration a run runs (``training.run.calibration.calibrate``, 1 s deadline) twice in
one process on one cache file: cold (the process's one-time init, then everything the
calibration does) and warm (the kept table, its winner timed again). A third call on a
pool grown by ``--grow`` records shows the bucketed key holding. Prints one JSON object
and writes it under benchmarks/results/ with the command and the device::

    python benchmarks/calibration_cost.py --device cuda            # on a GPU host
    python benchmarks/calibration_cost.py --device cpu --bf16-native  # a CPU without it

``--bf16-native`` takes bf16 as native on a CPU that has none (its arithmetic is real,
emulated; only the "is it a candidate?" answer is forced), so that something is timed.
Read ``cold.seconds`` (<= budget_s plus one row: issue 66), ``cold.init_s`` (paid before
the clock, not calibration), ``cold.phases`` and ``warm.cached`` (true: reused).

``--paired AGENT`` compares the product's two paths instead (issue 91: rlhf_ppo's rows in
the daemon were once 25x ``train``'s): one real ``genesis-fp16 serve`` (AGENT alone, auto
precision, hourly and not at start, its runs in the CPU's resident run process) and
``genesis-fp16 train AGENT --json``, on one generated data file, ``--repeats`` pairs,
interleaved (train first in even pairs, the daemon first in odd ones). Each measures
afresh: the daemon's kept measurement is removed before its run, and each ``train`` has
a state folder of its own. One last daemon run keeps it (the later run's reuse). Each
row: the calibration's rows (median ms per step, p10-p90), ``seconds``, ``init_s`` and
the load average before it; the summary, each precision's median ratio daemon/train.
Both sides run at ``--threads`` torch threads (``OMP_NUM_THREADS``, 1 by default;
``default``: unset, torch's one per core, as a user's ``make run`` and ``train`` run)::

    python benchmarks/calibration_cost.py --paired rlhf_ppo --repeats 4 \
        --out benchmarks/results/calibration_paired_rlhf_ppo_cpu_COMMIT.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.plugin_api import PrecisionRequest
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.training import TrainerConfig
from genesis_fp16_infrastructure.training.precision import decide
from genesis_fp16_infrastructure.training.run import calibration as cal

RESULTS = Path(__file__).parent / "results"
PAIRED_PORT = 19537


def _task(folder: Path, records: int, device: str) -> WorldModelTask:
    path = folder / f"pool{records}.json"
    path.write_text(json.dumps(generate_pool(records, seed=3)))
    return WorldModelTask(read_trajectories(path), TaskOptions.from_mapping({}), 0, device)


def _said(found: cal.Calibration | str, wall: float) -> dict[str, Any]:
    if isinstance(found, str):  # why nothing was timed
        return {"nothing_timed": found, "wall_s": wall}
    return {
        "wall_s": round(wall, 4),
        "seconds": round(found.seconds, 4),
        "init_s": round(found.init_s, 4),
        "phases": dict(found.phases),
        "cached": found.cached,
        "chosen": f"{found.chosen} {found.execution}",
        "rows": [r.describe() for r in found.rows],
        "skipped": dict(found.skipped),
        "revalidated": found.revalidated,
        "remeasured": found.remeasured,
        "batch_key": found.key.get("batch"),
    }


def _load() -> str:
    """The load average (1, 5, 15 minutes), said before each calibration."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _rows(calibration: dict[str, Any]) -> dict[str, Any]:
    """A calibration record (the cache file's, or ``train --json``'s), said briefly."""
    return {
        "rows": {
            f"{r['precision']} {r['execution']}": [
                round(r["median_ms"], 3),
                round(r.get("p10_ms", 0.0), 3),
                round(r.get("p90_ms", 0.0), 3),
            ]
            for r in calibration["rows"]
        },
        "chosen": f"{calibration['chosen']} {calibration.get('execution', 'eager')}",
        "seconds": round(calibration["seconds"], 3),
        "init_s": round(calibration.get("init_s", 0.0), 3),
        "phases": calibration.get("phases", {}),
        "skipped": calibration.get("skipped", {}),
    }


def paired(agent: str, repeats: int, count: int, threads: str) -> dict[str, Any]:
    """``repeats`` interleaved pairs of calibrations, the daemon's and ``train``'s (the
    module docstring), then one daemon run that keeps the measurement. ``threads``: both
    sides' ``OMP_NUM_THREADS``, or ``default`` (unset: torch's own, one per core, as a
    user's ``make run`` and ``train`` have it)."""
    from daemon_judging_cost import _batch, _cli, _ended, _env, _finished
    from run_now_latency import _ready, _wait

    from genesis_fp16_infrastructure.api import AgentFolder

    with tempfile.TemporaryDirectory(prefix="calibration-paired-") as tmp:
        folder = Path(tmp)
        env = _env(agent, folder)
        env.pop("ENABLE_FP16_TRAINING")  # auto, measured: the daemon's default
        env["GENESIS_FP16_METRICS_PORT"] = str(PAIRED_PORT)
        env.pop("OMP_NUM_THREADS")
        if threads != "default":
            env["OMP_NUM_THREADS"] = threads
        _batch(agent, folder, env, count, 1)
        data = folder / "data" / ("" if agent == "se_darwin" else "task.json")
        kept = AgentFolder(folder / "state", agent).calibration_path
        log = folder / "daemon.log"
        pairs: list[dict[str, Any]] = []
        with log.open("wb") as out:
            daemon = subprocess.Popen(
                [sys.executable, "-m", "genesis_fp16", "serve"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait(lambda: _ready(f"http://127.0.0.1:{PAIRED_PORT}/readyz"), "the daemon", 180)
            runs = 0

            def daemon_run(keep: bool = False) -> dict[str, Any]:
                nonlocal runs
                if not keep:
                    kept.unlink(missing_ok=True)  # measured afresh, as train's is
                load = _load()
                _cli(env, "run", agent)
                _wait(lambda: _ended(log, agent, runs), f"{agent}'s daemon run", 900)
                runs += 1
                finished = _finished(log, agent)[-1]
                record = json.loads(kept.read_text())
                return {
                    "load_before": load,
                    **_rows(record),
                    "precision_reason": finished.get("precision_reason"),
                    "run_seconds": finished.get("wall_seconds"),
                }

            def train_run(index: int) -> dict[str, Any]:
                own = {**env, "GENESIS_FP16_STATE_DIR": str(folder / f"train-{index}")}
                load = _load()
                began = time.perf_counter()
                said = _cli(own, "train", agent, "--data", str(data), "--json")
                result = json.loads(said.strip().splitlines()[-1])
                return {
                    "load_before": load,
                    **_rows(result["precision_calibration"]),
                    "process_seconds": round(time.perf_counter() - began, 2),
                }

            for index in range(repeats):
                pair: dict[str, Any] = {
                    "order": "train first" if index % 2 == 0 else "daemon first"
                }
                for side in ("train", "daemon") if index % 2 == 0 else ("daemon", "train"):
                    pair[side] = train_run(index) if side == "train" else daemon_run()
                pairs.append(pair)
                print(json.dumps(pair), flush=True)
            later = daemon_run(keep=True)
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
        resident = [
            json.loads(line).get("event")
            for line in log.read_text(errors="replace").splitlines()
            if '"genesis_fp16.resident"' in line
        ]
    return {"pairs": pairs, "later_daemon_run": later, "resident_lines": resident}


def _ratios(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each row timed on both sides: its per-pair ratio daemon/train, and their median."""
    shared = set.intersection(*(set(p["daemon"]["rows"]) & set(p["train"]["rows"]) for p in pairs))
    summary: dict[str, Any] = {}
    for row in sorted(shared):
        ratios = [p["daemon"]["rows"][row][0] / p["train"]["rows"][row][0] for p in pairs]
        summary[row] = {
            "ratios": [round(r, 3) for r in ratios],
            "median_ratio": round(statistics.median(ratios), 3),
        }
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--records", type=int, default=1955)
    parser.add_argument("--grow", type=int, default=5)
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("--bf16-native", action="store_true")
    parser.add_argument("--out", type=Path, help="default: results/calibration_cost_DEVICE.json")
    parser.add_argument("--paired", metavar="AGENT", help="the daemon's runs against train's")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--count", type=int, default=2000, help="--paired: records generated")
    parser.add_argument("--threads", default="1", help="--paired: OMP_NUM_THREADS, or default")
    args = parser.parse_args()
    if args.paired:
        found = paired(args.paired, args.repeats, args.count, args.threads)
        result = {
            "command": " ".join(["python", *sys.argv]),
            "device": f"cpu ({platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores), torch {torch.__version__}, OMP_NUM_THREADS "
            f"{args.threads} on both sides",
            "daemon_over_train": _ratios(found["pairs"]),
            **found,
        }
        text = json.dumps(result, indent=2)
        print(text)
        (args.out or RESULTS / f"calibration_paired_{args.paired}.json").write_text(text + "\n")
        return 0
    if args.bf16_native:
        forced = decide.DeviceCapabilities("cpu", True, False, "benchmark: bf16 as native")
        detect = decide.detect_capabilities
        decide.detect_capabilities = lambda d: (  # type: ignore[assignment]
            forced if torch.device(d).type == "cpu" else detect(d)
        )
    config = TrainerConfig()
    out: dict[str, Any] = {"command": " ".join(["python", *sys.argv])}
    with tempfile.TemporaryDirectory() as tmp:
        folder, cache = Path(tmp), Path(tmp) / "precision_calibration.json"
        runs = [("cold", args.records), ("warm", args.records), ("grown", args.records + args.grow)]
        for label, records in runs:
            task = _task(folder, records, args.device)
            began = time.perf_counter()
            found = cal.calibrate(
                task, args.device, 0, config, PrecisionRequest(cache=cache, budget_s=args.budget)
            )
            out[label] = {"records": records, **_said(found, time.perf_counter() - began)}
    device = (
        torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor()
    )
    out["device"] = f"{args.device} ({device or platform.machine()}), torch {torch.__version__}"
    text = json.dumps(out, indent=2)
    print(text)
    name = "cuda" if args.device.startswith("cuda") else "cpu"
    target = args.out or RESULTS / f"calibration_cost_{name}.json"
    target.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
