"""The options of `genesis-fp16 bench`, importable without torch so that --help is quick."""

from __future__ import annotations

import argparse
from pathlib import Path

from genesis_fp16.bench.config import RUNNERS, SIZES, TINY_RUNNERS, TINY_SIZES

# Where a run writes unless --out-dir says otherwise: a fresh folder per run, named by its
# UTC start time, so that no run replaces another's files (or the committed ones, which
# live in COMMITTED_OUT and are written only when --out-dir names it).
RUNS_ROOT = Path("bench-runs")
COMMITTED_OUT = Path("benchmarks/results")
# fp16 matmuls have no native CPU kernels (10-100x slower than fp32): fewer steps there.
CPU_FP16_WARMUP, CPU_FP16_STEPS = 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options shared by `genesis-fp16 bench` and `benchmarks/run.py`."""
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
