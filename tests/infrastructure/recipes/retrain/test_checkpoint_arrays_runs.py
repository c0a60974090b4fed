"""The se_darwin task keeps its per-record arrays (trained ids, the pool's fingerprint) in
a side file beside each checkpoint (training/checkpoint_arrays.py, issue 90): a served
model written before, its arrays inline, is judged and continued as before; one whose
side file is not what its name says is refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from first_served import served_checkpoint, write_pool
from test_ranked_later_run import _run

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.judging.trained_ids import trained_ids
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint_arrays import PER_RECORD, PREFIX, with_arrays
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's process starts with nothing kept."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])


def _inline(checkpoint: Path) -> None:
    """Save ``checkpoint`` again as code before side files wrote it: its arrays inline,
    no per_record key, its side file gone."""
    state = with_arrays(load_checkpoint(checkpoint), checkpoint)
    extra = {k: v for k, v in state[keys.EXTRA].items() if k != PER_RECORD}
    for side in checkpoint.parent.glob(f"{PREFIX}*"):
        side.unlink()
    CheckpointManager(checkpoint.parent).save({**state, keys.EXTRA: extra})
    assert not list(checkpoint.parent.glob(f"{PREFIX}*"))
    assert isinstance(load_checkpoint(checkpoint)[keys.EXTRA]["trained_ids"], torch.Tensor)


def test_a_served_model_with_its_arrays_inline_is_judged_as_one_with_a_side_file(
    first: Path, tmp_path: Path
) -> None:
    """The same first model saved both ways: its trained ids read the same, and a later
    run with 300 new records reports the same data change, drift and gate outcome; the
    candidate it saves keeps its arrays in a side file."""
    results, named = [], []
    for name, old in (("side", False), ("inline", True)):
        folder = tmp_path / name
        shutil.copytree(first / "first", folder)
        if old:
            _inline(served_checkpoint(folder))
        named.append(trained_ids(served_checkpoint(folder)))
        write_pool(folder / "data", "zz-1.json", 300, seed=41)
        results.append(_run(folder))
        candidate = served_checkpoint(folder)
        assert list(candidate.parent.glob(f"{PREFIX}*"))  # the new one: a side file
        assert isinstance(load_checkpoint(candidate)[keys.EXTRA]["trained_ids"], dict)
    side, inline = results
    assert named[0] is not None and named[1] is not None and (named[0] == named[1]).all()
    assert side.data == inline.data and side.data is not None and side.data.new > 0
    assert side.drift == inline.drift
    assert side.gate is not None and inline.gate is not None
    assert side.gate.outcome == inline.gate.outcome == "promoted"


def test_a_served_model_whose_side_file_was_planted_is_refused_in_one_line(
    first: Path, tmp_path: Path
) -> None:
    """The served model's side file edited in place: its trained ids cannot be read and
    the later run that would compare its pool with the served model's stops in one line
    naming the file."""
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    [side] = served_checkpoint(folder).parent.glob(f"{PREFIX}*")
    data = bytearray(side.read_bytes())
    data[16] ^= 1
    side.write_bytes(bytes(data))
    write_pool(folder / "data", "zz-1.json", 300, seed=41)
    with pytest.raises(TrainRequestError) as caught:
        _run(folder)
    message = str(caught.value)
    assert "\n" not in message and side.name in message and "planted" in message
