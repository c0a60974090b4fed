"""The next run's precision and scale, read from the served model: an agent with a
served-model pointer (se_darwin's candidates) is read where the pointer points."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from genesis_fp16.config.paths import AgentPaths
from genesis_fp16.runs.next_run import expected_next_run
from genesis_fp16_infrastructure.served import ServedPointer, write_pointer
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys


def _state(used: str, scale: float) -> dict[str, Any]:
    return {
        keys.SCHEMA: keys.SCHEMA_VERSION,
        keys.MODEL: {"w": torch.zeros(2)},
        keys.OPTIMIZER: [],
        keys.SCHEDULER: [],
        keys.SCALER: {"scale": scale, "_growth_tracker": 0},
        keys.PRECISION: {"requested": "auto", "used": used, "reason": "test"},
        keys.STEP: 10,
        keys.RNG: {},
        keys.CONFIG: {},
    }


def test_auto_reads_the_served_candidate_not_the_empty_agent_folder(tmp_path: Path) -> None:
    """The agent's folder holds only served.json and candidates/: auto's next precision
    and fp16 scale are the served candidate's checkpoint's, not 'undecided'."""
    paths = AgentPaths.for_agent(tmp_path, "se_darwin")
    candidate = paths.checkpoint_dir / "candidates" / "c1"
    saved = CheckpointManager(candidate).save(_state("fp16", 512.0))
    relative = str(saved.relative_to(paths.checkpoint_dir))
    write_pointer(paths.checkpoint_dir, ServedPointer({"id": "c1", "checkpoint": relative}))
    nxt = expected_next_run(paths, "auto")
    assert (nxt.precision, nxt.loss_scale, nxt.source) == ("fp16", 512.0, "checkpoint")


def test_a_broken_pointer_reads_the_agent_folder_and_says_so(tmp_path: Path) -> None:
    """A pointer naming a checkpoint that is gone: the agent's own folder is read (here
    empty: undecided), no exception reaches the job."""
    paths = AgentPaths.for_agent(tmp_path, "se_darwin")
    paths.checkpoint_dir.mkdir(parents=True)
    write_pointer(paths.checkpoint_dir, ServedPointer({"id": "x", "checkpoint": "gone.pt"}))
    assert expected_next_run(paths, "auto").source == "undecided"
