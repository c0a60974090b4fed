"""The promotion gate and the drift report read a read's columns: the same mask,
probabilities, comparison and report as from objects, and no object built on the way."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from se_darwin_runs import train

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequest
from genesis_fp16_infrastructure.data.fingerprint import (
    example_id_hashes,
    fingerprint,
    record_id_hash,
)
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import Example
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import gate, promotion
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.split import SPLIT_HASH, choose_split, is_held_out
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest

RECORDS = 3000
# drift_report's reports on two pools, written by the object-reading drift.py of 8036660
# (its drift_report(examples, pool, ...)): the columns must give the same dicts.
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


def _object_hashes(examples: list[Example]) -> gate.RecordHashes:
    """The hashes as the gate took them before the columns: from each example."""
    ids = np.array(example_id_hashes(examples), dtype=np.int64)
    return gate.RecordHashes([e.trajectory_id for e in examples], ids)


def _scored(models: dict[str, Path], name: str) -> gate.ScoredModel:
    return gate.ScoredModel(load_checkpoint(models[name]))


@pytest.mark.parametrize("pair", [("folds", "held_out"), ("held_out", "folds")])
def test_the_columns_give_the_objects_mask_probabilities_and_comparison(
    pools: tuple[Path, Path], models: dict[str, Path], pair: tuple[str, str]
) -> None:
    """Mask, numeric features, each model's probabilities (out of fold or not) and the
    held-out comparison are the same bits from the columns as from the objects."""
    candidate, served = _scored(models, pair[0]), _scored(models, pair[1])
    assert {candidate.folds > 1, served.folds > 1} == {True, False}
    data = read_trajectories(pools[1])
    mask = gate.comparison_mask(gate.RecordHashes.of_columns(data.columns), candidate, served)
    examples = data.examples
    want = gate.comparison_mask(_object_hashes(examples), candidate, served)
    assert np.array_equal(mask, want)
    # The new half and the held-out model's held-out part: some records, not all.
    assert 0.4 * len(mask) < mask.sum() < 0.9 * len(mask)
    picked = np.flatnonzero(mask)
    columns = gate.Records.of_columns(data.columns, picked)
    objects = gate.Records.of_examples([examples[i] for i in picked], data.pool)
    assert columns.ids == objects.ids
    assert torch.equal(columns.labels, objects.labels)
    assert torch.equal(columns.numeric, objects.numeric)
    for model in (candidate, served):
        for out_of_fold in (True, False):
            got = model.success_probability(columns, out_of_fold)
            assert torch.equal(got, model.success_probability(objects, out_of_fold))
    # The object path is the encoder's own encode() of the attempts, as before the columns.
    attempts = [examples[i].attempt for i in picked]
    with torch.no_grad():
        logit = served.model(served.encoder.encode(attempts, data.pool)).success_logit
    assert torch.equal(served.success_probability(columns, False), torch.sigmoid(logit.float()))
    got_cmp = gate.compare_on("held_out", columns, candidate, served, True)
    want_cmp = gate.compare_on("held_out", objects, candidate, served, True)
    assert got_cmp.passed is not None and not math.isnan(got_cmp.delta_auc)
    assert got_cmp == want_cmp


@pytest.mark.parametrize("case", json.loads(PINNED.read_text()), ids=lambda c: f"seed{c['seed']}")
def test_the_drift_report_from_columns_is_the_object_reports(
    case: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On two pools (one sampled, one with a renamed tool), the report from the columns
    equals the one the object-reading drift_report wrote, with or without ``numeric``."""
    monkeypatch.setattr(drift, "DRIFT_SAMPLE", case["drift_sample"])
    served_path, grown_path = _halves(tmp_path, case["records"], case["seed"], case["rename_grep"])
    served, grown = read_trajectories(served_path), read_trajectories(grown_path)
    seen = fingerprint(served.examples)
    report = drift.drift_report(grown.columns, seen, case["seed"])
    assert report is not None and report.to_json() == case["report"]
    numeric = gate.pool_numeric(grown.columns, grown.columns.labelled)
    again = drift.drift_report(grown.columns, seen, case["seed"], numeric)
    assert again is not None and again.to_json() == case["report"]


def _refuse(self: PoolColumns) -> Any:
    raise AssertionError("the hot path built every record as an object")


def test_the_drift_report_and_the_gate_build_no_object_per_record(
    pools: tuple[Path, Path], models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a fresh read, drift_report and the held-out comparison (promotion._compare)
    never build the read's examples or pool; their verdict is the objects' comparison."""
    data = read_trajectories(pools[1])
    seen = fingerprint(read_trajectories(pools[0]).examples)
    request = TrainRequest(
        agent="se_darwin",
        precision=PrecisionRequest("fp32"),
        precision_reason="test",
        state_dir=pools[1].parent,
        checkpoint_dir=pools[1].parent / "ckpt",
        data_path=pools[1],
    )
    served = promotion.Served({"id": "served"}, models["held_out"], models["held_out"])
    with monkeypatch.context() as patched:
        patched.setattr(PoolColumns, "examples", _refuse)
        patched.setattr(PoolColumns, "pool", _refuse)
        numeric = gate.pool_numeric(data.columns, data.columns.labelled)
        report = drift.drift_report(data.columns, seen, 0, numeric)
        verdict = promotion._compare(
            request.checkpoint_dir,
            models["folds"],
            served,
            data,
            request,
            TaskOptions(),
            numeric,
            None,
        )
    assert report is not None and report.new_records > 0
    assert "examples" not in vars(data) and "pool" not in vars(data)
    assert verdict.decided, verdict.reason
    # The check above can fail: asking for the objects caches them on the ReadResult.
    examples, pool = data.examples, data.pool
    assert "examples" in vars(data) and "pool" in vars(data)
    candidate, served_model = _scored(models, "folds"), _scored(models, "held_out")
    mask = gate.comparison_mask(_object_hashes(examples), candidate, served_model)
    records = gate.Records.of_examples([e for e, m in zip(examples, mask, strict=True) if m], pool)
    want = gate.compare_on("held_out", records, candidate, served_model, True)
    assert verdict.comparisons[0] == want
    whole = [c.name for c in verdict.comparisons if c.segment is None]
    assert whole == ["held_out", "newest"]  # and the served model's agents, one by one,
    # when the held-out records hold two or more (one agent: its question is the whole's)
    known = gate.known_segments(data.columns, served_model)
    several = len(set(records.segments)) >= 2
    asked = {c.segment for c in verdict.comparisons} - {None}
    assert asked == (known if several else set()), (asked, known, set(records.segments))


def test_each_model_is_judged_by_the_split_hash_it_was_drawn_with(
    pools: tuple[Path, Path], models: dict[str, Path]
) -> None:
    """A model trained before the split hash was kept (version 1) held out the records
    blake2b of (seed, id) picked; one of version 2 those its mix of the id hash picked:
    the gate asks each model's own, and its held-out part is what its run held out."""
    state = load_checkpoint(models["held_out"])
    new = gate.ScoredModel(state)
    assert new.split_hash == SPLIT_HASH
    old_state = json.loads(json.dumps(state["extra"], default=str))
    del old_state["split"]["hash"]
    old = gate.ScoredModel({**state, "extra": {**state["extra"], "split": old_state["split"]}})
    assert old.split_hash == 1
    served = read_trajectories(pools[0])  # what both read: only their held-out parts count
    hashes = gate.RecordHashes.of_columns(served.columns)
    held_new, held_old = new.held_out_for(hashes), old.held_out_for(hashes)
    ids = served.columns.example_ids
    assert held_old.tolist() == [is_held_out(i, old.seed, old.eval_fraction) for i in ids]
    options = TaskOptions.from_mapping({"cross_validation": False})
    task_split = choose_split(served, options, new.seed)
    assert task_split.rows is not None
    assert np.flatnonzero(held_new).tolist() == task_split.rows[2].tolist()
    assert not np.array_equal(held_new, held_old)
