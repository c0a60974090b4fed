"""One SE-Darwin run through the plugin's judged run, as the tests of this folder start it:
in process (:func:`train`) or as a user types it (:func:`train_cli`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cli_fork import run_cli

from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.judging.run import run_plugin


def train(data: Path, ckpt: Path, precision: str = "fp32", **fields: object) -> TrainResult:
    """A judged run of the plugin (``run_plugin``: gate, watch and pointer) on ``data``
    into ``ckpt``: 20 steps, seed 3, fresh unless ``fields`` (any TrainRequest field:
    steps, seed, resume, options...) say otherwise."""
    request = TrainRequest(
        agent="se_darwin",
        precision=precision,
        precision_reason="test",
        state_dir=ckpt.parent,
        checkpoint_dir=ckpt,
        data_path=data,
        **{"steps": 20, "seed": 3, "resume": False, **fields},  # type: ignore[arg-type]
    )
    return run_plugin(plugin, request)


ROOT = Path(__file__).resolve().parents[4]


def cli_env(cwd: Path) -> dict[str, str]:
    """A user's environment for a command in ``cwd``: no setting of ours, the state
    folder under ``cwd``, and this tree's packages first (an editable install of another
    checkout is not read)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.pop("ENABLE_FP16_TRAINING", None)
    env.update(GENESIS_FP16_STATE_DIR=str(cwd / "state"), GENESIS_FP16_LOG_LEVEL="WARNING")
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / p) for p in ("", "agents", "infrastructure"))
    return env


def train_cli(cwd: Path, data: Path | None, *args: str) -> dict[str, Any]:
    """``genesis-fp16 train se_darwin --precision fp32 [--data DATA] --json`` in ``cwd``
    (state and checkpoints under it; no data: the sample the command generates in the
    state folder), its JSON result; it must exit 0."""
    command = ["train", "se_darwin", "--precision", "fp32"]
    command += [] if data is None else ["--data", str(data)]
    command += ["--checkpoint-dir", str(cwd / "ck"), "--json", *args]
    proc = run_cli(command, cwd=cwd, env=cli_env(cwd), timeout=300)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result
