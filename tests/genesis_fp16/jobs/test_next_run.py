"""The next run's precision (decide()'s answer to the planned request) and scale (read from
the served model: an agent with a served-model pointer, se_darwin's candidates, is read
where the pointer points)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from checkpoint_state import checkpoint_state

from genesis_fp16.jobs.run_request import expected_precision, next_loss_scale
from genesis_fp16.plugin_api import PrecisionRequest
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedEntry, ServedPointer
from genesis_fp16_infrastructure.agent_folder.pointer import write_pointer
from genesis_fp16_infrastructure.api import Calibration
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.precision_names import INITIAL_LOSS_SCALE
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training.precision.decide import decide
from genesis_fp16_infrastructure.training.reports import Measured


def _state(used: str, scale: float) -> dict[str, Any]:
    return checkpoint_state(10, scale=scale, precision=("auto", used))


def test_fp16_reads_its_scale_from_the_served_candidate_not_the_empty_agent_folder(
    tmp_path: Path,
) -> None:
    """The agent's folder holds only served.json and candidates/: an fp16 next run's scale
    is the served candidate's checkpoint's."""
    paths = AgentFolder(tmp_path, "se_darwin")
    candidate = paths.checkpoint_dir / "candidates" / "c1"
    saved = CheckpointManager(candidate).save(_state("fp16", 512.0))
    relative = str(saved.relative_to(paths.checkpoint_dir))
    write_pointer(paths.checkpoint_dir, ServedPointer(ServedEntry(id="c1", checkpoint=relative)))
    assert next_loss_scale(paths, "fp16") == 512.0


def test_a_broken_pointer_reads_the_agent_folder_and_says_so(tmp_path: Path) -> None:
    """A pointer naming a checkpoint that is gone: the agent's own folder is read (here
    empty: the initial scale), no exception reaches the job."""
    paths = AgentFolder(tmp_path, "se_darwin")
    paths.checkpoint_dir.mkdir(parents=True)
    write_pointer(paths.checkpoint_dir, ServedPointer(ServedEntry(id="x", checkpoint="gone.pt")))
    assert next_loss_scale(paths, "fp16") == INITIAL_LOSS_SCALE


def test_auto_on_the_gauge_is_what_decide_answers_not_the_last_checkpoint(tmp_path: Path) -> None:
    """A measured auto: undecided until a measurement is kept, then decide()'s answer from
    it (the floor applied), whatever precision the newest checkpoint was trained in."""
    paths = AgentFolder(tmp_path, "se_darwin")
    CheckpointManager(paths.checkpoint_dir).save(_state("fp16", 512.0))
    request = PrecisionRequest("auto", mode="measure", cache=paths.calibration_path)
    assert expected_precision(request, "cpu") is None
    assert math.isnan(next_loss_scale(paths, None))  # undecided: the scale unknown
    rows = (
        Measured("fp32", "eager", 2.0, 2.0, 2.0, 3),
        Measured("bf16", "eager", 1.0, 1.0, 1.0, 3),
    )
    kept = Calibration("bf16", "measured", rows, {}, {}, 0.1)
    paths.calibration_path.parent.mkdir(parents=True, exist_ok=True)
    paths.calibration_path.write_text(json.dumps(kept.to_json()))
    assert expected_precision(request, "cpu") == "bf16"
    floored = replace(request, floor="fp32", floor_reason="remembered")
    assert expected_precision(floored, "cpu") == "fp32"
    assert (
        expected_precision(replace(request, mode="rule"), "cpu")
        == decide(PrecisionRequest("auto"), "cpu").used
    )
