"""kill -9 a real fit() run at every rename of its last step's saves, again and again.

Each kill runs ``tests/infrastructure/training/last_step_child.py`` (a tiny fp32 run of
10 steps, a checkpoint every 5, resumed), which SIGKILLs itself just before the N-th
rename into its checkpoint folder; N cycles over every rename of step 10's periodic save
and end-of-run save (and so the moment between them). After each kill, counted:

- unloadable: checkpoints in the folder that ``load_checkpoint`` refuses;
- temps_after_start: ``.tmp-*`` files left after the next run started and ended;
- stall: the second run after the kill trained fewer than its 10 steps.

::

    python benchmarks/last_step_kills.py --kills 20 --out benchmarks/results/last_step_kills.md
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint

CHILD = Path(__file__).resolve().parents[1] / "tests/infrastructure/training/last_step_child.py"
STEPS = 10


def _child(folder: Path, kill_at: int) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(CHILD), str(folder), str(STEPS), str(kill_at)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def _steps_run(run: subprocess.CompletedProcess[str]) -> int:
    if run.returncode != 0:
        raise RuntimeError(f"a run after the kill failed: {run.stderr[-1000:]}")
    line = next(x for x in run.stdout.splitlines() if x.startswith("result "))
    return int(json.loads(line.removeprefix("result "))["steps_run"])


def _points(work: Path) -> list[int]:
    clean = _child(work / "clean", 0)
    last = f"ckpt-{STEPS:010d}"
    return [
        int(x.split()[1])
        for x in clean.stdout.splitlines()
        if x.startswith("replace ") and x.split()[2].startswith(last)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        points = _points(work)
        for i in range(args.kills):
            kill_at = points[i % len(points)]
            folder = work / f"kill-{i}"
            killed = _child(folder, kill_at)
            unloadable = 0
            for path in CheckpointManager(folder).checkpoints():
                try:
                    load_checkpoint(path)
                except CheckpointError:
                    unloadable += 1
            temps_at_kill = len(list(folder.glob(".tmp-*")))
            first = _steps_run(_child(folder, 0))
            temps_after = len(list(folder.glob(".tmp-*")))
            second = _steps_run(_child(folder, 0))
            rows.append(
                {
                    "kill": i + 1,
                    "before_rename": kill_at,
                    "killed_rc": killed.returncode,
                    "unloadable": unloadable,
                    "temps_at_kill": temps_at_kill,
                    "temps_after_start": temps_after,
                    "first_steps": first,
                    "second_steps": second,
                    "stall": int(second < STEPS),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    totals = {k: sum(r[k] for r in rows) for k in ("unloadable", "temps_after_start", "stall")}
    killed = sum(1 for r in rows if r["killed_rc"] == -9)
    lines = [
        "# Kills at every rename of a run's last-step saves",
        "",
        f"`python benchmarks/last_step_kills.py --kills {args.kills}`, "
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{time.monotonic() - started:.0f} s. Renames of step {STEPS}'s saves (1-based, "
        f"of the run's renames): {points}.",
        "",
        f"kills (SIGKILL, rc -9): {killed} of {len(rows)}; stalls: {totals['stall']}; "
        f"unloadable checkpoints: {totals['unloadable']}; temp files after the next start: "
        f"{totals['temps_after_start']}.",
        "",
        "| kill | before rename | temps at kill | unloadable | temps after start | "
        "1st run steps | 2nd run steps |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kill']} | {r['before_rename']} | {r['temps_at_kill']} | {r['unloadable']} "
            f"| {r['temps_after_start']} | {r['first_steps']} | {r['second_steps']} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
