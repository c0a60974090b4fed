"""A real retrain run whose request names no quarantine file writes quarantine.jsonl in its
checkpoint folder; a folder in its place is set aside, never a failed run."""

from __future__ import annotations

from pathlib import Path

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain import run


def test_a_folder_at_quarantine_jsonl_is_set_aside_and_the_run_trains(tmp_path: Path) -> None:
    """One bad record to quarantine, a folder at quarantine.jsonl: the run trains its
    steps, the folder (and what it held) is kept as quarantine.jsonl.unusable and
    reported once, and the bad record is written to a fresh quarantine.jsonl."""
    pool = write_pool(tmp_path / "data", 400, 5, agent="builder").parent
    (pool / "bad.jsonl").write_text("not a record\n")
    folder = tmp_path / "state" / "builder"
    (folder / "quarantine.jsonl").mkdir(parents=True)
    (folder / "quarantine.jsonl" / "inside").write_text("kept")
    request = TrainRequest(
        agent="builder",
        precision="fp32",
        precision_reason="test",
        state_dir=folder.parent,
        checkpoint_dir=folder,
        data_path=pool,
        steps=4,
        seed=5,
        options={"cross_validation": False},
    )
    seen: list[files.SetAside] = []
    remove = files.on_set_aside(seen.append)
    try:
        result = run.train(request)
    finally:
        remove()
    assert result.steps == 4 and result.quarantined == 1
    assert [e.label for e in seen] == ["quarantine"]
    assert (files.newest_aside(folder / "quarantine.jsonl") / "inside").read_text() == "kept"  # type: ignore[operator]
    assert "not a record" in (folder / "quarantine.jsonl").read_text()
