"""kill -9 a real `genesis-fp16 train` again and again, then let it finish: what is lost.

Each life runs ``train se_darwin --resume`` with the default checkpoint cadence (or
``--checkpoint-steps``), reports every step on stdout (``--json-progress``, log interval
1), and is killed after a random delay. Lost steps of a kill = the last step the life
reported minus the step of the newest checkpoint on disk after the kill. At the end an
unbroken run of the same request is compared with the finished one, weights bit for bit::

    python benchmarks/kill_loop.py --kills 20 --count 5000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint


def _env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(
        GENESIS_FP16_STATE_DIR=str(workdir / "state"),
        GENESIS_FP16_LOG_LEVEL="WARNING",
        GENESIS_FP16_LOG_INTERVAL="1",
    )
    return env


def _command(
    data: Path, checkpoints: Path, every: int | None, options: list[str] | None = None
) -> list[str]:
    command = [sys.executable, "-m", "genesis_fp16", "train", "se_darwin", "--data", str(data)]
    command += ["--precision", "fp32", "--seed", "0", "--checkpoint-dir", str(checkpoints)]
    command += ["--resume", "--json", "--json-progress"]
    if every is not None:
        command += ["--checkpoint-steps", str(every)]
    for option in options or []:
        command += ["--option", option]
    return command


def _newest(checkpoints: Path) -> int:
    files = CheckpointManager(checkpoints).checkpoints()
    return int(files[-1].name[5:15]) if files else 0


def _life(command: list[str], env: dict[str, str], delay: float) -> tuple[int, bool]:
    """(last step reported, whether it finished before the kill)."""
    child = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    last = [0]

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith('{"progress"'):
                last[0] = int(json.loads(line)["progress"]["step"])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        child.wait(timeout=delay)
        reader.join(5)
        return last[0], True
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
        child.wait()
        reader.join(5)
        return last[0], False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--count", type=int, default=5000, help="records of generated data")
    parser.add_argument("--checkpoint-steps", type=int, default=None)
    parser.add_argument("--min-delay", type=float, default=4.0)
    parser.add_argument("--max-delay", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--option", action="append", default=[], help="se_darwin option KEY=VALUE (repeatable)"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        env = _env(work)
        data = work / "data"
        subprocess.run(
            [
                *(sys.executable, "-m", "genesis_fp16", "data", "generate"),
                *("--agent", "se_darwin", "--out", str(data), "--count", str(args.count)),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        broken = work / "broken"
        lost: list[int] = []
        kills = 0
        while kills < args.kills:
            reached, finished = _life(
                _command(data, broken, args.checkpoint_steps, args.option),
                env,
                rng.uniform(args.min_delay, args.max_delay),
            )
            if finished:
                print(f"the run finished after {kills} kills")
                break
            kills += 1
            lost.append(max(0, reached - _newest(broken)))
            print(f"kill {kills}: reached step {reached}, newest checkpoint {_newest(broken)}")
        final = subprocess.run(
            _command(data, broken, args.checkpoint_steps, args.option),
            env=env,
            capture_output=True,
            text=True,
        )
        whole = subprocess.run(
            _command(data, work / "whole", args.checkpoint_steps, args.option),
            env=env,
            capture_output=True,
            text=True,
        )
        ends = [json.loads(p.stdout.strip().splitlines()[-1]) for p in (final, whole)]
        a, b = (load_checkpoint(Path(e["checkpoint"])) for e in ends)
        equal = all(torch.equal(a[keys.MODEL][k], b[keys.MODEL][k]) for k in b[keys.MODEL])
    print(
        json.dumps(
            {
                "kills": kills,
                "lost_steps_median": statistics.median(lost) if lost else None,
                "lost_steps_max": max(lost) if lost else None,
                "lost_steps_total": sum(lost),
                "final_steps": ends[0]["steps"],
                "unbroken_steps": ends[1]["steps"],
                "final_checkpoint": Path(ends[0]["checkpoint"]).name,
                "unbroken_checkpoint": Path(ends[1]["checkpoint"]).name,
                "weights_bitwise_equal": equal,
            }
        )
    )


if __name__ == "__main__":
    main()
