"""kill -9 a real daemon mid-run, again and again: does its run's child die with it, and when?

Each round starts ``genesis-fp16 serve`` (process isolation) in the same state folder,
waits for the run's child, lets it train (or hang) a random 1-6 s without printing
(log interval 10^6), kills the daemon with SIGKILL and times the child's end: the seconds
from the kill until the child is gone (not a zombie), and whether a busy child wrote a
checkpoint on its way out; beside it, how long a restarted daemon takes from its start
to its first run's child (the earliest a second writer could appear). ``busy`` rounds train
se_darwin; ``hung`` rounds run tests/fixtures' fixture_hanging, which never returns::

    python benchmarks/orphan_kill.py --busy 10 --hung 5
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = [
    ROOT / "tests" / "fixtures" / "plugins",
    ROOT / "tests" / "fixtures" / "isolation_plugins",
]
ENTRY_POINT = Path(sys.executable).parent / "genesis-fp16"

sys.path.insert(0, str(ROOT / "tests" / "genesis_fp16"))
from daemon_harness import child_pids, free_port, process_alive  # noqa: E402 (the tests' probes)


def _env(agent: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GENESIS_FP16_", "ENABLE_FP16_"))
    }
    env.update(
        PYTHONPATH=os.pathsep.join(str(p) for p in FIXTURES),
        GENESIS_FP16_PLUGIN_ALLOWLIST=agent,
        GENESIS_FP16_SCHEDULE="3600",
        GENESIS_FP16_STEPS_PER_RUN="1000000",
        GENESIS_FP16_LOG_INTERVAL="1000000",
        GENESIS_FP16_SAMPLE_COUNT="2000",
        GENESIS_FP16_DEVICE="cpu",
        GENESIS_FP16_LOG_FORMAT="json",
        GENESIS_FP16_METRICS_PORT=str(free_port()),
    )
    return env


def _checkpoints(state: Path) -> set[Path]:
    return set(state.rglob("ckpt-*")) | set(state.rglob("step-*.pt"))


def _round(workdir: Path, agent: str) -> dict[str, object]:
    started = time.monotonic()
    with (workdir / "daemon.log").open("ab") as log:
        daemon = subprocess.Popen(
            [str(ENTRY_POINT), "serve"], cwd=workdir, env=_env(agent), stdout=log, stderr=log
        )
    deadline = time.monotonic() + 120
    while not (children := child_pids(daemon.pid)):
        if time.monotonic() > deadline or daemon.poll() is not None:
            raise SystemExit(f"no run's child within 120 s: see {workdir / 'daemon.log'}")
        time.sleep(0.05)
    child = children[0]
    first_child = time.monotonic() - started
    time.sleep(random.uniform(1, 6) + 4)  # the child's start-up (~4 s here), then 1-6 s
    before = _checkpoints(workdir / "state")
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()
    killed = time.monotonic()
    while process_alive(child) and time.monotonic() < killed + 300:
        time.sleep(0.02)
    seconds = time.monotonic() - killed
    alive = process_alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)  # the round's verdict is taken; clean up
    return {
        "agent": agent,
        "child": child,
        "seconds": seconds,
        "survived": alive,
        "new_checkpoint": bool(_checkpoints(workdir / "state") - before),
        "daemon_start_to_child": first_child,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--busy", type=int, default=10)
    parser.add_argument("--hung", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    random.seed(args.seed)
    rounds = [("se_darwin", "busy")] * args.busy + [("fixture_hanging", "hung")] * args.hung
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for agent, kind in rounds:
            workdir = Path(tmp) / kind
            workdir.mkdir(exist_ok=True)
            result = _round(workdir, agent)
            results.append((kind, result))
            print(kind, result, flush=True)
    for kind in ("busy", "hung"):
        mine = [r for k, r in results if k == kind]
        if not mine:
            continue
        seconds = [float(str(r["seconds"])) for r in mine]
        starts = [float(str(r["daemon_start_to_child"])) for r in mine]
        print(
            f"{kind}: {len(mine)} kills, {sum(bool(r['survived']) for r in mine)} children "
            f"survived 300 s; seconds from the kill to the child's end: median "
            f"{statistics.median(seconds):.2f}, min {min(seconds):.2f}, max {max(seconds):.2f}; "
            f"{sum(bool(r['new_checkpoint']) for r in mine)} wrote a checkpoint after the kill; "
            f"a daemon's start to its first child: min {min(starts):.2f} s"
        )


if __name__ == "__main__":
    main()
