"""rlhf_ppo's continued runs: does each run the daemon makes, on a new clean task file,
continuing the served policy, get promoted by its own gate (issue 93)?

For each seed: a fresh state folder; `genesis-fp16 data generate rlhf_ppo` writes a new
task file per run (``--count`` prompts, seed ``seed * 1000 + run``), and
`genesis-fp16 train rlhf_ppo --data FILE --json` trains it at the default budget through
the judged run (the served policy continued into a new candidate, then the gate), as a
scheduled run of the daemon does. fp32, so that the verdicts do not depend on this host's
timing of auto. One row per run: the gate's verdict and both models' loss (1 - reward on
the task file's evaluation episodes)::

    python benchmarks/rlhf_continued_runs.py --seeds 0,1 --count 2000 --runs 6 \
        --out benchmarks/results/rlhf_continued_runs.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=3600,
    )


def continued_runs(seed: int, count: int, runs: int) -> list[dict[str, object]]:
    """The rows of one seed: the first model, then ``runs - 1`` continued runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(OMP_NUM_THREADS="1", GENESIS_FP16_LOG_LEVEL="WARNING")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env["GENESIS_FP16_STATE_DIR"] = str(work / "state")
        for run in range(runs):
            made = _cli(
                *("data", "generate", "rlhf_ppo", "--out", str(work / f"data{run}")),
                *("--count", str(count), "--seed", str(seed * 1000 + run)),
                env=env,
                cwd=work,
            )
            if made.returncode != 0:
                raise SystemExit(f"data generate failed: {made.stderr.strip()[-500:]}")
            data = made.stdout.strip().splitlines()[-1]
            done = _cli(
                *("train", "rlhf_ppo", "--data", data, "--json", "--precision", "fp32"),
                *("--seed", str(seed)),
                env=env,
                cwd=work,
            )
            if done.returncode != 0:
                raise SystemExit(f"train failed: {done.stderr.strip()[-500:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            gate = result.get("gate") or {}
            losses = [
                (gate.get(side) or {}).get("losses", {}).get("loss")
                for side in ("candidate", "served")
            ]
            rows.append(
                {
                    "seed": seed,
                    "run": run,
                    "verdict": gate.get("outcome"),
                    "steps": result["steps"],
                    "candidate_loss": losses[0],
                    "served_loss": losses[1],
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _table(rows: list[dict[str, object]], count: int) -> str:
    lines = [
        f"rlhf_ppo continued runs, {count} prompts per task file, default budget, fp32",
        "",
        "| seed | run | verdict | steps | candidate loss | served loss |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['run']} | {r['verdict']} | {r['steps']} | "
            f"{r['candidate_loss']} | {r['served_loss']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=6, help="the first model and its continuations")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [r for s in args.seeds.split(",") for r in continued_runs(int(s), args.count, args.runs)]
    table = _table(rows, args.count)
    print(table)
    if args.out is not None:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
