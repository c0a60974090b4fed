"""final_fit=whole: the served model is refit on every record; the eval stays the split's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from se_darwin_runs import train

from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.recipes.retrain.run import SPLIT_FOLDER
from genesis_fp16_infrastructure.recipes.retrain.split import judged_held_out
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
from genesis_fp16_infrastructure.training.checkpoint_arrays import with_arrays
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return plugin.generate_sample_data(tmp_path_factory.mktemp("data"), 500, seed=5)


def _train(data: Path, ckpt: Path, resume: bool = False, **options: object) -> TrainResult:
    """A default-budget fp32 run (no steps: it stops on validation), seed 2."""
    return train(data, ckpt, steps=None, seed=2, resume=resume, options=options)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return WorldModelPredictor.load(path).model.state_dict()


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def runs(data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainResult]:
    """The same pool at the default budget with a held-out split (this small pool's default
    is cross-validated; final_fit=whole asks for the split), served split and whole."""
    root = tmp_path_factory.mktemp("runs")
    return {
        "split": _train(data, root / "split", cross_validation=False),
        "whole": _train(data, root / "whole", final_fit="whole"),
    }


def test_whole_serves_a_model_trained_on_every_record(
    data: Path, runs: dict[str, TrainResult]
) -> None:
    """The folder's checkpoint holds a model trained on every labelled record the judged
    run does not hold out, for the split run's best step count; the predictor loads it,
    and it is not the split's best weights."""
    whole = runs["whole"]
    folder = Path(whole.checkpoint).parent  # type: ignore[arg-type]
    best_step = whole.early_stop.best_step
    state, path = CheckpointManager(folder).load_latest()  # type: ignore[misc]
    assert path == whole.checkpoint and state["step"] == best_step and "early_stop" not in state
    read = read_trajectories(data)
    trained = len(read.examples) - int(judged_held_out(read).sum())
    named = with_arrays(state, path)["extra"]["trained_ids"]  # from its side file
    assert state["extra"]["split"]["train_records"] == trained == len(named)
    assert whole.extra["final_fit"]["records"] == trained < whole.extra["examples"]
    assert state["extra"]["split"]["eval_fraction"] == 0.0
    served = _weights(folder)
    assert _same(served, state["model"])
    split_best = _weights(folder / SPLIT_FOLDER)  # the split run's served (best) weights
    assert split_best.keys() == served.keys() and not _same(split_best, served)


def test_whole_reports_the_split_models_eval_and_says_so(runs: dict[str, TrainResult]) -> None:
    """eval is the default run's held-out eval, unchanged; train --json's extra.final_fit
    names the refit's records, steps and checkpoint and what the eval measures."""
    split, whole = runs["split"], runs["whole"]
    assert whole.eval == split.eval and whole.steps == split.steps
    assert whole.eval["examples"] == whole.extra["split"]["held_out"]
    record = json.loads(json.dumps(whole.to_json()))["extra"]["final_fit"]
    assert record["mode"] == "whole" and record["records"] < whole.extra["examples"]
    assert record["steps"] == whole.early_stop.best_step
    assert record["checkpoint"] == str(whole.checkpoint)
    assert Path(record["split_checkpoint"]).parent.name == SPLIT_FOLDER
    assert "split model" in record["eval"]


def test_default_serves_the_split_runs_best_weights(runs: dict[str, TrainResult]) -> None:
    """Without the option (held-out split) nothing changes: no final_fit record, no
    subfolder, and the folder serves the same best weights as the whole run's split run."""
    split, whole = runs["split"], runs["whole"]
    folder = Path(split.checkpoint).parent  # type: ignore[arg-type]
    assert "final_fit" not in split.extra and not (folder / SPLIT_FOLDER).exists()
    whole_folder = Path(whole.checkpoint).parent  # type: ignore[arg-type]
    assert _same(_weights(folder), _weights(whole_folder / SPLIT_FOLDER))


def test_resuming_a_finished_whole_run_takes_no_step(data: Path, tmp_path: Path) -> None:
    """A resumed finished run is up to date and changes no file; with the served refit's
    checkpoint gone, a resume refuses in one line naming the missing file."""
    first = _train(data, tmp_path / "c", final_fit="whole")
    candidate = Path(first.checkpoint).parent  # type: ignore[arg-type]
    files = {p: p.read_bytes() for p in (tmp_path / "c").rglob("ckpt-*")}
    again = _train(data, tmp_path / "c", resume=True, final_fit="whole")
    assert again.up_to_date and again.steps == 0 and again.checkpoint == first.checkpoint
    assert {p: p.read_bytes() for p in (tmp_path / "c").rglob("ckpt-*")} == files
    # The served refit's file gone: a resume refuses in one line, naming it (never a guess).
    for path in CheckpointManager(candidate).checkpoints():
        path.unlink()
    with pytest.raises(TrainRequestError, match=r"names .*which is not there"):
        _train(data, tmp_path / "c", resume=True, final_fit="whole")


def test_a_folders_earlier_model_stays_where_it_is_while_a_refit_candidate_trains(
    data: Path, tmp_path: Path
) -> None:
    """A folder that served the default (cross-validated) model, then asked for
    final_fit=whole: the earlier checkpoint is never moved or written (the refit trains
    as a candidate of its own), and the pointer serves whichever the gate chose."""
    first = _train(data, tmp_path / "c")
    old = Path(first.checkpoint)  # type: ignore[arg-type]
    before = _weights(old)
    whole = _train(data, tmp_path / "c", resume=True, final_fit="whole")
    assert old.exists() and _same(_weights(old), before)
    assert Path(whole.checkpoint).parent != old.parent  # type: ignore[arg-type]
    assert Path(whole.extra["final_fit"]["split_checkpoint"]).parent.name == SPLIT_FOLDER
    served = WorldModelPredictor.load(tmp_path / "c").checkpoint
    # rejected or inconclusive (issue 62: kept, judged again later): the earlier one serves
    expected = whole.checkpoint if whole.gate.outcome == "promoted" else old
    assert served == expected and whole.gate.outcome in ("promoted", "rejected", "inconclusive")


def test_final_fit_names_its_choices(tmp_path: Path) -> None:
    """An unknown final_fit names the value and the choices; the option is declared."""
    with pytest.raises(TrainRequestError, match=r"final_fit='all': choose from split, whole"):
        plugin.train(
            TrainRequest(
                agent="se_darwin",
                precision="fp32",
                precision_reason="test",
                state_dir=tmp_path,  # the agent folder is claimed first: never the checkout
                checkpoint_dir=tmp_path / "ckpt",
                data_path=tmp_path / "pool.json",
                options={"final_fit": "all"},
            )
        )
    declared = next(o for o in plugin.options if o.name == "final_fit")
    assert declared.default == "split" and declared.choices == ("split", "whole")
