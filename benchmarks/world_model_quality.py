"""How well the SE-Darwin world model ranks attempts at its defaults, against the best the
features allow, on generated pools of 500, 5,000 and 20,000 records.

    python benchmarks/world_model_quality.py [--sizes 500,5000,20000] [--precisions fp32,bf16,fp16]

For each pool: `SEDarwinPlugin.train` at its defaults (early stopping, sized splits) in
each precision on the CPU, and an L2-regularised logistic regression (LBFGS) on the same
encoded features of the same training part, scored on the same held-out part: the
reference "what these features allow". Writes a Markdown table to stdout.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from agents.se_darwin.plugin import SEDarwinPlugin
from agents.se_darwin.task import SEDarwinTask, TaskOptions
from infrastructure.data.readers import read_trajectories
from infrastructure.plugin_api import TrainRequest
from infrastructure.world_model.metrics import auc


def logistic_reference(task: SEDarwinTask, l2: float) -> float:
    """Held-out AUC of a logistic regression fitted on the task's train+validation part."""
    x = torch.cat([task.train_data.x, task.validation_data.x]).double()
    y = torch.cat([task.train_data.success, task.validation_data.success]).double()
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    x = (x - mean) / std
    w = torch.zeros(x.shape[1], dtype=torch.double, requires_grad=True)
    b = torch.zeros((), dtype=torch.double, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = x @ w + b
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
        loss = loss + l2 * w.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    held = (task.eval_data.x.double() - mean) / std
    with torch.no_grad():
        return auc(held @ w + b, task.eval_data.success)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,5000,20000")
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(
        "| records | precision | held-out | AUC [95% interval] | logistic AUC | gap | "
        "best step / steps | stop | seconds |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            plugin = SEDarwinPlugin()
            data = plugin.generate_sample_data(Path(tmp), size, args.seed)
            task = SEDarwinTask(read_trajectories(data), TaskOptions(), args.seed)
            reference = max(logistic_reference(task, l2) for l2 in (1e-4, 1e-3, 1e-2))
            for precision in args.precisions.split(","):
                started = time.monotonic()
                result = plugin.train(
                    TrainRequest(
                        agent="se_darwin",
                        precision=precision,
                        precision_reason="quality benchmark",
                        state_dir=Path(tmp),
                        checkpoint_dir=Path(tmp) / f"ckpt-{precision}",
                        data_path=data,
                        seed=args.seed,
                        resume=False,
                    )
                )
                seconds = time.monotonic() - started
                early = result.extra["early_stop"]
                ev = result.eval
                print(
                    f"| {size} | {result.precision_used} | {int(ev['examples'])} | "
                    f"{ev['auc']:.3f} [{ev['auc_ci_low']:.3f}, {ev['auc_ci_high']:.3f}] | "
                    f"{reference:.3f} | {ev['auc'] - reference:+.3f} | "
                    f"{early['best_step']} / {result.steps} | {early['stop_reason'][:40]} | "
                    f"{seconds:.0f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
