"""SE-Darwin's cross-validated ensemble: small pools train one member per fold and are
evaluated out of fold; larger pools (or an explicit choice) keep the held-out split."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from se_darwin_runs import train as _train

from benchmarks.ensemble_step import LoopEnsemble  # the loop layout, the bench's reference
from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.recipes.retrain import options as options_module
from genesis_fp16_infrastructure.recipes.retrain.options import CROSS_VALIDATION_BELOW, TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.split import Draw
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.world_model.model import (
    ModelConfig,
    WorldModel,
    WorldModelEnsemble,
    WorldModelOutput,
    build_world_model,
    world_model_losses,
)
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor

FOLDS = 5


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return plugin.generate_sample_data(tmp_path_factory.mktemp("data"), 600, seed=5)


def _v1_folds(ids: list[str], seed: int) -> list[int]:
    """Each id's fold of 5 as version 1 draws it (a hash of seed and id alone)."""
    return Draw(ids, np.zeros(len(ids), dtype=np.int64)).folds(seed, 5, 1).tolist()


def test_folds_are_seeded_independent_of_order_and_stable_as_the_pool_grows() -> None:
    """The same ids in another order land in the same folds; more records never move an
    earlier one's fold; another seed deals them differently; every fold gets a share."""
    ids = [f"t{i}" for i in range(500)]
    folds = _v1_folds(ids, 0)
    assert all(60 <= folds.count(k) <= 140 for k in range(5))
    shuffled = ids[:]
    random.Random(1).shuffle(shuffled)
    again = dict(zip(shuffled, _v1_folds(shuffled, 0), strict=True))
    assert [again[i] for i in ids] == folds
    grown = _v1_folds([*ids, *(f"u{i}" for i in range(300))], 0)
    assert grown[:500] == folds
    assert _v1_folds(ids, 1) != folds


def test_the_pool_size_picks_the_evaluation_and_explicit_options_win() -> None:
    """Under CROSS_VALIDATION_BELOW records the default cross-validates; an explicit
    eval_fraction, final_fit=whole or cross_validation=false keeps the held-out split."""
    small, large = CROSS_VALIDATION_BELOW - 1, CROSS_VALIDATION_BELOW
    assert TaskOptions().cross_validated(small) and not TaskOptions().cross_validated(large)
    assert TaskOptions(cross_validation=True).cross_validated(large)
    for held in ({"cross_validation": False}, {"eval_fraction": 0.2}, {"final_fit": "whole"}):
        assert not TaskOptions.from_mapping(held).cross_validated(small), held


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cross_validation": True, "eval_fraction": 0.2}, "held-out options"),
        ({"cross_validation": True, "final_fit": "whole"}, "held-out options"),
        ({"folds": 1}, "folds=1: must be at least 2"),
    ],
)
def test_contradictory_options_are_one_line_errors(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(TrainRequestError, match=message) as caught:
        TaskOptions.from_mapping(options)
    assert "\n" not in str(caught.value)


def test_fewer_records_than_folds_is_a_clear_error(tmp_path: Path) -> None:
    data = plugin.generate_sample_data(tmp_path / "data", 4, seed=0)
    with pytest.raises(TrainRequestError, match=r"cannot be dealt into 5 folds; add data"):
        _train(data, tmp_path / "ckpt")


def test_out_of_fold_metrics_use_the_member_that_did_not_train_on_the_record(
    data: Path,
) -> None:
    """evaluate() scores each record with the member of its fold; the loss gives each
    member the gradient of its own loss on the other folds, and nothing from its fold."""
    task = WorldModelTask(read_trajectories(data), TaskOptions(), seed=3)
    assert task.cross_validated and task.config.members == 5
    torch.manual_seed(0)
    model = task.build_model()
    assert isinstance(model, WorldModelEnsemble)
    batch = task.eval_data
    with torch.no_grad():
        outs = model(batch.x, per_member=True).success_logit
        expected = torch.stack([outs[f, i] for i, f in enumerate(batch.fold.tolist())])
        picked = task._predict(model, batch)
        assert torch.equal(picked.success_logit, expected)
        for k in range(5):  # each member's output is what that member alone gives
            assert torch.allclose(outs[k], model.member(k)(batch.x).success_logit, atol=1e-6)
        assert task.evaluate(model)["examples"] == len(batch) == len(task.split.train)
        assert task.evaluate(model) == task.validate(model)

    model.zero_grad()
    task.loss(model, batch).backward()
    # Member 2's slice of each stacked parameter, under a WorldModel's names.
    got = {name: p.grad[2].clone() for name, p in model.named_parameters()}  # type: ignore[index]
    alone = model.member(2)
    keep = batch.fold != 2
    labels = (batch.success, batch.score, batch.score_known, batch.outcome)
    world_model_losses(alone(batch.x), *labels, weight=keep).total.backward()
    assert got.keys() == dict(alone.named_parameters()).keys()
    for name, p in alone.named_parameters():
        assert torch.allclose(got[name], p.grad, atol=1e-6)  # type: ignore[arg-type]
    # Only fold 2's records changed: member 2's gradient does not move.
    changed = batch.take(torch.arange(len(batch)))
    changed.success[batch.fold == 2] = 1.0 - changed.success[batch.fold == 2]
    model.zero_grad()
    task.loss(model, changed).backward()
    for name, p in model.named_parameters():
        assert torch.allclose(got[name], p.grad[2], atol=1e-6)  # type: ignore[index]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_a_small_pool_trains_and_serves_a_cross_validated_ensemble(
    data: Path, tmp_path: Path, precision: str
) -> None:
    """train --json says the run was cross-validated, its AUC is out of fold over every
    record it trained on (all but the judged run's held-out fifth) with an interval; the
    predictor serves the mean of the members' logits."""
    result = _train(data, tmp_path / "ckpt", precision, steps=24)
    assert result.precision_used == precision
    split = result.extra["split"]
    assert split["mode"] == "cross_validation" and split["folds"] == 5
    assert split["records"] == result.eval["examples"] < 0.9 * result.extra["examples"]
    assert result.eval["auc_ci_low"] < result.eval["auc"] < result.eval["auc_ci_high"]
    predictor = WorldModelPredictor.load(tmp_path / "ckpt")
    model = predictor.model
    assert isinstance(model, WorldModelEnsemble) and model.config.members == 5
    pool = read_trajectories(data)
    attempts = [e.attempt for e in pool.examples[:16]]
    got = predictor.predict(attempts, pool.pool)
    x = predictor.encoder.encode(attempts, pool.pool)
    with torch.no_grad():
        mean_logit = torch.stack([model.member(k)(x).success_logit for k in range(5)]).mean(0)
    want = torch.sigmoid(mean_logit).tolist()
    assert [p.success_probability for p in got] == pytest.approx(want, abs=1e-6)
    saved = torch.load(result.checkpoint, weights_only=True)  # type: ignore[arg-type]
    assert saved["extra"]["model"]["members"] == 5 and saved["extra"]["split"]["folds"] == 5


def test_cross_validation_false_keeps_the_held_out_split(data: Path, tmp_path: Path) -> None:
    """cross_validation=false: the held-out split, its model an ensemble of ``members``
    networks (5) that each trained on the whole training part; members=1, one network."""
    result = _train(data, tmp_path / "ckpt", options={"cross_validation": False})
    split = result.extra["split"]
    assert split["mode"] == "held_out"
    assert split["train"] + split["validation"] + split["held_out"] == result.extra["examples"]
    served = WorldModelPredictor.load(tmp_path / "ckpt")
    assert isinstance(served.model, WorldModelEnsemble) and served.model.config.members == 5
    one = {"cross_validation": False, "members": 1}
    _train(data, tmp_path / "one", options=one)
    assert isinstance(WorldModelPredictor.load(tmp_path / "one").model, WorldModel)


def test_other_networks_train_a_candidate_of_their_own(data: Path, tmp_path: Path) -> None:
    """cross_validation=false or other folds after a 5-member model, on the same records:
    not up to date, not a resume of its checkpoint (which stays as it was) but a fresh
    candidate in a folder of its own."""
    first = _train(data, tmp_path / "ckpt", steps=8)
    before = Path(str(first.checkpoint)).read_bytes()
    for options in ({"cross_validation": False}, {"folds": 3}):
        other = _train(data, tmp_path / "ckpt", steps=8, resume=True, options=options)
        assert other.extra["resumed_from"] is None and other.steps == 8
        assert Path(str(other.checkpoint)).parent != Path(str(first.checkpoint)).parent
    assert Path(str(first.checkpoint)).read_bytes() == before


def test_a_resumed_run_keeps_its_checkpoints_evaluation(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon resumes on a pool that grows: past the threshold, a cross-validated
    checkpoint goes on cross-validated (a fresh folder would be held-out)."""
    _train(data, tmp_path / "ckpt", steps=8)
    monkeypatch.setattr(options_module, "CROSS_VALIDATION_BELOW", 100)  # as if it had grown
    assert _train(data, tmp_path / "fresh", steps=8).extra["split"]["mode"] == "held_out"
    resumed = _train(data, tmp_path / "ckpt", steps=8, resume=True, forced=True)
    assert resumed.extra["split"]["mode"] == "cross_validation"
    assert resumed.extra["total_steps"] == 16


def test_a_held_out_ensemble_resumes_held_out(data: Path, tmp_path: Path) -> None:
    """A held-out run's five networks are no folds: resumed on a pool its size would
    cross-validate, it goes on held-out (its checkpoint's split says folds 0)."""
    _train(data, tmp_path / "ckpt", steps=8, options={"cross_validation": False})
    resumed = _train(data, tmp_path / "ckpt", steps=8, resume=True, forced=True)
    assert resumed.extra["split"]["mode"] == "held_out"
    assert resumed.extra["total_steps"] == 16


def test_resume_across_an_early_stopping_boundary_is_bitwise_exact(
    data: Path, tmp_path: Path
) -> None:
    """A cross-validated run stopped after its second validation and resumed ends with the
    weights, early-stopping state and out-of-fold metrics of an uninterrupted run."""
    whole = _train(data, tmp_path / "whole", steps=40)
    cap = whole.early_stop.history[1][0] + 3  # past the second validation
    _train(data, tmp_path / "cut", steps=cap)
    resumed = _train(data, tmp_path / "cut", steps=40 - cap, resume=True, forced=True)
    a = torch.load(whole.checkpoint, weights_only=True)  # type: ignore[arg-type]
    b = torch.load(resumed.checkpoint, weights_only=True)  # type: ignore[arg-type]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["early_stop"]["best_step"] == b["early_stop"]["best_step"]
    assert all(
        torch.equal(a["early_stop"]["best_weights"][k], b["early_stop"]["best_weights"][k])
        for k in a["early_stop"]["best_weights"]
    )
    assert resumed.eval == whole.eval and resumed.extra["total_steps"] == 40


def test_a_checkpoint_from_before_ensembles_loads_as_one_network() -> None:
    """Model configs saved before ``members`` existed are single networks."""
    config = ModelConfig.from_dict({"in_features": 7, "hidden": 8, "depth": 1, "dropout": 0.0})
    assert config.members == 1 and isinstance(build_world_model(config), WorldModel)
    with pytest.raises(ValueError, match="WorldModelEnsemble"):
        WorldModel(ModelConfig(7, members=3))
    out = build_world_model(ModelConfig(7, 8, 1, members=3))(torch.zeros(2, 7))
    assert isinstance(out, WorldModelOutput) and out.outcome_logits.shape == (2, 3)


def test_a_loop_layout_checkpoint_serves_and_resumes_into_the_stacked_ensemble(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint the loop layout wrote (members.K.* weights, an optimizer entry per
    member's parameter) serves the loop model's predictions, and 8 more steps in the
    stacked ensemble end where 16 steps of the loop layout do."""
    with monkeypatch.context() as patch:
        patch.setattr(WorldModelTask, "build_model", lambda self: LoopEnsemble(self.config))
        cut = _train(data, tmp_path / "cut", steps=8)
        whole = _train(data, tmp_path / "whole", steps=16)
    old = torch.load(cut.checkpoint, weights_only=True)  # type: ignore[arg-type]
    assert "members.4.trunk.0.weight" in old["model"] and "trunk.0.weight" not in old["model"]
    predictor = WorldModelPredictor.load(tmp_path / "cut")
    assert isinstance(predictor.model, WorldModelEnsemble)
    per_network = len(list(predictor.model.parameters()))  # stacked: one per layer's weight
    assert len(old["optimizer"][0]["state"]) == FOLDS * per_network  # one per member's
    loop = LoopEnsemble(predictor.model.config)
    loop.load_state_dict(old["early_stop"]["best_weights"] or old["model"])
    pool = read_trajectories(data)
    attempts = [e.attempt for e in pool.examples[:16]]
    x = predictor.encoder.encode(attempts, pool.pool)
    with torch.no_grad():
        want = torch.sigmoid(loop(x).success_logit).tolist()
    got = [p.success_probability for p in predictor.predict(attempts, pool.pool)]
    assert got == pytest.approx(want, abs=1e-6)

    resumed = _train(data, tmp_path / "cut", steps=8, resume=True, forced=True)
    assert resumed.extra["total_steps"] == 16
    a = torch.load(whole.checkpoint, weights_only=True)["model"]  # type: ignore[arg-type]
    b = torch.load(resumed.checkpoint, weights_only=True)["model"]  # type: ignore[arg-type]
    for name, t in b.items():
        loop_t = torch.stack([a[f"members.{k}.{name}"] for k in range(FOLDS)])
        assert torch.allclose(t, loop_t, atol=1e-5), name
