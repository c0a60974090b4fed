"""The promotion gate reads a read's columns: the same mask, probabilities and comparison
as from objects."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from se_darwin_runs import train

from genesis_fp16_agents.se_darwin import gate
from genesis_fp16_infrastructure.data.fingerprint import example_id_hashes, record_id_hash
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import Example
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint

RECORDS = 3000


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
