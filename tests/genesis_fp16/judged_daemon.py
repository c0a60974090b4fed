"""What the real-daemon tests of judged agents share: the scaffold's agent installed the
way pip would (its package and an entry point's dist-info on the daemon's path), its
data written as a scheduled run may read it, its settings, runs and `model` command."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

from cli_fork import run_cli
from daemon_harness import DaemonProcess, daemon_env

from genesis_fp16.scaffold import write_agent

AGENT = "my_judged"
RUNS = "genesis_fp16_training_runs_total"
STEPS = 400  # enough for the scaffold's linear model to fit y = 2 sum(x) (+ a shift)


def install_scaffold(root: Path) -> Path:
    """`new-agent my_judged`'s package and an entry point for it under ``root``: the
    folder to put on the daemon's PYTHONPATH (what `pip install -e` gives, without pip)."""
    package = write_agent(AGENT, root / "src")
    info = package / "my_judged-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-judged\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[genesis_fp16.agents]\n{AGENT} = {AGENT}:plugin\n")
    return package


def write_records(path: Path, count: int, seed: int, shift: float = 0.0, shuffle: bool = False):
    """``count`` records of y = 2 sum(x) + ``shift`` (+ noise), atomically; ``shuffle``:
    the labels of other records (they say nothing of x)."""
    rng = random.Random(seed)
    xs = [[round(rng.uniform(-1, 1), 6) for _ in range(4)] for _ in range(count)]
    ys = [round(2 * sum(x) + shift + rng.gauss(0, 0.01), 6) for x in xs]
    if shuffle:
        rng.shuffle(ys)
    partial = path.with_suffix(".partial")
    lines = [json.dumps({"x": x, "y": y}) + "\n" for x, y in zip(xs, ys, strict=True)]
    partial.write_text("".join(lines))
    partial.replace(path)


def judged_env(package: Path, data: Path, **extra: str) -> dict[str, str]:
    """The scaffold's agent alone on ``data``, fp32, STEPS a run, scheduled every second."""
    return {
        "PYTHONPATH": str(package),
        "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
        "GENESIS_FP16_AGENTS__MY_JUDGED__DATA_PATH": str(data),
        "GENESIS_FP16_AGENTS__MY_JUDGED__PRECISION": "fp32",
        "GENESIS_FP16_AGENTS__MY_JUDGED__STEPS": str(STEPS),
        "GENESIS_FP16_SCHEDULE": "1",
        **extra,
    }


def runs(daemon: DaemonProcess, outcome: str, agent: str = AGENT) -> float:
    return daemon.sample(RUNS, agent=agent, outcome=outcome) or 0.0


def finished(daemon: DaemonProcess, agent: str = AGENT) -> list[dict[str, Any]]:
    """The agent's finished runs, as the daemon logged them."""
    return [e for e in daemon.events("training run finished") if e.get("agent") == agent]


def gate_outcomes(daemon: DaemonProcess, agent: str = AGENT) -> list[str]:
    return [str(e["gate"]["outcome"]) for e in finished(daemon, agent) if e.get("gate")]


def gate_outcomes_since(
    daemon: DaemonProcess, mark: int, against: str, agent: str = AGENT
) -> list[str]:
    """The gate verdicts, after the daemon's first ``mark`` log lines, of the agent's runs
    that judged their candidate against ``against`` (the pinned model): a run under way
    at an operator's pin judges against the model served at its start, and may end
    promoted or inconclusive; which run saw the pin is told by the model it was judged
    against, not by when it logged its start (its plan reads the pointer after that)."""
    return [
        str(e["gate"]["outcome"])
        for e in daemon.logs()[mark:]
        if e.get("event") == "training run finished"
        and e.get("agent") == agent
        and e.get("gate")
        and e["gate"].get("served_id") == against
    ]


def model_command(
    daemon: DaemonProcess, package: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`genesis-fp16 model ...` against the daemon's state folder, the agent installed."""
    return run_cli(
        ["model", *args],
        cwd=daemon.workdir,
        env=daemon_env({"PYTHONPATH": str(package)}, fixtures=False),
        timeout=120,
    )
