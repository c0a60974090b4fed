"""The live watch's store damaged between real se_darwin runs (issue 92): the run goes on,
the store is set aside and counted once, and the watch starts again."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.candidates import candidate_entry, newest_checkpoint
from genesis_fp16_infrastructure.agent_folder.layout import JUDGED_WATCH
from genesis_fp16_infrastructure.agent_folder.pointer import candidates_dir, read_pointer
from genesis_fp16_infrastructure.agent_folder.transitions import serve
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.judging import stores

sys.path.insert(0, str(Path(__file__).parents[1] / "recipes" / "retrain"))
from se_darwin_runs import train
from test_stores import DAMAGES

POOL = generate_pool(1300, seed=1)
IDS = list(POOL["trajectories"])


def _write(folder: Path, name: str, keys: list[str]) -> None:
    part = {**POOL, "trajectories": {k: POOL["trajectories"][k] for k in keys}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(part))


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A served model watched against its predecessor, its store holding one batch."""
    root = tmp_path_factory.mktemp("watched")
    pool, ck = root / "pool", root / "ck"
    _write(pool, "b0", IDS[:500])
    train(pool, ck)
    _write(pool, "b1", IDS[500:700])
    second = str(train(pool, ck, resume=True).extra["candidate"])
    candidate = candidates_dir(ck) / second
    checkpoint = newest_checkpoint(candidate)
    assert checkpoint is not None
    serve(ck, candidate_entry(ck, candidate, checkpoint), "manual")  # watched from now
    _write(pool, "b2", IDS[700:850])
    live = train(pool, ck, resume=True, steps=1).live
    assert live is not None and live.records == live.new_records > 0
    return root


def _store(ck: Path) -> Path:
    pointer = read_pointer(ck)
    assert pointer is not None and pointer.history
    served = (ck / str(pointer.served.checkpoint)).parent
    return JUDGED_WATCH.at(served, str(pointer.history[0].id))


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["npy_in_place", "zero_d", "string_ids", "huge_header"])
def test_a_damaged_watch_store_costs_no_run_and_the_watch_starts_again(
    watched: Path, tmp_path: Path, damage: str
) -> None:
    """The issue's four damages to ``judged-live-<predecessor>.npz`` (each failed every
    later run of the agent): the next run goes on, sets the store aside once, counted
    under ``judged_watch``, and watches again from its first record (the earlier
    batch's records are new to the restarted store); the run after reads it back."""
    root = tmp_path / "copy"
    shutil.copytree(watched, root)
    pool, ck = root / "pool", root / "ck"
    store = _store(ck)
    assert store.is_file()
    DAMAGES[damage](store)
    _write(pool, "b3", IDS[850:950])
    reported: list[files.SetAside] = []
    forget = files.on_set_aside(reported.append)
    try:
        live = train(pool, ck, resume=True, steps=1).live
    finally:
        forget()
    assert [(e.label, e.path) for e in reported] == [("judged_watch", store)]
    assert files.newest_aside(store) is not None
    assert live is not None and live.records == live.new_records > 100  # b2's and b3's
    _write(pool, "b4", IDS[950:1000])
    again = train(pool, ck, resume=True, steps=1).live
    assert again is not None and again.records == live.records + again.new_records


@pytest.mark.slow
def test_new_records_past_the_stores_bound_are_not_watched_and_said(
    watched: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """The watch writes no store its reader would refuse: with the bound at the records
    kept plus 30, a batch of 100 adds 30, the log says how many were not watched, and the
    store reads back whole."""
    root = tmp_path / "copy"
    shutil.copytree(watched, root)
    pool, ck = root / "pool", root / "ck"
    kept = stores.read_watch(_store(ck), "log_loss")
    width = 8 + 4 * kept["segments"].dtype.itemsize // 4 + 8 * (len(kept) - 2)
    monkeypatch.setattr(stores, "decoded_bound", lambda file: (len(kept["ids"]) + 30) * width)
    _write(pool, "b3", IDS[850:950])
    live = train(pool, ck, resume=True, steps=1).live
    assert live is not None and live.new_records == 30
    assert live.records == len(kept["ids"]) + 30
    said = [r.getMessage() for r in caplog.records if "new record(s) not watched" in r.getMessage()]
    assert len(said) == 1 and "full: " in said[0]  # the batch's labelled records less 30
    assert len(np.unique(stores.read_watch(_store(ck), "log_loss")["ids"])) == live.records
