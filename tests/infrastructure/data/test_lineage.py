"""The pool index: depth, grandparents, parents' operators and only earlier siblings."""

from __future__ import annotations

import json
import math
from pathlib import Path

from genesis_fp16_infrastructure.data.lineage import Pool, PoolEntry
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import AttemptInput, created_seconds
from genesis_fp16_infrastructure.world_model.features import LINEAGE_FEATURES
from genesis_fp16_infrastructure.world_model.lineage_columns import lineage_columns


def _pool() -> Pool:
    return Pool(
        {
            "root": PoolEntry(0.2, (), "baseline", 0.0),
            "mid": PoolEntry(0.6, ("root",), "refinement", 1.0),
            "early": PoolEntry(0.9, ("mid",), "revision", 2.0),
            "late": PoolEntry(0.1, ("mid",), "revision", 9.0),
            "pending": PoolEntry(None, ("mid",), "revision", 3.0),
            "undated": PoolEntry(0.5, ("mid",), "revision", None),
            "loop": PoolEntry(0.5, ("loop2",), "revision", 1.0),
            "loop2": PoolEntry(0.5, ("loop",), "revision", 1.0),
        }
    )


def _lineage(pool: Pool, me: str, parents: tuple[str, ...], created: float | None) -> dict:
    """The attempt's lineage features by name (worked out by world_model.lineage_columns)."""
    attempt = AttemptInput(trajectory_id=me, parent_ids=parents, created=created)
    return dict(zip(LINEAGE_FEATURES, lineage_columns([attempt], pool)[0].tolist(), strict=True))


def test_lineage_sees_depth_grandparents_operators_and_only_earlier_siblings() -> None:
    """Siblings count only when scored and created before the attempt; its own id never
    counts; the depth follows the deepest parent; grandparents' scores are looked up."""
    pool = _pool()
    lineage = _lineage(pool, "me", ("mid",), created=5.0)
    assert lineage["log_depth"] == math.log1p(2)
    assert lineage["grandparent_score_mean"] == 0.2 and lineage["grandparent_score_known"] == 1
    assert lineage["parents_refinement"] == 1.0
    # not late (after), pending, undated
    assert lineage["log_siblings"] == math.log1p(1) and lineage["sibling_score_mean"] == 0.9
    assert _lineage(pool, "early", ("mid",), created=2.0)["log_siblings"] == 0  # itself
    assert _lineage(pool, "me", ("mid",), created=None)["log_siblings"] == 0  # when? unknown
    assert _lineage(pool, "me", (), created=5.0)["log_depth"] == 0
    assert _lineage(pool, "me", ("loop",), created=5.0)["log_depth"] >= math.log1p(1)  # ends


def test_scores_only_pool_knows_parents_and_nothing_beyond() -> None:
    """A plain score mapping gives parents' scores, no grandparents or siblings."""
    pool = Pool.from_scores({"a": 0.3})
    lineage = _lineage(pool, "me", ("a",), created=1.0)
    assert pool.scores == {"a": 0.3}
    assert lineage["parent_score_mean"] == 0.3 and lineage["log_depth"] == math.log1p(1)
    assert lineage["grandparent_score_known"] == 0 == lineage["log_siblings"]


def test_reader_builds_the_pool_from_every_valid_record(tmp_path: Path) -> None:
    """Pending records resolve as parents (no score); created_at is read as seconds."""
    records = {
        "p": {"trajectory_id": "p", "status": "pending", "created_at": "2025-01-06T09:00:00"},
        "c": {
            "trajectory_id": "c",
            "status": "success",
            "success_score": 0.9,
            "parent_trajectories": ["p"],
            "operator_applied": "revision",
            "created_at": 1736154060.0,
        },
    }
    path = tmp_path / "pool.json"
    path.write_text(json.dumps({"trajectories": records}))
    pool = read_trajectories(path).pool
    assert pool.entries["p"] == PoolEntry(None, (), "baseline", 1736154000.0)
    assert pool.entries["c"].parents == ("p",) and pool.scores == {"c": 0.9}
    assert created_seconds("not a time") is None
