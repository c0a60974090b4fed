"""What the real-daemon tests of judged agents share: the scaffold's agent installed the
way pip would (its package and an entry point's dist-info on the daemon's path), its
data written as a scheduled run may read it, its settings, runs and `model` command."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
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


def write_records(
    path: Path, count: int, seed: int, shift: float = 0.0, shuffle: bool = False
) -> None:
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


def append_records(path: Path, count: int, seed: int) -> None:
    """``count`` new clean records (``write_records``' distribution, ``seed``) appended
    to ``path``'s lines, atomically: the pool grows, its old lines stay as they were."""
    fresh = path.with_name(f"{path.stem}.fresh")
    write_records(fresh, count, seed)
    partial = path.with_suffix(".partial")
    partial.write_text(path.read_text() + fresh.read_text())
    fresh.unlink()
    partial.replace(path)


def run_now(daemon: DaemonProcess, env: dict[str, str]) -> None:
    """`genesis-fp16 run AGENT` in the daemon's folder, with its settings: the daemon
    starts a run now."""
    done = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "run", AGENT],
        cwd=daemon.workdir,
        env=daemon_env(env, fixtures=False),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def growth_env(package: Path, data: Path, steps: int = STEPS) -> dict[str, str]:
    """``judged_env`` with no schedule to speak of (each run is one `genesis-fp16 run`),
    ``steps`` a run, the caller's PYTHONPATH after the plugin's (its genesis_fp16)."""
    path = [str(package), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        **judged_env(package, data),
        "PYTHONPATH": os.pathsep.join(path),
        "GENESIS_FP16_AGENTS__MY_JUDGED__STEPS": str(steps),
        "GENESIS_FP16_SCHEDULE": "3600",
        "GENESIS_FP16_RUN_AT_START": "false",
    }


def _finished_after(daemon: DaemonProcess, seen: int) -> Callable[[], list[dict[str, Any]]]:
    """A check of the agent's finished runs after its ``seen`` first ones."""
    return lambda: finished(daemon)[seen:]


def clean_growths(
    start: Callable[[dict[str, str]], DaemonProcess],
    folder: Path,
    records: int,
    growths: int,
    seed: int,
    steps: int = STEPS,
    run_deadline: float = 300.0,
) -> list[dict[str, Any]]:
    """A first model on ``records`` clean records, then ``growths`` growths of as many
    clean records (new lines appended, the same distribution, new seeds), each followed
    by `genesis-fp16 run`: the gate of each of those runs, as the daemon's ``training run
    finished`` line logged it (first the first model's). ``start`` starts the daemon in
    ``folder`` with the environment it is given."""
    package = install_scaffold(folder / "plugin")
    data = folder / "records.jsonl"
    write_records(data, records, seed=seed * 1000)
    env = growth_env(package, data, steps)
    daemon = start(env)
    gates: list[dict[str, Any]] = []
    for growth in range(growths + 1):
        if growth:
            append_records(data, records, seed=seed * 1000 + growth)
        run_now(daemon, env)
        done = daemon.wait_for(_finished_after(daemon, growth), f"run {growth}", run_deadline)[0]
        assert done.get("gate"), done  # every run judged its candidate
        gates.append(done["gate"])
    return gates
