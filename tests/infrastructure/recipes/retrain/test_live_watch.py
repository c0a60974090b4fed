"""The live watch through real runs: a poisoned served model is rolled back on the clean
records that follow; clean records keep the figures without a rollback; a pin holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from se_darwin_runs import train

from genesis_fp16.cli import main
from genesis_fp16_infrastructure.agent_folder.candidates import (
    candidate_entry,
    newest_checkpoint,
    read_verdict,
)
from genesis_fp16_infrastructure.agent_folder.layout import JUDGED_WATCH
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Pin
from genesis_fp16_infrastructure.agent_folder.pointer import candidates_dir, read_pointer
from genesis_fp16_infrastructure.agent_folder.transitions import serve
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.judging.watch import LIVE_REGRESSION

POOL = generate_pool(1600, seed=1)
IDS = list(POOL["trajectories"])


def _write(
    folder: Path, name: str, keys: list[str], edit: Callable[[Any], None] | None = None
) -> None:
    """One batch of the pool as a file of its own (records arrive in new files)."""
    part = {**POOL, "trajectories": {k: dict(POOL["trajectories"][k]) for k in keys}}
    for record in part["trajectories"].values():
        if edit is not None:
            edit(record)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(part))


def _poison(record: dict[str, Any]) -> None:
    record.update(status="success", success_score=None)


def _serve_candidate(ck: Path, name: str, pin: Pin | None = None) -> str:
    """Serve a kept candidate as ``model promote`` does (whatever the gate said)."""
    candidate = candidates_dir(ck) / name
    checkpoint = newest_checkpoint(candidate)
    assert checkpoint is not None
    serve(ck, candidate_entry(ck, candidate, checkpoint), "manual", pin=pin)
    return candidate.name


@pytest.fixture
def poisoned(tmp_path: Path) -> tuple[Path, Path, str, str]:
    """A clean model, then a model trained on an all-success batch served after it."""
    pool, ck = tmp_path / "pool", tmp_path / "state" / "agents" / "se_darwin" / "checkpoints"
    _write(pool, "b0", IDS[:600])
    first = train(pool, ck)
    _write(pool, "b1", IDS[600:900], _poison)
    bad = train(pool, ck, resume=True)
    assert first.outcome == "success" and first.extra["candidate"] != bad.extra["candidate"]
    return pool, ck, str(first.extra["candidate"]), str(bad.extra["candidate"])


def test_a_poisoned_served_model_is_rolled_back_after_clean_records(
    poisoned: tuple[Path, Path, str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Clean records after a poisoned promotion: the run scores them first, finds the
    served model reliably worse than its predecessor, serves the predecessor again, and
    records the verdict rolled_back / live_regression with its figures, which `model
    list` shows."""
    pool, ck, good, bad = poisoned
    _serve_candidate(ck, bad)  # served, unpinned, whether the gate saw it or not
    _write(pool, "b2", IDS[900:1200])
    result = train(pool, ck, resume=True)
    live = result.live
    assert live is not None and live.rolled_back and (live.served, live.now_served) == (bad, good)
    assert live.regressed and live.records == live.new_records > 250
    assert all(live.metrics[m].lower > live.metrics[m].margin for m in live.regressed)
    pointer = read_pointer(ck)
    assert pointer is not None and pointer.served.id == good
    verdict = read_verdict(candidates_dir(ck) / bad).to_json()
    assert verdict is not None and verdict["outcome"] == "rolled_back"
    assert verdict["reason"] == LIVE_REGRESSION and verdict["live"]["records"] == live.records
    monkeypatch.setenv("GENESIS_FP16_STATE_DIR", str(ck.parents[2]))
    capsys.readouterr()
    assert main(["model", "list", "se_darwin", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)["models"]}
    assert rows[bad]["verdict"] == "rolled_back" and rows[bad]["live"]["regression"]
    assert main(["model", "list", "se_darwin"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(bad))
    assert f"{live.records} rec" in line and line.endswith("REGRESSION")


def test_clean_records_keep_running_figures_and_count_each_record_once(tmp_path: Path) -> None:
    """Clean growth: the served model's figures land in served.json, no rollback; a run
    with no new record leaves them, and the next batch adds only its own records."""
    pool, ck = tmp_path / "pool", tmp_path / "ck"
    _write(pool, "b0", IDS[:600])
    first = train(pool, ck)
    _write(pool, "b1", IDS[600:900])
    second = train(pool, ck, resume=True)
    name = _serve_candidate(
        ck, str(second.extra["candidate"])
    )  # served over `first`, whatever the gate said
    _write(pool, "b2", IDS[900:1100])
    # One step: the runs' own candidates are surely rejected, and `name` stays served.
    live = train(pool, ck, resume=True, steps=1).live
    assert live is not None and not live.rolled_back and not live.regression
    assert live.served == name and live.against == first.extra["candidate"]
    assert live.records == live.new_records
    assert train(pool, ck, resume=True, steps=1).live is None  # nothing new
    _write(pool, "b3", IDS[1100:1300])
    again = train(pool, ck, resume=True, steps=1).live
    assert again is not None and again.records == live.records + again.new_records > 300
    assert set(again.metrics) == {"log_loss", "brier"}  # each at ALPHA / 2
    w = again.watched
    assert w.lower <= (w.difference or 0) <= w.upper and again.primary == "log_loss"
    pointer = read_pointer(ck)
    assert pointer is not None
    watched = [e for e in [pointer.served, *pointer.history] if e.id == name]
    assert watched and watched[0].live is not None
    assert watched[0].live is not None and watched[0].live.records == again.records
    store = JUDGED_WATCH.at((ck / str(watched[0].checkpoint)).parent, first.extra["candidate"])
    with np.load(store) as kept:
        assert len(np.unique(kept["ids"])) == len(kept["ids"]) == again.records


def test_a_pinned_model_is_watched_but_not_rolled_back(
    poisoned: tuple[Path, Path, str, str],
) -> None:
    """The operator's pin holds a regressed model: the figures say regression, the report
    says held, and the served model stays."""
    pool, ck, _, bad = poisoned
    _serve_candidate(ck, bad, pin=Pin(by="test"))
    _write(pool, "b2", IDS[900:1200])
    live = train(pool, ck, resume=True).live
    assert live is not None and live.regression and not live.rolled_back
    assert live.held is not None and "pinned" in live.held
    pointer = read_pointer(ck)
    assert pointer is not None and pointer.served.id == bad
    assert pointer.served.live is not None and pointer.served.live.regression is True
