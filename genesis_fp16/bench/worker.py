"""Run one configuration in this (fresh) process: config JSON on stdin, row JSON on stdout.

A process of its own gives the configuration its own CPU peak RSS (a lifetime peak:
``peak_rss_mib``, this process's VmHWM) and its own Accelerate singleton and TF32
flags.
"""

from __future__ import annotations

import json
import sys

from genesis_fp16.bench.config import BenchConfig
from genesis_fp16.bench.measure import run_config

ROW_MARKER = "BENCH_ROW "  # libraries print banners on stdout; the row is the marked line


def main() -> int:
    config = BenchConfig.from_json(sys.stdin.read())
    row = run_config(config, isolated=True)
    print(ROW_MARKER + json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
