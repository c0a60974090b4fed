"""`genesis-fp16 bench`: fp32 vs bf16 vs fp16 (and TF32 on CUDA), ours against the peers."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from genesis_fp16.bench.config import (
    COMMITTED_OUT,
    CPU_FP16_STEPS,
    CPU_FP16_WARMUP,
    RUNNERS,
    RUNS_ROOT,
    SIZES,
    TINY_RUNNERS,
    TINY_SIZES,
)
from genesis_fp16.cli import UsageError, strict_json


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark precisions and trainers on the world model",
        description=(
            "Train the SE-Darwin world model at each size and precision with this project's "
            "trainer, a hand-written torch.amp loop, Accelerate and Lightning Fabric; write a "
            "CSV, a PNG and a markdown table under --out-dir. See docs/benchmarks.md."
        ),
    )
    parser.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda")
    parser.add_argument(
        "--sizes",
        default=None,
        help=f"of {','.join(SIZES)}; default: all ({','.join(TINY_SIZES)} with --tiny)",
    )
    parser.add_argument(
        "--precisions", default="all", help="fp32,bf16,fp16 (+ tf32 on cuda); default: all"
    )
    parser.add_argument(
        "--runners",
        default=None,
        help=f"of {','.join(RUNNERS)}; default: all on cuda, the first four on a CPU "
        f"({','.join(TINY_RUNNERS)} with --tiny)",
    )
    parser.add_argument(
        "--batch-sizes",
        default=None,
        help="comma-separated, e.g. 64,8192 (default: 64,8192 on cuda, 64 on a CPU)",
    )
    parser.add_argument("--batch-size", type=int, default=None, help="one batch size")
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="untimed steps first (default 4: graph warm-up, capture; --tiny 1)",
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="timed steps (default 20, --tiny 5)"
    )
    parser.add_argument(
        "--fp16-warmup", type=int, default=None, help=f"CPU default {CPU_FP16_WARMUP}"
    )
    parser.add_argument(
        "--fp16-steps", type=int, default=None, help=f"CPU default {CPU_FP16_STEPS}"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help=f"where the CSV, PNG and table go (default: a fresh {RUNS_ROOT}/<UTC time>/; "
        f"the committed results are replaced only when this names {COMMITTED_OUT})",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="no subprocess per configuration (always so on cuda, where the peak memory "
        "is torch's own count; on a CPU the peak RSS is then not measured)",
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="a smoke test under a minute on a CPU: each size scaled down, one size, ours "
        "and hand, in one process",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads per row")
    parser.add_argument("--tag", default="", help="suffix for the result file names")
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
        print(json.dumps(strict_json({"rows": rows, "files": files})))
        return 0
    print(markdown_table(rows))
    print(f"wrote {files['csv']}, {files['png']} and {files['md']}")
    return 0
