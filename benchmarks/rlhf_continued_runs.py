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

``--daemon`` takes the product path instead: one real ``genesis-fp16 serve`` per seed,
rlhf_ppo alone (fp32, scheduled daily and not at start, as ``daemon_judging_cost.py``
starts it), and before each run a new task file replaces the one the daemon reads
(``GENESIS_FP16_AGENTS__RLHF_PPO__DATA_PATH``), then ``genesis-fp16 run rlhf_ppo``; each
row is read from the daemon's own ``training run finished`` line, with the gate's paired
interval on the loss difference (candidate - served) where the gate reports one::

    python benchmarks/rlhf_continued_runs.py --daemon --seeds 0,1 --count 2000 --runs 6

``--summarize TABLE...`` reads tables ``--daemon`` wrote and prints issue 93's figures
per seed: the continued runs' verdicts, the served policy's reward after run 1 and after
the last, and the change between with its 95% interval (see ``reward_change``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from daemon_judging_cost import _batch, _env, _finished, _runs

from genesis_fp16_infrastructure.judging.gate import Z_95

Z_TWO_SIDED_95 = statistics.NormalDist().inv_cdf(0.975)


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


def daemon_runs(
    seed: int, count: int, runs: int, steps: int | None = None, port: int = 19534
) -> list[dict[str, Any]]:
    """The rows of one seed from one daemon's runs (its ``GENESIS_FP16_SEED``): a new task
    file (``count`` prompts, seed ``seed * 1000 + run``) before each; ``steps`` overrides
    the default budget."""
    with tempfile.TemporaryDirectory(prefix="rlhf-daemon-") as tmp:
        folder = Path(tmp)
        env = _env("rlhf_ppo", folder)
        env["GENESIS_FP16_METRICS_PORT"] = str(port)
        env["GENESIS_FP16_SEED"] = str(seed)  # the runs' seed, as train --seed S sets it
        if steps is not None:
            env["GENESIS_FP16_AGENTS__RLHF_PPO__STEPS"] = str(steps)

        def new_task(run: int) -> None:
            if run > 0:  # the run before, as it finished: kept in stdout if this one overruns
                done = _finished(folder / "daemon.log", "rlhf_ppo")[run - 1]
                print(json.dumps(daemon_row(seed, run - 1, done)), flush=True)
            _batch("rlhf_ppo", folder, env, count, seed * 1000 + run)

        finished = _runs("rlhf_ppo", folder, env, runs, before=new_task)
    return [daemon_row(seed, run, record) for run, record in enumerate(finished)]


def daemon_row(seed: int, run: int, record: dict[str, Any]) -> dict[str, Any]:
    """One run's row from its ``training run finished`` record."""
    gate = record.get("gate") or {}
    losses = [
        (gate.get(side) or {}).get("losses", {}).get("loss") for side in ("candidate", "served")
    ]
    kept = losses[0] if gate.get("outcome") == "promoted" else losses[1]
    return {
        "seed": seed,
        "run": run,
        "verdict": gate.get("outcome"),
        "steps": record.get("steps"),
        "candidate_loss": losses[0],
        "served_loss": losses[1],
        "difference": _interval(gate.get("reason") or ""),
        "served_reward": None if kept is None else 1 - kept,
        "wall_seconds": record.get("wall_seconds"),
        "reason": gate.get("reason"),
    }


def _interval(reason: str) -> str | None:
    """The gate's paired interval on candidate - served loss, as its reason says it
    (``worse by LOW to HIGH (95%)``); None where it gives none (the first model)."""
    found = re.search(r"worse by (\S+) to (\S+) \((\d+)%\)", reason)
    return None if found is None else f"{found[1]} to {found[2]} ({found[3]}%)"


def reward_change(rows: list[dict[str, Any]]) -> tuple[float, float, float]:
    """The change of the served policy's expected reward from after run 1 to after the
    last run, with its 95% interval: each promoted run k > 1 replaced the served model,
    and its gate measured the paired loss difference on its own new episodes (mean
    +- 1.645 s.e.: one-sided 95% at each end); the runs' episodes are independent draws of
    the same task, so the differences add, their variances too. Not promoted: the served
    model stayed, no change."""
    mean = variance = 0.0
    for row in rows:
        found = re.fullmatch(r"(\S+) to (\S+) \(95%\)", row["difference"] or "")
        if row["run"] < 2 or row["verdict"] != "promoted" or found is None:
            continue
        low, high = float(found[1]), float(found[2])
        mean -= (low + high) / 2  # a loss difference: the reward's is its negative
        variance += ((high - low) / (2 * Z_95)) ** 2
    half = Z_TWO_SIDED_95 * math.sqrt(variance)
    return mean, mean - half, mean + half


def read_table(text: str) -> list[dict[str, Any]]:
    """The rows of a table ``--daemon`` wrote (the fields ``summary`` reads)."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("| ").split(" | ")]
        if len(cells) != 9 or not cells[0].isdigit():
            continue
        rows.append(
            {
                "seed": int(cells[0]),
                "run": int(cells[1]),
                "verdict": cells[2],
                "difference": None if cells[6] == "—" else cells[6],
                "served_reward": float(cells[7]),
            }
        )
    return rows


def summary(rows: list[dict[str, Any]], count: int) -> str:
    """Issue 93's Done-when figures for one seed's runs (run 0 the first model)."""
    continued = [r for r in rows if r["run"] > 0]
    verdicts = [r["verdict"] for r in continued]
    first, last = continued[0], continued[-1]
    change, low, high = reward_change(rows)
    return (
        f"| {count:,} | {rows[0]['seed']} | {verdicts.count('promoted')} | "
        f"{verdicts.count('inconclusive')} | {verdicts.count('rejected')} | "
        f"{first['served_reward']:.6f} | {last['served_reward']:.6f} | "
        f"{change:+.6f} ({low:+.6f} to {high:+.6f}) |"
    )


def _daemon_table(rows: list[dict[str, Any]], count: int) -> str:
    lines = [
        f"rlhf_ppo continued runs in a daemon, {count} prompts per task file, fp32",
        "",
        "| seed | run | verdict | steps | candidate loss | served loss | "
        "candidate - served loss, gate's interval | served policy's reward after | run s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        reward = "—" if r["served_reward"] is None else f"{r['served_reward']:.6f}"
        lines.append(
            f"| {r['seed']} | {r['run']} | {r['verdict']} | {r['steps']} | "
            f"{r['candidate_loss']} | {r['served_loss'] or '—'} | {r['difference'] or '—'} | "
            f"{reward} | {r['wall_seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=6, help="the first model and its continuations")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--daemon", action="store_true", help="a real daemon's runs")
    parser.add_argument("--steps", type=int, help="--daemon: steps per run (default budget)")
    parser.add_argument("--port", type=int, default=19534, help="--daemon: its metrics port")
    parser.add_argument("--summarize", type=Path, nargs="+", help="tables --daemon wrote")
    args = parser.parse_args(argv)
    if args.summarize:
        print(
            "| prompts | seed | promoted | inconclusive | rejected | reward after run 1 | "
            "after the last | change after run 1, 95% |\n" + "| --- " * 8 + "|"
        )
        for path in args.summarize:
            text = path.read_text()
            count = int(re.search(r"(\d+) prompts", text)[1])  # type: ignore[index]
            print(summary(read_table(text), count))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.daemon:
        found = [daemon_runs(s, args.count, args.runs, args.steps, args.port) for s in seeds]
        table = _daemon_table([r for rows in found for r in rows], args.count)
    else:
        rows = [r for s in seeds for r in continued_runs(s, args.count, args.runs)]
        table = _table(rows, args.count)
    print(table)
    if args.out is not None:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
