"""`genesis-fp16 bench`: fp32 vs bf16 vs fp16 (and TF32 on CUDA), ours against the peers."""

from __future__ import annotations

import argparse
import json
import math
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
    parser.add_argument(
        "--json",
        action="store_true",
        help="progress on stderr; end stdout with one JSON object (the rows and the files)",
    )
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
    stream = sys.stderr if args.json else sys.stdout  # --json: stdout is the object alone

    rows, csv_path = run_benchmark(
        options, command, progress=lambda line: print(line, file=stream, flush=True)
    )
    files = {kind: str(csv_path.with_suffix(f".{kind}")) for kind in ("csv", "png", "md")}
    if args.json:
        print(json.dumps({"rows": [_plain(row) for row in rows], "files": files}))
        return 0
    print(markdown_table(rows))
    print(f"wrote {files['csv']}, {files['png']} and {files['md']}")
    return 0


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A row as strict JSON: a non-finite number (a diverged row's loss) as null."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
