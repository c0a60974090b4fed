"""What the drift report costs against one forward pass of the served model (issue 90).

    python benchmarks/drift_cost.py                                  # 100,000 records, 25% new
    python benchmarks/drift_cost.py --records 2000 --new 0.01 --repeats 1

Issue 90's floor for judging: "drift, live and gate together <= 3x one forward pass of
the served model over the records they score". This measures the drift part of it, in
one process: a generated pool of ``--records`` records, the served model trained by the
product's judged run (``run_plugin``, se_darwin's default options, ``--steps`` steps)
on all but a seeded ``--new`` share of them; then, on the whole pool read as a run
reads it, ``drift_report`` (the numbers given, as the run's task gives them) and the
served model's forward pass (``WorldModelPredictor``: an ensemble's members all run)
over every labelled record of the pool, inputs encoded beforehand. Each is timed
``--repeats`` times, interleaved; the median is kept. The report and the ratio go to
stdout as one JSON line; ``--out`` also writes it under that folder, named by machine.
Timings on a loaded machine mean nothing: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.plugin_api import PrecisionRequest, TrainRequest
from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import record_id_hash
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.judging.run import run_plugin
from genesis_fp16_infrastructure.recipes.retrain.drift import drift_report
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint
from genesis_fp16_infrastructure.world_model.features import Categorical, numeric_rows
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor


def _pools(folder: Path, records: int, new: float, seed: int) -> tuple[Path, Path]:
    """The served model's part of a generated pool and the whole pool, as two files."""
    pool = generate_pool(records, seed=seed)
    ids = sorted(pool["trajectories"], key=lambda k: record_id_hash(f"{seed}:{k}"))
    cut = records - max(1, int(records * new))
    served = {**pool, "trajectories": {k: pool["trajectories"][k] for k in ids[:cut]}}
    paths = folder / "served.json", folder / "grown.json"
    paths[0].write_text(json.dumps(served))
    paths[1].write_text(json.dumps(pool))
    return paths


def _served_model(data: Path, folder: Path, steps: int, seed: int) -> Path:
    request = TrainRequest(
        agent="se_darwin",
        precision=PrecisionRequest("fp32"),
        precision_reason="benchmark",
        state_dir=folder,
        checkpoint_dir=folder / "ckpt",
        data_path=data,
        steps=steps,
        seed=seed,
    )
    result = run_plugin(plugin, request)
    assert result.checkpoint is not None, result
    return Path(result.checkpoint)


def _seconds(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def measure(records: int, new: float, repeats: int, steps: int, seed: int) -> dict[str, Any]:
    """Drift's seconds and one forward pass's, on the same pool (module docstring)."""
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory() as tmp:
        served_path, grown_path = _pools(Path(tmp), records, new, seed)
        checkpoint = _served_model(served_path, Path(tmp), steps, seed)
        seen = fingerprint_of(read_trajectories(served_path, keep_text=False).columns)
        columns = read_trajectories(grown_path, keep_text=False).columns
        predictor = WorldModelPredictor.of_state(load_checkpoint(checkpoint))
    numeric = numeric_rows(columns, columns.labelled)  # the run's task hands drift these
    x = predictor.encoder.encode_parts(Categorical.of_rows(columns, columns.labelled), numeric)

    def forward() -> None:
        with torch.no_grad():
            predictor.model(x).success_logit.float().sum().item()

    drift_times, forward_times = [], []
    for _ in range(repeats):  # interleaved: a load that comes and goes hits both alike
        drift_times.append(_seconds(lambda: drift_report(columns, seen, seed, numeric)))
        forward_times.append(_seconds(forward))
    report = drift_report(columns, seen, seed, numeric)
    drift_s, forward_s = statistics.median(drift_times), statistics.median(forward_times)
    return {
        "records": records,
        "labelled": len(columns.labelled),
        "new_share": new,
        "new_records": None if report is None else report.new_records,
        "flagged": None if report is None else list(report.flagged),
        "threads": torch.get_num_threads(),
        "drift_seconds": round(drift_s, 6),
        "forward_seconds": round(forward_s, 6),
        "drift_over_forward": round(drift_s / forward_s, 3) if forward_s else None,
        "drift_times": [round(t, 6) for t in drift_times],
        "forward_times": [round(t, 6) for t in forward_times],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--new", type=float, default=0.25, help="share of the pool new")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="the served model's steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="a results folder")
    args = parser.parse_args(argv)
    if not 0 < args.new < 1:
        parser.error(f"--new must be a share between 0 and 1, got {args.new}")
    row = measure(args.records, args.new, args.repeats, args.steps, args.seed)
    line = json.dumps(row)
    sys.stdout.write(line + "\n")
    if args.out is not None:
        from genesis_fp16.bench.measure import machine_slug

        args.out.mkdir(parents=True, exist_ok=True)
        name = f"drift_cost_{machine_slug(torch.device('cpu'))}.json"
        (args.out / name).write_text(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
