"""The feature encoder uses only pre-attempt information and survives a save/load."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16_infrastructure.data.lineage import Pool, PoolEntry
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import Trajectory
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES, FeatureEncoder

POST_HOC = (
    "status",
    "success_score",
    "test_results",
    "metrics",
    "failure_reasons",
    "execution_time_seconds",
    "cost_dollars",
)


def _records(count: int = 400, seed: int = 5) -> list[dict[str, Any]]:
    return list(generate_pool(count, seed=seed)["trajectories"].values())


def _scores(records: list[dict[str, Any]]) -> dict[str, float]:
    return {r["trajectory_id"]: r["success_score"] for r in records if "success_score" in r}


def _encode(
    encoder: FeatureEncoder, records: list[dict[str, Any]], scores: dict[str, float]
) -> torch.Tensor:
    attempts = [Trajectory.model_validate(r).to_input() for r in records]
    return encoder.encode(attempts, scores)


def test_records_differing_only_in_outcome_encode_identically() -> None:
    """A success and a failure with the same plan give the same feature row."""
    records = _records()
    scores = _scores(records)
    encoder = FeatureEncoder.fit([Trajectory.model_validate(r).to_input() for r in records], scores)
    base = next(r for r in records if r.get("parent_trajectories"))
    good = {**base, "status": "success", "success_score": 0.95, "failure_reasons": []}
    bad = {
        **base,
        "status": "failure",
        "success_score": 0.02,
        "test_results": {"tasks_total": 10, "tasks_passed": 0, "tasks_failed": 10},
        "metrics": {"accuracy": 0.02, "speed": 0.1, "robustness": 0.0},
        "failure_reasons": ["everything broke"],
        "execution_time_seconds": 999.0,
        "cost_dollars": 12.5,
    }
    rows = _encode(encoder, [good, bad], scores)
    assert torch.equal(rows[0], rows[1])
    # The check can fail: a pre-attempt field does move the features.
    other = {
        **base,
        "operator_applied": "baseline" if base["operator_applied"] != "baseline" else "revision",
    }
    assert not torch.equal(_encode(encoder, [other], scores)[0], rows[0])


def test_shuffled_and_blanked_outcomes_give_identical_tensors() -> None:
    """Shuffling every record's post-hoc fields among records, or deleting them, leaves X as is."""
    records = _records()
    scores = _scores(records)
    encoder = FeatureEncoder.fit([Trajectory.model_validate(r).to_input() for r in records], scores)
    reference = _encode(encoder, records, scores)
    rng = random.Random(0)
    donors = records[:]
    rng.shuffle(donors)
    shuffled = [
        {**r, **{k: d[k] for k in POST_HOC if k in d}} for r, d in zip(records, donors, strict=True)
    ]
    blanked = [{k: v for k, v in r.items() if k not in POST_HOC} for r in records]
    assert torch.equal(_encode(encoder, shuffled, scores), reference)
    assert torch.equal(_encode(encoder, blanked, scores), reference)


def _unrelated(records: dict[str, Any], candidates: list[str]) -> list[str]:
    """Those of ``candidates`` (in order) that are no parent, grandparent or sibling of
    another one kept."""

    def near(key: str) -> set[str]:
        parents = set(records[key]["parent_trajectories"])
        grand = {g for p in parents & records.keys() for g in records[p]["parent_trajectories"]}
        siblings = {k for k, r in records.items() if parents & set(r["parent_trajectories"])}
        return parents | grand | siblings

    kept: list[str] = []
    for key in candidates:
        if all(key not in near(other) and other not in near(key) for other in kept):
            kept.append(key)
    return kept


def test_own_score_never_reaches_own_row_through_the_reader(tmp_path: Path) -> None:
    """Through the full read path (the pool's lineage included), changing one record's
    outcome leaves that record's row as is."""
    pool = generate_pool(300, seed=9)
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(pool))
    before = read_trajectories(path)
    encoder = FeatureEncoder.fit([e.attempt for e in before.examples], before.pool)
    rows_before = {
        e.trajectory_id: row
        for e, row in zip(
            before.examples,
            encoder.encode([e.attempt for e in before.examples], before.pool),
            strict=True,
        )
    }
    # Flipped together, so none in another's lineage: its flip would rightly move that row.
    targets = _unrelated(pool["trajectories"], [e.trajectory_id for e in before.examples[::37]])
    assert len(targets) >= 5
    for trajectory_id in targets:
        record = pool["trajectories"][trajectory_id]
        record["parent_trajectories"] = [*record["parent_trajectories"], trajectory_id]  # self-loop
        record["success_score"] = 1.0 - record["success_score"]
        record["status"] = "success" if record["success_score"] >= 0.7 else "failure"
    path.write_text(json.dumps(pool))
    after = read_trajectories(path)
    mine = [e for e in after.examples if e.trajectory_id in targets]
    rows_after = encoder.encode([e.attempt for e in mine], after.pool)
    for example, row in zip(mine, rows_after, strict=True):
        assert torch.equal(row, rows_before[example.trajectory_id])
    assert any(e.label != b.label for e, b in zip(after.examples, before.examples, strict=True))


def test_parent_scores_are_features() -> None:
    """Parents' recorded scores, looked up in the pool, change the features of their child."""
    records = _records()
    scores = _scores(records)
    encoder = FeatureEncoder.fit([Trajectory.model_validate(r).to_input() for r in records], scores)
    child = next(r for r in records if r.get("parent_trajectories"))
    low = {**scores, **{p: 0.0 for p in child["parent_trajectories"]}}
    high = {**scores, **{p: 1.0 for p in child["parent_trajectories"]}}
    assert not torch.equal(_encode(encoder, [child], low), _encode(encoder, [child], high))


def test_state_round_trip_is_plain_and_exact() -> None:
    """state_dict() is JSON-able, and the restored encoder gives bit-identical features."""
    records = _records()
    scores = _scores(records)
    encoder = FeatureEncoder.fit([Trajectory.model_validate(r).to_input() for r in records], scores)
    state = json.loads(json.dumps(encoder.state_dict()))
    restored = FeatureEncoder.from_state(state)
    assert restored == encoder
    assert torch.equal(_encode(restored, records, scores), _encode(encoder, records, scores))
    assert _encode(encoder, records, scores).shape == (len(records), encoder.n_features)


def test_the_fitted_count_is_saved_and_an_older_save_without_it_still_reads() -> None:
    """A fit says how many records it was fitted on, in its state; a version-2 state
    without it (saved before issue 90) reads as not saying (None) and saves as it was;
    a fitted count that is not a count of records is refused in one line."""
    records = _records(60)
    scores = _scores(records)
    encoder = FeatureEncoder.fit([Trajectory.model_validate(r).to_input() for r in records], scores)
    state = encoder.state_dict()
    assert encoder.fitted == state["fitted"] == 60
    older = {k: v for k, v in state.items() if k != "fitted"}
    restored = FeatureEncoder.from_state(older)
    assert restored.fitted is None and restored.state_dict() == older
    assert torch.equal(_encode(restored, records, scores), _encode(encoder, records, scores))
    for bad in (0, -3, 2.5, "60", True):
        with pytest.raises(ValueError, match=r"fitted .* is not a count of records"):
            FeatureEncoder.from_state({**state, "fitted": bad})


def test_unknown_encoder_version_is_refused() -> None:
    """A saved encoder from another version is refused with a message naming the version."""
    records = _records(50)
    scores = _scores(records)
    state = FeatureEncoder.fit(
        [Trajectory.model_validate(r).to_input() for r in records], scores
    ).state_dict()
    with pytest.raises(ValueError, match="version 99"):
        FeatureEncoder.from_state({**state, "version": 99})


def test_an_encoder_is_not_fitted_on_no_attempts() -> None:
    """fit on no attempts (and no numbers) is refused with one sentence, not a NaN mean."""
    with pytest.raises(ValueError, match="cannot fit a feature encoder on no attempts"):
        FeatureEncoder.fit([], {})


def test_lineage_file_change_and_agent_features() -> None:
    """Earlier siblings' scores, the files touched, the diff's added share and the agent's
    base rate change the row; an agent unseen in training sits at the overall rate."""
    records = _records()
    attempts = [Trajectory.model_validate(r).to_input() for r in records]
    successes = [r.get("success_score", 0.0) >= 0.7 for r in records]
    agents = [replace(a, agent="good" if i % 2 else "bad") for i, a in enumerate(attempts)]
    labels = [i % 2 == 1 for i in range(len(agents))]
    encoder = FeatureEncoder.fit(agents, _scores(records), labels)
    rates = dict(encoder.agent_rates)
    assert rates["good"] > encoder.base_rate > rates["bad"]
    rows = encoder.encode([replace(attempts[0], agent=a) for a in ("good", "bad", "new")], {})
    assert rows[0, -1] > 0 > rows[1, -1] and rows[2, -1] == 0
    encoder = FeatureEncoder.fit(attempts, _scores(records), successes)
    child = next(a for a in attempts if a.parent_ids)
    parent = child.parent_ids[0]
    sibling = {"s": PoolEntry(0.0, (parent,), "revision", 0.0)}
    lonely = Pool({parent: PoolEntry(0.5)})
    crowded = Pool({parent: PoolEntry(0.5), **sibling})
    when = replace(child, created=1.0)
    assert not torch.equal(encoder.encode([when], lonely), encoder.encode([when], crowded))
    variants = [
        replace(child, modified_files=("tests/test_x.py",)),
        replace(child, modified_files=("config.yaml",)),
        replace(child, code_changes="@@\n+ a\n+ b"),
        replace(child, code_changes="@@\n- a\n- b"),
    ]
    x = encoder.encode(variants, {})
    assert not torch.equal(x[0], x[1]) and not torch.equal(x[2], x[3])


def test_encoder_saved_before_version_2_is_refused_with_a_way_out() -> None:
    """A version-1 encoder (before the lineage features) fails with a message saying to
    retrain into a fresh checkpoint folder, not with a shape error mid-run."""
    records = _records(50)
    state = FeatureEncoder.fit(
        [Trajectory.model_validate(r).to_input() for r in records], _scores(records)
    ).state_dict()
    with pytest.raises(ValueError, match=r"version 1 .*fresh checkpoint folder"):
        FeatureEncoder.from_state({**state, "version": 1})


def test_a_column_constant_in_training_encodes_to_exact_zero() -> None:
    """One hunk per diff and one agent in training: those columns are exactly 0.0 (float
    dust there flushed to zero in fp16 while fp32 kept its gradient), and another value
    later stays finite instead of being divided by a clamped spread."""
    records = _records()
    attempts = [Trajectory.model_validate(r).to_input() for r in records]
    successes = [r.get("success_score", 0.0) >= 0.7 for r in records]
    encoder = FeatureEncoder.fit(attempts, _scores(records), successes)
    x = encoder.encode(attempts, _scores(records))
    hunks = list(NUMERIC_FEATURES).index("log_hunks")
    assert torch.all(x[:, hunks] == 0.0) and torch.all(x[:, -1] == 0.0)
    three = replace(attempts[0], code_changes="@@\n+ a\n@@\n+ b\n@@\n- c")
    assert 0 < float(encoder.encode([three], {})[0, hunks]) < 10
