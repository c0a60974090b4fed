"""Scheduled runs on a pool that changes: up to date when nothing is new, afresh otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from se_darwin_runs import train

from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager, load_checkpoint


def _write(folder: Path, name: str, pool: dict[str, object]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(pool))


@pytest.fixture
def pool(tmp_path: Path) -> Path:
    folder = tmp_path / "pool"
    _write(folder, "se_darwin", generate_pool(300, seed=4))
    return folder


def _served_state(ckpt: Path) -> dict[str, object]:
    newest = sorted(ckpt.glob("ckpt-*.pt"))[-1]
    state: dict[str, object] = torch.load(newest, weights_only=True)
    return state


def test_an_unchanged_pool_is_up_to_date_and_takes_no_step(pool: Path, tmp_path: Path) -> None:
    """The same records again: outcome up_to_date, no step, the same checkpoint and eval."""
    first = train(pool, tmp_path / "ck", steps=None)
    again = train(pool, tmp_path / "ck", steps=None, resume=True)
    assert (first.outcome, again.outcome) == ("success", "up_to_date")
    assert again.steps == 0 and again.checkpoint == first.checkpoint
    assert again.eval == first.eval
    assert again.to_json()["outcome"] == "up_to_date"
    assert again.extra["data"]["change"] == "unchanged"


def test_a_grown_pool_is_learned_afresh_by_an_encoder_that_knows_every_agent(
    pool: Path, tmp_path: Path
) -> None:
    """New records (of a new agent) train a new model on the whole pool with a refitted
    encoder; the new records are counted and the old checkpoints are kept aside."""
    first = train(pool, tmp_path / "ck", steps=None)
    _write(pool, "qa", generate_pool(300, seed=5, agent="qa"))
    grown = train(pool, tmp_path / "ck", steps=None, resume=True)
    data = grown.extra["data"]
    assert grown.outcome == "success" and grown.steps > 0 and grown.extra["resumed_from"] is None
    assert data["new"] == grown.extra["examples"] - first.extra["examples"] > 250
    assert (data["removed"], data["relabelled"]) == (0, 0)
    rates = _served_state(tmp_path / "ck")["extra"]["encoder"]["agent_rates"]  # type: ignore[index]
    assert set(rates) == {"se_darwin", "qa"}
    assert list((tmp_path / "ck" / "superseded").glob("*/ckpt-*.pt"))


@pytest.mark.parametrize("edit", ["shrink", "relabel"])
def test_a_shrunk_or_relabelled_pool_retrains(pool: Path, tmp_path: Path, edit: str) -> None:
    """Records removed, or labels changed, are new data: the next run trains again."""
    train(pool, tmp_path / "ck", steps=None)
    records = generate_pool(300, seed=4)
    trajectories = records["trajectories"]
    ids = list(trajectories)[:20]
    for key in ids:
        if edit == "shrink":
            del trajectories[key]
        elif trajectories[key].get("success_score") is not None:
            trajectories[key]["success_score"] = round(1.0 - trajectories[key]["success_score"], 3)
    _write(pool, "se_darwin", records)
    again = train(pool, tmp_path / "ck", steps=None, resume=True)
    data = again.extra["data"]
    assert again.outcome == "success" and again.steps > 0 and data["change"] == "changed"
    assert (data["removed"] if edit == "shrink" else data["relabelled"]) > 0


def test_an_interrupted_run_is_not_up_to_date(pool: Path, tmp_path: Path) -> None:
    """A run stopped before its end (daemon shutdown) continues at the next run instead of
    being taken as up to date on the same records."""
    calls = iter(range(1000))
    stopped = train(pool, tmp_path / "ck", steps=None, should_stop=lambda: next(calls) >= 12)
    assert stopped.outcome == "stopped" and stopped.steps == 12
    again = train(pool, tmp_path / "ck", steps=None, resume=True)
    assert again.outcome == "success" and again.steps > 0
    assert again.extra["resumed_from"] == str(stopped.checkpoint)


def _save_without_encoder(ckpt: Path, from_file: Path, step: int) -> Path:
    """A newer, schema-valid checkpoint whose world-model state lost its encoder."""
    state = load_checkpoint(from_file)
    del state["extra"]["encoder"]
    state["step"] = step
    return CheckpointManager(ckpt).save(state)


def test_a_newest_checkpoint_without_the_encoder_falls_back_to_the_one_before(
    pool: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A schema-valid newest checkpoint missing the encoder is skipped with a warning naming
    it, and the run resumes from the previous one instead of failing."""
    good = train(pool, tmp_path / "ck")
    assert good.checkpoint is not None
    bad = _save_without_encoder(tmp_path / "ck", good.checkpoint, step=40)
    again = train(pool, tmp_path / "ck", steps=30, resume=True)
    assert again.outcome == "success" and again.extra["resumed_from"] == str(good.checkpoint)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(str(bad) in line and "encoder" in line for line in warned), warned


def test_the_only_checkpoint_without_the_encoder_starts_fresh_with_a_warning(
    pool: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With no older checkpoint to fall back to, the run starts fresh and says why."""
    good = train(pool, tmp_path / "first")
    assert good.checkpoint is not None
    bad = _save_without_encoder(tmp_path / "ck", good.checkpoint, step=40)
    again = train(pool, tmp_path / "ck", resume=True)
    assert again.outcome == "success" and again.extra["resumed_from"] is None
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert str(bad) in warned and "starting fresh" in warned
