"""How soon `genesis-fp16 run AGENT` starts the agent's run on a real daemon.

Starts `genesis-fp16 serve` in a temporary folder with both built-in agents (fp32, 4
steps, 200 samples, scheduled hourly and not at start: every run is one asked for), then
asks for runs one after another and times, by the daemon's own log timestamps:

- ``cli``: from launching the `run` command (its interpreter's start included) to the
  daemon's ``training run started`` line (the run planned, its child about to launch);
- ``file``: from the request file's creation (the daemon's side alone: its tick, taking
  the request, the scheduler's wake-up and the run's planning) to the same line.

Each run is waited out before the next is asked for. Prints one row per request and
the median and maximum of each kind::

    python benchmarks/run_now_latency.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from genesis_fp16.service.run_now import new_request

ENV = {
    "GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin,rlhf_ppo",
    "ENABLE_FP16_TRAINING": "false",
    "GENESIS_FP16_STEPS_PER_RUN": "4",
    "GENESIS_FP16_SAMPLE_COUNT": "200",
    "GENESIS_FP16_SCHEDULE": "3600",
    "GENESIS_FP16_RUN_AT_START": "false",
    "GENESIS_FP16_LOG_FORMAT": "json",
    "GENESIS_FP16_METRICS_PORT": "19531",
}


def _events(log: Path, event: str, agent: str) -> list[float]:
    """Unix times of the log's ``event`` lines for ``agent``."""
    times = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            record: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event and record.get("agent") == agent:
            times.append(datetime.fromisoformat(record["timestamp"]).timestamp())
    return times


def _wait(check: Any, what: str, timeout: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def _ask(folder: Path, env: dict[str, str], agent: str, kind: str) -> float:
    """Ask for one run of ``agent``; the seconds from asking to its start."""
    log = folder / "daemon.log"
    before = len(_events(log, "training run started", agent))
    finished = len(_events(log, "training run finished", agent))
    asked = time.time()
    if kind == "cli":
        command = [sys.executable, "-m", "genesis_fp16", "run", agent]
        subprocess.run(command, cwd=folder, env=env, check=True, capture_output=True)
    else:
        new_request(folder / "state", agent)  # nobody reads the answer: pruned later
    started = _wait(
        lambda: _events(log, "training run started", agent)[before:], "the run to start"
    )[0]
    _wait(lambda: len(_events(log, "training run finished", agent)) > finished, "the run's end")
    return started - asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="requests of each kind per agent")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(ENV)
    with tempfile.TemporaryDirectory(prefix="run-now-") as name:
        folder = Path(name)
        with (folder / "daemon.log").open("wb") as out:
            daemon = subprocess.Popen(
                [sys.executable, "-m", "genesis_fp16", "serve"],
                cwd=folder,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            url = f"http://127.0.0.1:{ENV['GENESIS_FP16_METRICS_PORT']}/readyz"
            _wait(lambda: _ready(url), "the daemon to be ready", 120)
            seconds: dict[str, list[float]] = {"cli": [], "file": []}
            for _ in range(args.rounds):
                for kind in ("cli", "file"):
                    for agent in ("se_darwin", "rlhf_ppo"):
                        took = _ask(folder, env, agent, kind)
                        seconds[kind].append(took)
                        print(f"{kind:<4}  {agent:<9}  {took:.3f} s", flush=True)
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
    for kind, values in seconds.items():
        print(
            f"{kind}: median {statistics.median(values):.3f} s, max {max(values):.3f} s "
            f"over {len(values)} requests"
        )


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


if __name__ == "__main__":
    main()
