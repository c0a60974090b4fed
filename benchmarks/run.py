#!/usr/bin/env python3
"""Run the precision benchmark: `genesis-fp16 bench`, the same code and options.

python benchmarks/run.py                  # full run, results in a fresh bench-runs/<UTC time>/
python benchmarks/run.py --out-dir benchmarks/results   # replace the committed results
python benchmarks/run.py --help
"""

from __future__ import annotations

import sys
from pathlib import Path

# Runs from a checkout without installing the package, too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from genesis_fp16.cli import main

if __name__ == "__main__":
    sys.argv[1:1] = ["bench"]  # its rows' command column says `genesis-fp16 bench ...`
    raise SystemExit(main())
