"""SIGKILL `train AGENT --resume` at random moments, each followed by a resume: what the
candidate folders hold after (issue 93's "after kills" case).

A first model is trained (plain ``train``). Then each of ``--kills`` lives runs ``train
AGENT --resume --steps S`` (a forced run: on unchanged data a plain one is up to date)
and is killed at a random moment (``kill_loop.py``'s: a random own step, or for one in
four a random time from its start, in start-up, training or judging), and is followed
by ``train AGENT --resume --steps 2`` to its end, as the issue did. After each resume
and at the end it lists the candidate folders with their verdicts; a candidate without
one is left unfinished, and the history bound is the served model plus
``GENESIS_FP16_SERVED_HISTORY_KEEP`` (5), plus the newest ``INCONCLUSIVE_KEEP`` (2)
inconclusive ones, which pruning keeps whatever their age. Rejected and closed
(undecided) candidates are kept ``GENESIS_FP16_REJECTED_KEEP_DAYS``; ``--keep-days`` sets
it (0, as the issue's test, prunes them after each run)::

    python benchmarks/kill_history.py --agent se_darwin --kills 8 --steps 60

``--scaffold`` runs a plugin made by the product's own command instead of an installed
agent: ``genesis-fp16 new-agent AGENT`` writes its package, ``pip install --no-deps
--no-build-isolation --target`` installs it into a folder of the run's own, and that folder
goes first on the train processes' PYTHONPATH, so its entry point is found and the venv
is left as it was::

    python benchmarks/kill_history.py --agent kill_scaffold --scaffold --kills 8
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from kill_loop import Moment, _candidates, _env, _life

from genesis_fp16_infrastructure.agent_folder.candidates import INCONCLUSIVE_KEEP, read_verdict


def _train(args: argparse.Namespace, data: Path, folder: Path, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "genesis_fp16", "train", args.agent, "--data", str(data)]
    command += ["--precision", args.precision, "--seed", "0", "--checkpoint-dir", str(folder)]
    return [*command, "--json", *extra]


def _verdicts(folder: Path) -> list[dict[str, Any]]:
    """Each candidate folder, oldest first: its name, outcome (None: none yet) and reason."""
    rows = []
    for candidate in _candidates(folder):
        verdict = read_verdict(candidate)
        outcome = None if verdict.outcome is None else str(verdict.outcome)
        rows.append({"candidate": candidate.name, "outcome": outcome, "reason": verdict.reason})
    return rows


def _install_scaffold(agent: str, work: Path, env: dict[str, str]) -> dict[str, str]:
    """`new-agent AGENT`'s package installed under ``work``/site: ``env`` with that folder
    first on PYTHONPATH (the venv is not touched; its setuptools builds the package)."""
    made = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "new-agent", agent, "--out", str(work), "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        sys.exit(f"new-agent {agent} exited {made.returncode}: {made.stderr.strip()}")
    package = json.loads(made.stdout)["folder"]
    site = work / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    pip += ["--no-build-isolation", "--no-input", "--target", str(site), package]
    installed = subprocess.run(pip, env=env, capture_output=True, text=True)
    if installed.returncode != 0:
        sys.exit(f"pip install of {package} exited {installed.returncode}: {installed.stderr}")
    path = [str(site), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(path)}


def _run(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command[3:5])} exited {done.returncode}: {done.stderr[-400:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="se_darwin")
    parser.add_argument(
        "--scaffold", action="store_true", help="make AGENT with new-agent, install it aside"
    )
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60, help="each killed life's --steps")
    parser.add_argument("--count", type=int, default=600, help="records of generated data")
    parser.add_argument("--max-delay", type=float, default=20.0, help="a timed kill's bound")
    parser.add_argument("--time-share", type=float, default=0.25, help="share of timed kills")
    parser.add_argument("--keep-days", default="0", help="GENESIS_FP16_REJECTED_KEEP_DAYS")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    lines: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        env = {**_env(work), "GENESIS_FP16_REJECTED_KEEP_DAYS": args.keep_days}
        if args.scaffold:
            env = _install_scaffold(args.agent, work / "plugin", env)
        generated = subprocess.run(
            [
                *(sys.executable, "-m", "genesis_fp16", "data", "generate", args.agent),
                *("--out", str(work / "data"), "--count", str(args.count), "--seed", "0"),
                "--json",
            ],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        data = Path(json.loads(generated.stdout)["path"])  # rlhf_ppo's task file, a pool
        folder = work / "ck"
        first = _run(_train(args, data, folder), env)
        lines.append({"first_model": (first.get("gate") or {}).get("outcome")})
        life = _train(args, data, folder, "--resume", "--steps", str(args.steps), "--json-progress")
        for kill in range(1, args.kills + 1):
            timed = rng.random() < args.time_share
            moment = Moment(
                rng.uniform(0.0, args.max_delay) if timed else None,
                None if timed else rng.randint(1, args.steps - 1),
                None,
                0.0,
            )
            _, reached, _, why = _life(life, env, moment)
            killed = {"kill": kill, "moment": why or "ended first", "reached": reached}
            killed["candidates_after_kill"] = len(_candidates(folder))
            stopped = [v["candidate"] for v in _verdicts(folder) if v["outcome"] is None]
            resumed = _run(_train(args, data, folder, "--resume", "--steps", "2"), env)
            extra = resumed.get("extra") or {}
            source = extra.get("resumed_from")
            ended = Path(resumed["checkpoint"]) if resumed.get("checkpoint") else None
            after = {v["candidate"]: v for v in _verdicts(folder)}
            killed |= {
                # candidate/ckpt-N.pt: whose checkpoint the resume continued (None: none)
                "resumed_from": source and f"{Path(source).parent.name}/{Path(source).name}",
                "resume_candidate": extra.get("candidate"),
                # candidate/ckpt-N.pt: where the resume ended (every agent's result says it)
                "resume_checkpoint": ended and f"{ended.parent.name}/{ended.name}",
                # each candidate the kill left without a verdict, after the resume: its
                # outcome and reason (None: still none), or "pruned" (gone with its verdict)
                "stopped_then": {
                    name: (after[name]["outcome"], after[name]["reason"])
                    if name in after
                    else "pruned"
                    for name in stopped
                },
                "resume_gate": (resumed.get("gate") or {}).get("outcome"),
                "candidates": len(_candidates(folder)),
                "unfinished": sum(v["outcome"] is None for v in _verdicts(folder)),
            }
            print(json.dumps(killed), flush=True)
            lines.append(killed)
        verdicts = _verdicts(folder)
        summary = {
            "agent": args.agent,
            "scaffold": args.scaffold,
            "kills": args.kills,
            "steps": args.steps,
            "keep_days": args.keep_days,
            "candidate_folders": len(verdicts),
            "bound": 1 + 5,
            # pruning keeps the newest INCONCLUSIVE_KEEP inconclusive ones whatever their age
            "bound_with_inconclusive": 1 + 5 + INCONCLUSIVE_KEEP,
            "unfinished": [v["candidate"] for v in verdicts if v["outcome"] is None],
            "outcomes": dict(Counter(str(v["outcome"]) for v in verdicts)),
            "undecided_reasons": [v["reason"] for v in verdicts if v["outcome"] == "undecided"],
        }
    print(json.dumps(summary), flush=True)
    if args.out is not None:
        args.out.write_text("\n".join(json.dumps(x) for x in [*lines, summary]) + "\n")


if __name__ == "__main__":
    main()
