"""A scaffold-made plugin continued over clean growths in a real daemon: is each run
promoted or inconclusive, never rejected (issue 93, item 5)?

    python benchmarks/scaffold_clean_growths.py [--seeds 0,1,2] [--records 300]
        [--growths 5] [--steps 400] > results.md

For each seed: `new-agent`'s plugin installed as pip would (tests/genesis_fp16/judged_daemon.py),
a real `genesis-fp16 serve` in a fresh folder, fp32; a first model on ``records`` clean
records (y = 2 sum(x) + noise), then ``growths`` times as many new clean records appended
(the same distribution, a new seed each), each followed by `genesis-fp16 run`. One row per
run: the gate's verdict as the daemon's ``training run finished`` line logged it, with its
reason (the comparison that decided). Writes a Markdown report to stdout.
"""

from __future__ import annotations

import argparse
import collections
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "genesis_fp16"), str(ROOT / "tests")]
from daemon_harness import DaemonProcess, start_daemon  # noqa: E402 (the tests' harness)
from judged_daemon import clean_growths  # noqa: E402


def _seed(seed: int, records: int, growths: int, steps: int) -> list[dict[str, object]]:
    """The gates of one seed's runs: the first model's, then each growth's."""
    started: list[DaemonProcess] = []
    with tempfile.TemporaryDirectory() as tmp:

        def start(env: dict[str, str]) -> DaemonProcess:
            started.append(start_daemon(Path(tmp), env, fixtures=False))
            return started[-1]

        try:
            return clean_growths(start, Path(tmp), records, growths, seed, steps)
        finally:
            for daemon in started:
                daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--growths", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    began = time.monotonic()
    commit = subprocess.run(  # the tree it runs from: read before the first run
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    counts: collections.Counter[str] = collections.Counter()
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for run, gate in enumerate(_seed(seed, args.records, args.growths, args.steps)):
            outcome, reason = str(gate["outcome"]), str(gate["reason"])
            counts[outcome] += run > 0  # the growths' verdicts (the first is "first")
            rows.append(f"| {seed} | {run or 'first'} | {outcome} | {reason[:220]} |")
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"# A scaffold plugin over clean growths, real daemon ({platform.processor() or 'cpu'})\n"
    )
    print(f"`python benchmarks/scaffold_clean_growths.py {' '.join(sys.argv[1:])}` at {commit},")
    print(f"fp32 on the CPU, {time.monotonic() - began:.0f} s, load average at the end")
    print(f"{' '.join(loadavg)}\n")
    print("- **growths**: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v))
    print("\n| seed | growth | verdict | reason |\n| --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
