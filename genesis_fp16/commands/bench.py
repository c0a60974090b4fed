"""`genesis-fp16 bench`: fp32 vs bf16 vs fp16 (and TF32 on CUDA), ours against the peers."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from genesis_fp16.cli import UsageError


def register(subparsers: Any) -> None:
    from genesis_fp16.bench.arguments import add_arguments

    parser = subparsers.add_parser(
        "bench",
        help="benchmark precisions and trainers on the world model",
        description=(
            "Train the SE-Darwin world model at each size and precision with this project's "
            "trainer, a hand-written torch.amp loop, Accelerate and Lightning Fabric; write a "
            "CSV, a PNG and a markdown table under --out-dir. See docs/benchmarks.md."
        ),
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from genesis_fp16.bench.run import markdown_table, options_from_args, run_benchmark
    from genesis_fp16.config.extras import bench_missing

    missing = bench_missing()
    if missing is not None:  # before minutes of measuring, not at the plot after them
        raise UsageError(f"bench: {missing}")
    try:
        options = options_from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    command = shlex.join(["genesis-fp16", *sys.argv[1:]])
    rows, csv_path = run_benchmark(options, command, progress=lambda line: print(line, flush=True))
    print(markdown_table(rows))
    print(f"wrote {csv_path}, {csv_path.with_suffix('.png')} and {csv_path.with_suffix('.md')}")
    return 0
