"""se_darwin's judged scores and its drift report read a read's columns: the same
losses and report as from objects, no object built on the way; and its models train on
none of the records the judged run holds out."""

from __future__ import annotations

import gc
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from se_darwin_runs import train

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure.contract.agent_snapshot import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.contract.judging import TRAINED_IDS
from genesis_fp16_infrastructure.contract.split import HELD_OUT, ScoreOnly
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import record_id_hash
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import scoring
from genesis_fp16_infrastructure.recipes.retrain.split import judged_ids
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint
from genesis_fp16_infrastructure.training.checkpoint_arrays import with_arrays
from genesis_fp16_infrastructure.training.run.early_stop import served_weights
from genesis_fp16_infrastructure.world_model import features, predict
from genesis_fp16_infrastructure.world_model.features import (
    Categorical,
    FeatureEncoder,
    numeric_columns,
    numeric_rows,
)
from genesis_fp16_infrastructure.world_model.model import (
    ModelConfig,
    WorldModelEnsemble,
    build_world_model,
)
from genesis_fp16_infrastructure.world_model.predict import read_world_model_state

RECORDS = 3000
# drift_report's reports on two pools, written by the object-reading drift.py of 8036660
# (its drift_report(examples, pool, ...)): the columns must give the same dicts. The sampled
# one (seed 7) pinned again at drift35, its reference's sample drawn by record hash
# (drift_reference): its flags the same.
PINNED = Path(__file__).with_name("drift_reports_before_columns.json")


def _halves(tmp: Path, records: int, seed: int, rename_grep: bool = False) -> tuple[Path, Path]:
    """A random half of a generated pool (what the served model read) and the whole pool,
    its other half's "grep" renamed "ripgrep" when asked, as two files."""
    pool = generate_pool(records, seed=seed)
    ids = sorted(pool["trajectories"], key=lambda k: record_id_hash(f"{seed}:{k}"))
    half = {**pool, "trajectories": {k: pool["trajectories"][k] for k in ids[: records // 2]}}
    half = json.loads(json.dumps(half))  # a copy: the edit below is the whole pool's alone
    if rename_grep:
        for key in ids[records // 2 :]:
            record = pool["trajectories"][key]
            record["tools_used"] = ["ripgrep" if t == "grep" else t for t in record["tools_used"]]
    tmp.mkdir(parents=True, exist_ok=True)
    served, grown = tmp / "served.json", tmp / "grown.json"
    served.write_text(json.dumps(half))
    grown.write_text(json.dumps(pool))
    return served, grown


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _halves(tmp_path_factory.mktemp("pools"), RECORDS, seed=11)


@pytest.fixture(scope="module")
def models(pools: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two checkpoints trained on the served half: a held-out one and a cross-validated one."""
    out = {}
    for name, cross in (("held_out", False), ("folds", True)):
        folder = tmp_path_factory.mktemp(name)
        result = train(pools[0], folder / "ckpt", options={"cross_validation": cross})
        assert result.checkpoint is not None
        out[name] = Path(result.checkpoint)
    return out


def _request(data: Path) -> TrainRequest:
    return TrainRequest(
        agent="se_darwin",
        precision="fp32",
        precision_reason="test",
        state_dir=data.parent,
        checkpoint_dir=data.parent / "ckpt",
        data_path=data,
    )


@pytest.mark.parametrize("name", ["held_out", "folds"])
def test_a_models_checkpoint_names_only_records_the_judged_run_does_not_hold_out(
    pools: tuple[Path, Path], models: dict[str, Path], name: str
) -> None:
    """Held-out split or folds, the checkpoint's trained_ids are every record of its pool
    but those HELD_OUT holds out: none held out, none missing."""
    ids = judged_ids(read_trajectories(pools[0]).columns)  # id and label-and-inputs hash
    state = with_arrays(load_checkpoint(models[name]), models[name])  # from its side file
    named = state["extra"][TRAINED_IDS]  # their hashes, a tensor
    held = HELD_OUT.of_ids(ids)
    kept = [i for i, h in zip(ids, held.tolist(), strict=True) if not h]
    assert sorted(named.tolist()) == sorted(TrainRequest.trained_ids(kept).tolist())
    assert 0 < int(held.sum()) < len(ids)


def _refuse(self: PoolColumns) -> Any:
    raise AssertionError("the hot path built every record as an object")


def test_the_scores_build_no_object_per_record_and_equal_the_objects(
    pools: tuple[Path, Path], models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """score_records never builds the read's examples or pool; each record's losses are
    the clipped log-loss (primary) and the Brier score of the model's P(success) from the
    examples' own features, and its segment is the record's Genesis agent."""
    with monkeypatch.context() as patched:
        patched.setattr(PoolColumns, "examples", _refuse)
        patched.setattr(PoolColumns, "pool", _refuse)
        losses = scoring.score_records(models["folds"], _request(pools[1]))
    data = read_trajectories(pools[1])
    examples, pool = data.examples, data.pool
    assert losses.ids == judged_ids(data.columns)
    assert [i.split("#")[0] for i in losses.ids] == [e.trajectory_id for e in examples]
    assert losses.segments == tuple(e.attempt.agent for e in examples)
    state = load_checkpoint(models["folds"])
    saved = read_world_model_state(state)
    model = build_world_model(ModelConfig.from_dict(saved["model"])).eval()
    model.load_state_dict(served_weights(state))
    attempts = [e.attempt for e in examples]
    encoder = FeatureEncoder.from_state(saved["encoder"])
    x = encoder.encode_parts(Categorical.of(attempts), numeric_columns(attempts, pool))
    with torch.no_grad():
        p = torch.sigmoid(model(x).success_logit.float())
    success = np.array([e.label.success for e in examples])
    want = scoring.record_losses(p, success)["log_loss"]
    np.testing.assert_allclose(np.array(losses.column()), want, rtol=1e-6, atol=1e-9)
    assert max(losses.column()) <= scoring.LOSS_SPAN + 1e-12
    assert losses.primary == "log_loss" and losses.metrics() == ("log_loss", "brier")
    q = p.double().clamp(scoring.CLIP, 1 - scoring.CLIP).numpy()
    np.testing.assert_allclose(np.array(losses.column("brier")), (q - success) ** 2, rtol=1e-6)


def test_asked_for_some_records_it_scores_those_alone_and_the_same(
    pools: tuple[Path, Path], models: dict[str, Path]
) -> None:
    """With ``score_only`` (the judged run's gate and watch), se_darwin scores exactly the
    records asked for, in the pool's order, each with the losses and segment a scoring
    of every record gives it."""
    whole = scoring.score_records(models["held_out"], _request(pools[1]))
    wanted = [i for n, i in enumerate(whole.ids) if n % 7 == 3]
    only = ScoreOnly(frozenset(wanted))
    part = scoring.score_records(models["held_out"], replace(_request(pools[1]), score_only=only))
    assert list(part.ids) == wanted
    at = {i: n for n, i in enumerate(whole.ids)}
    assert whole.segments is not None and part.segments is not None
    assert list(part.segments) == [whole.segments[at[i]] for i in wanted]
    for metric in ("log_loss", "brier"):
        want = [whole.column(metric)[at[i]] for i in wanted]
        np.testing.assert_allclose(part.column(metric), want, rtol=1e-6, atol=1e-9)
    none = replace(_request(pools[1]), score_only=ScoreOnly(frozenset()))
    empty = scoring.score_records(models["held_out"], none)  # a gate with no record to judge
    assert empty.ids == () and empty.column("brier") == ()


def test_one_runs_scorings_share_its_pool_and_another_run_reads_it_again(
    pools: tuple[Path, Path], models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scorings of one run (one plan's snapshot) read the pool once and build every
    record's inputs once: a later scoring of a part, by another model, gives exactly the
    losses a fresh read gives. A scoring of another plan, or of none, reads it again; the
    pool is forgotten with its plan, and only with its own."""
    reads: list[object] = []  # the data paths read (a request would keep its plan alive)
    real = scoring.read_pool
    monkeypatch.setattr(
        scoring, "read_pool", lambda req, *a: reads.append(req.data_path) or real(req, *a)
    )
    plan = AgentSnapshot(None, data=DataCheck(None))
    request = replace(_request(pools[1]), snapshot=plan)
    whole = scoring.score_records(models["folds"], request)
    wanted = [i for i in whole.ids if i.endswith("7") or i.endswith("3")]
    part = replace(request, score_only=ScoreOnly(frozenset(wanted)))
    shared = scoring.score_records(models["held_out"], part)
    assert len(reads) == 1 and list(shared.ids) == wanted
    fresh = scoring.score_records(models["held_out"], replace(part, snapshot=None))
    assert shared == fresh and len(reads) == 2
    other = replace(part, snapshot=AgentSnapshot(None, data=DataCheck(None)))
    assert scoring.score_records(models["held_out"], other) == fresh and len(reads) == 3
    del plan, request, part
    gc.collect()  # the first plan gone: the pool kept is the later one's, still there
    assert scoring._RUN_POOL and scoring._RUN_POOL[0].plan() is other.snapshot.data
    del other
    gc.collect()
    assert not scoring._RUN_POOL


def test_scorings_take_the_kept_numeric_rows(
    pools: tuple[Path, Path],
    models: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """With the plan's scan (so a record cache), a run's scorings take every record's
    numeric rows from those kept beside it (world_model.kept_numeric): the next run's
    scorings work none out, and score as a scoring without kept rows does."""
    folder = tmp_path / "data"
    folder.mkdir()
    shutil.copy2(pools[1], folder / "grown.json")
    request = _request(folder)

    def planned() -> TrainRequest:  # a run's plan: the files as it scanned them
        return replace(request, snapshot=AgentSnapshot(None, data=DataCheck(scan_files(folder)[0])))

    first = scoring.score_records(models["folds"], planned())
    calls: list[int] = []
    real = features.numeric_rows

    def counted(columns: PoolColumns, rows: np.ndarray) -> torch.Tensor:
        calls.append(len(rows))
        return real(columns, rows)

    monkeypatch.setattr(features, "numeric_rows", counted)
    again = scoring.score_records(models["folds"], planned())
    assert calls == [] and again == first
    monkeypatch.setattr(features, "numeric_rows", real)
    assert scoring.score_records(models["folds"], request) == first  # no plan: worked out


@pytest.mark.parametrize("case", json.loads(PINNED.read_text()), ids=lambda c: f"seed{c['seed']}")
def test_the_drift_report_from_columns_is_the_object_reports(
    case: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On two pools (one sampled, one with a renamed tool), the report from the columns
    equals the one the object-reading drift_report wrote, with or without ``numeric``."""
    monkeypatch.setattr(drift, "DRIFT_SAMPLE", case["drift_sample"])
    served_path, grown_path = _halves(tmp_path, case["records"], case["seed"], case["rename_grep"])
    served, grown = read_trajectories(served_path), read_trajectories(grown_path)
    seen = fingerprint_of(served.columns)
    report = drift.drift_report(grown.columns, seen, case["seed"])
    assert report is not None and report.to_json() == case["report"]
    numeric = numeric_rows(grown.columns, grown.columns.labelled)
    again = drift.drift_report(grown.columns, seen, case["seed"], numeric)
    assert again is not None and again.to_json() == case["report"]


def test_a_scoring_runs_its_forward_in_bounded_chunks_and_gives_the_same_losses(
    pools: tuple[Path, Path], models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 90: the judged run's scoring (the served model's, the candidate's) runs no
    forward over more rows than ``CHUNK_ACTIVATIONS`` allows, and gives the losses of
    one forward over every record (within a float32 rounding)."""
    whole = scoring.score_records(models["held_out"], _request(pools[1]))
    seen: list[int] = []
    real = WorldModelEnsemble.forward

    def counted(self: WorldModelEnsemble, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        seen.append(len(x))
        return real(self, x, *args, **kwargs)

    monkeypatch.setattr(WorldModelEnsemble, "forward", counted)
    config = ModelConfig.from_dict(
        read_world_model_state(load_checkpoint(models["held_out"]))["model"]
    )
    assert config.members > 1 and len(whole.ids) > 100
    monkeypatch.setattr(predict, "CHUNK_ACTIVATIONS", 100 * config.hidden * config.members)
    monkeypatch.setattr(predict, "MIN_CHUNK_ROWS", 1)  # chunks below the floor, to see them
    chunked = scoring.score_records(models["held_out"], _request(pools[1]))
    assert max(seen) <= 100 and sum(seen) == len(whole.ids)
    assert chunked.ids == whole.ids and chunked.segments == whole.segments
    for metric in ("log_loss", "brier"):
        np.testing.assert_allclose(
            chunked.column(metric), whole.column(metric), rtol=1e-5, atol=1e-7
        )
