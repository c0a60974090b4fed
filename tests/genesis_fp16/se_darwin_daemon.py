"""What the real-daemon tests of se_darwin's served model share: its pool written as a
scheduled run may read it, its daemon settings, its run counter, the `model` command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from cli_fork import run_cli
from daemon_harness import DaemonProcess, daemon_env

AGENT = "se_darwin"
RUNS = "genesis_fp16_training_runs_total"


def write_pool(path: Path, pool: dict[str, Any]) -> None:
    """Write atomically: a scheduled run never reads half a file."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(pool))
    partial.replace(path)


def se_darwin_env(pool: Path, **extra: str) -> dict[str, str]:
    """se_darwin alone on ``pool``, fp32, 3 epochs a run, scheduled every second."""
    return {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
        "GENESIS_FP16_AGENTS__SE_DARWIN__DATA_PATH": str(pool),
        "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "fp32",
        "GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_EPOCHS": "3",
        "GENESIS_FP16_SCHEDULE": "1",
        **extra,
    }


def runs(daemon: DaemonProcess, outcome: str) -> float:
    """se_darwin's runs of ``outcome`` so far, from the daemon's /metrics."""
    return daemon.sample(RUNS, agent=AGENT, outcome=outcome) or 0.0


def model_command(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`genesis-fp16 model ...` against the daemon's state folder (its working folder's)."""
    return run_cli(
        ["model", *args],
        cwd=daemon.workdir,
        env=daemon_env({}, fixtures=False),
        timeout=120,
    )
