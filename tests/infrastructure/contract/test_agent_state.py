"""An agent's state folder read in one call: the guard's memory, the carried scale and the
resume point, each as its own module writes it; an unusable file is reported, not raised."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from checkpoint_state import checkpoint_state

from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedEntry, ServedPointer
from genesis_fp16_infrastructure.agent_folder.pointer import write_pointer
from genesis_fp16_infrastructure.contract.agent_snapshot import AgentSnapshot, read_snapshot
from genesis_fp16_infrastructure.folder import (
    AgentFolder,
)
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import carry_after_run
from genesis_fp16_infrastructure.training.precision.precision_memory import remember_demotions
from genesis_fp16_infrastructure.training.reports import Demotion


def _folder(root: Path) -> AgentFolder:
    return AgentFolder(root, "agent")


def _read(root: Path, resume: bool = True) -> AgentSnapshot:
    folder = _folder(root)
    return read_snapshot(folder, folder.checkpoint_dir if resume else None)


def _state(step: int) -> dict[str, Any]:
    return checkpoint_state(step, scale=512.0, precision=("fp16", "fp16"))


def test_an_empty_folder_remembers_nothing_and_resumes_its_own_checkpoints(tmp_path: Path) -> None:
    """No files: no memory, no carried scale, the checkpoint folder itself with no summary;
    without a checkpoint folder asked, no resume point at all."""
    snapshot = _read(tmp_path)
    state = snapshot.state
    assert (state.memory, state.memory_error, state.carried) == (None, None, None)
    assert state.resume is not None
    checkpoints = _folder(tmp_path).checkpoint_dir
    assert (state.resume.folder, snapshot.pointer_error) == (checkpoints, None)
    assert state.resume.summary is None
    assert _read(tmp_path, resume=False).state.resume is None
    assert state.initial_scale("fp16") is None


def test_it_reads_what_the_memory_and_the_carried_scale_wrote(tmp_path: Path) -> None:
    """A remembered demotion and an fp16 run's scale come back as written; the scale only
    for a run asking what the carried run asked."""
    demotion = Demotion("fp16", "bf16", "overflow_rate", 7, 5)
    folder = _folder(tmp_path)
    folder.save_precision_memory(remember_demotions(None, [demotion]))
    folder.save_carried_scale(carry_after_run("fp16", "fp16", 2048.0, False))
    state = _read(tmp_path).state
    assert state.memory is not None and state.memory.demoted_to == "bf16"
    assert state.memory_error is None
    assert (state.initial_scale("fp16"), state.initial_scale("auto")) == (2048.0, None)


def test_an_unusable_memory_file_is_reported_and_left_where_it_is(tmp_path: Path) -> None:
    """A torn memory file is no memory plus the reason naming it; the file is not moved
    (setting it aside is the caller's) and the rest of the folder is still read."""
    folder = _folder(tmp_path)
    torn = folder.precision_state_path
    torn.parent.mkdir(parents=True)
    torn.write_text('{"version": 1, "demoted_to"')
    folder.save_carried_scale(carry_after_run("fp16", "fp16", 64.0, False))
    state = _read(tmp_path).state
    assert state.memory is None
    assert state.memory_error is not None and str(torn) in state.memory_error
    assert torn.exists() and state.initial_scale("fp16") == 64.0


def test_the_resume_point_follows_the_served_pointer(tmp_path: Path) -> None:
    """With a pointer, the resume point is the served candidate's folder and its newest
    checkpoint's summary; a pointer naming a file that is gone falls back to the
    checkpoint folder and says why."""
    checkpoints = _folder(tmp_path).checkpoint_dir
    saved = CheckpointManager(checkpoints / "candidates" / "c1").save(_state(12))
    write_pointer(
        checkpoints,
        ServedPointer(ServedEntry(id="c1", checkpoint=str(saved.relative_to(checkpoints)))),
    )
    snapshot = _read(tmp_path)
    resume = snapshot.state.resume
    assert resume is not None and resume.folder == saved.parent and snapshot.pointer_error is None
    assert resume.summary is not None and resume.summary["step"] == 12
    write_pointer(checkpoints, ServedPointer(ServedEntry(id="x", checkpoint="gone.pt")))
    snapshot = _read(tmp_path)
    broken = snapshot.state.resume
    assert broken is not None and broken.folder == checkpoints and broken.summary is None
    assert snapshot.pointer_error is not None and "gone.pt" in snapshot.pointer_error


def test_reading_without_a_resume_point_does_not_import_torch(tmp_path: Path) -> None:
    """The `agents` and `precision` commands read state without paying for torch."""
    code = (
        "import sys; from pathlib import Path;"
        "from genesis_fp16_infrastructure.folder import AgentFolder;"
        "from genesis_fp16_infrastructure.contract.agent_snapshot import read_snapshot;"
        f"read_snapshot(AgentFolder(Path({str(tmp_path)!r}), 'agent')).state;"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
