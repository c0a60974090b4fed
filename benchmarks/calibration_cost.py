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
"""

from __future__ import annotations

import argparse
import json
import platform
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--records", type=int, default=1955)
    parser.add_argument("--grow", type=int, default=5)
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("--bf16-native", action="store_true")
    parser.add_argument("--out", type=Path, help="default: results/calibration_cost_DEVICE.json")
    args = parser.parse_args()
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
