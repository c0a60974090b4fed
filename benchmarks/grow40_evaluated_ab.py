"""A run's held-out logits kept for the gate, and the gate's scoring taking them: two
trees' ``recipes/retrain/evaluated.py`` in one process, interleaved (issue 90: the work
of a later run that grows with the pool).

At each ``--pools`` size P, a held-out fifth of P records (their judged-id hashes, drawn
at random, and a logit each) is kept as a run keeps its evaluation (``keep_evaluated``)
and then asked for as the gate asks (``evaluated_logit``: the records evaluated, in the
order evaluated). Timed: the two calls together, in CPU milliseconds of this thread
(``thread_clock.thread_ms``), medians of ``--repeats`` with their min-max, the trees
alternating. ``same``: both trees' answers equal bit for bit::

    python benchmarks/grow40_evaluated_ab.py --pools 10000,100000 --repeats 41 \\
        --before /work/main
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from ab_table import load_average, print_table
from other_tree import other_modules
from thread_clock import thread_ms

from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_infrastructure.api import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.recipes.retrain import evaluated


def _request(folder: Path) -> TrainRequest:
    """A request of a daemon's plan (its snapshot): what the kept logits are kept for."""
    return TrainRequest(
        agent="se_darwin",
        precision="fp32",  # type: ignore[arg-type]
        precision_reason="benchmark",
        state_dir=folder,
        checkpoint_dir=folder / "ck",
        data_path=folder / "data",
        snapshot=AgentSnapshot(data=DataCheck(None)),
    )


def _case(pool: int, folder: Path) -> dict[str, Any]:
    """The held-out fifth's hashes and logits, a checkpoint file and a model."""
    rng = np.random.default_rng(pool)
    rows = pool // 5
    checkpoint = folder / f"model-{pool}.pt"
    checkpoint.write_bytes(rng.bytes(4096))
    return {
        "hashes": rng.integers(0, 2**63, rows, dtype=np.int64).view(np.uint64),
        "logit": torch.from_numpy(rng.normal(size=rows).astype(np.float32)),
        "checkpoint": checkpoint,
        "model": torch.nn.Linear(49, 64),
    }


def _chain(module: ModuleType, request: TrainRequest, case: dict[str, Any]) -> Any:
    """Kept as the run keeps them, then taken as the gate takes them."""
    weights = module.weights_digest(case["model"])
    module.keep_evaluated(request, case["checkpoint"], case["hashes"], (case["logit"], weights))
    return module.evaluated_logit(request, case["checkpoint"], case["model"], case["hashes"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    args = parser.parse_args(argv)
    trees = {
        "before": other_modules(args.before, ["recipes.retrain.evaluated"])[
            "recipes.retrain.evaluated"
        ],
        "this": evaluated,
    }
    load = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        request = _request(folder)
        for pool in (int(p) for p in args.pools.split(",")):
            case = _case(pool, folder)
            spent: dict[str, list[float]] = {name: [] for name in trees}
            out: dict[str, Any] = {}
            for k in range(args.repeats):
                for name in list(trees) if k % 2 == 0 else list(trees)[::-1]:
                    module = trees[name]
                    ms, out[name] = thread_ms(lambda m=module, c=case: _chain(m, request, c))
                    spent[name].append(ms)
            same = all(v is not None for v in out.values()) and (
                out["before"].numpy().tobytes() == out["this"].numpy().tobytes()
            )
            for name in trees:
                each = spent[name]
                rows.append(
                    f"| {pool:,} | {pool // 5:,} | {name} | {statistics.median(each):.3f} | "
                    f"{min(each):.3f}-{max(each):.3f} | {same} |"
                )
    print_table(load, ["pool", "held out", "tree", "keep + take ms", "min-max", "same"], rows)


if __name__ == "__main__":
    main()
