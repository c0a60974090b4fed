"""A run's ``check`` (``run._served_copy``): in a resident process the served model's
copy is read as the state its judged run's scoring kept of the same bytes, not unpickled
again (issue 90); a run that resumes from the copy (forced, or a run cut short) gets a
state of its own, and a changed copy is still refused."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from first_served import served_checkpoint, write_pool
from se_darwin_runs import train

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.judging.scoring_copy import copy_checkpoint
from genesis_fp16_infrastructure.recipes.retrain import run as retrain_run
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint_arrays import with_arrays
from genesis_fp16_infrastructure.training.checkpoint_load import (
    load_checkpoint,
    reusing_loads,
    sharing_kept,
)

BUDGET = 64 * 2**20


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's process starts with nothing kept (another test's store is not its)."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])


def _request(folder: Path, forced: bool = False) -> TrainRequest:
    return TrainRequest(
        agent="se_darwin",
        precision="fp32",  # type: ignore[arg-type]
        precision_reason="test",
        state_dir=folder,
        checkpoint_dir=folder / "candidate",
        data_path=folder / "data",
        keep_in_memory_bytes=BUDGET,
        forced=forced,
    )


def _kept_served(folder: Path) -> dict[str, Any]:
    """The served model's state as a judged run's scoring keeps it in a resident process."""
    kept_in_memory.process_memory(BUDGET)
    with reusing_loads(), sharing_kept():
        return load_checkpoint(served_checkpoint(folder))


def _copied(folder: Path) -> Path:
    """The served checkpoint copied into the candidate's folder, as the judged run does."""
    candidate = folder / "candidate"
    candidate.mkdir(exist_ok=True)
    copy_checkpoint(served_checkpoint(folder), candidate)
    return candidate


def _shares_storage(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether any model tensor of ``a`` lies in the memory of ``b``'s."""
    ours = {t.untyped_storage().data_ptr() for t in b[keys.MODEL].values()}
    return any(t.untyped_storage().data_ptr() in ours for t in a[keys.MODEL].values())


def test_the_check_takes_the_kept_state_and_a_resumed_copy_its_own(
    first: Path, tmp_path: Path, loads: list[int]
) -> None:
    """An unforced run's check reads the copy as the state kept of its bytes (hashed, not
    unpickled) and removes the copy; a forced one unpickles a state of its own, whose
    tensors it trains; a copy whose bytes changed is refused in one line."""
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    kept = _kept_served(folder)
    loads.clear()
    candidate = _copied(folder)
    state, saved, loaded = retrain_run._served_copy(candidate, _request(folder))
    assert loads == [] and saved is None and loaded is None
    assert state is not None and state["encoder"] is kept[keys.EXTRA]["encoder"]
    # Its data's per-record arrays read back from their side file, checked.
    assert isinstance(state["data"]["ids"], torch.Tensor) and state["data"]["records"] > 0
    assert not list(candidate.glob("ckpt-*.pt"))  # a copy: removed
    _copied(folder)
    state, saved, loaded = retrain_run._served_copy(candidate, _request(folder, forced=True))
    assert len(loads) == 1 and loaded is not None and saved is state
    assert state is not None and state["encoder"] is not kept[keys.EXTRA]["encoder"]
    assert not _shares_storage(loaded.state, kept)
    [path] = candidate.glob("ckpt-*.pt")
    data = path.read_bytes()
    path.write_bytes(data[:200] + bytes([data[200] ^ 1]) + data[201:])
    with pytest.raises(TrainRequestError, match="do not match the digest"):
        retrain_run._served_copy(candidate, _request(folder))


def test_a_run_cut_short_is_resumed_from_a_state_of_its_own(
    first: Path, tmp_path: Path, loads: list[int]
) -> None:
    """A newest checkpoint of a run cut short (its run record not complete) whose state
    the process kept (it saved it) is resumed, unforced, from a state read again, never
    the kept one: resuming trains its tensors."""
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    kept_in_memory.process_memory(BUDGET)
    state = copy.deepcopy(
        with_arrays(load_checkpoint(served_checkpoint(folder)), served_checkpoint(folder))
    )
    state[keys.RUN] = {"steps": 40, "complete": False}
    candidate = folder / "candidate"
    CheckpointManager(candidate).save(state)  # kept as saved: a resident process's
    with reusing_loads(), sharing_kept():
        kept = load_checkpoint(next(candidate.glob("ckpt-*.pt")))
    loads.clear()
    served, saved, loaded = retrain_run._served_copy(candidate, _request(folder))
    assert len(loads) == 1 and loaded is not None and saved is served
    assert loaded.state is not kept and not _shares_storage(loaded.state, kept)
    assert list(candidate.glob("ckpt-*.pt"))  # resumed, not removed


def test_a_later_resident_run_reports_what_one_that_keeps_nothing_does(
    first: Path, tmp_path: Path
) -> None:
    """The same first model and the same new records: a resident run (its check from the
    kept state) and one that keeps nothing report the same data change and drift."""
    results = []
    for name, budget in (("kept", BUDGET), ("none", 0)):
        folder = tmp_path / name
        shutil.copytree(first / "first", folder)
        write_pool(folder / "data", "more.json", 300, seed=41)
        results.append(
            train(
                folder / "data", folder / "ck", steps=40, resume=True, keep_in_memory_bytes=budget
            )
        )
    kept, none = results
    assert kept.data == none.data and kept.data is not None and kept.data.new > 0
    assert kept.drift is not None and kept.drift == none.drift
    assert kept.gate is not None and none.gate is not None
    assert kept.gate.outcome == none.gate.outcome
