"""The synthetic pool generator: deterministic, realistic shape, learnable and consistent."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.data.schema import Trajectory, TrajectoryPool
from genesis_fp16_infrastructure.data.synthetic import (
    generate_pool,
    generate_pool_with_truth,
    write_pool,
)


def test_same_seed_same_bytes_other_seed_other_data(tmp_path: Path) -> None:
    """Two runs with one seed write identical files; another seed writes different data."""
    a = write_pool(tmp_path / "a", 200, seed=7).read_bytes()
    b = write_pool(tmp_path / "b", 200, seed=7).read_bytes()
    c = write_pool(tmp_path / "c", 200, seed=8).read_bytes()
    assert a == b
    assert a != c


def test_pool_has_the_real_layout(tmp_path: Path) -> None:
    """The file sits at trajectory_pools/<agent>/trajectory_pool.json with the pool header."""
    path = write_pool(tmp_path, 50, seed=0, agent="demo")
    assert path == tmp_path / "trajectory_pools" / "demo" / "trajectory_pool.json"
    document = json.loads(path.read_text())
    assert {
        "agent_name",
        "max_trajectories",
        "success_threshold",
        "failure_threshold",
        "total_added",
        "total_pruned",
        "saved_at",
        "trajectories",
    } <= document.keys()
    pool = TrajectoryPool.model_validate(document)
    assert (pool.success_threshold, pool.failure_threshold) == (0.7, 0.3)
    for key, raw in pool.trajectories.items():
        assert Trajectory.model_validate(raw).trajectory_id == key


def test_post_hoc_fields_agree_with_the_score() -> None:
    """metrics.accuracy equals the score, tests passed follow it, failures carry reasons."""
    records = generate_pool(500, seed=1)["trajectories"].values()
    scored = [r for r in records if "success_score" in r]
    assert len(scored) > 450
    for r in scored:
        assert r["metrics"]["accuracy"] == r["success_score"]
        tests = r["test_results"]
        assert tests["tasks_passed"] + tests["tasks_failed"] == tests["tasks_total"]
        assert abs(tests["tasks_passed"] / tests["tasks_total"] - r["success_score"]) <= 0.11
        assert (r["success_score"] >= 0.7) == (r["failure_reasons"] == [])
    statuses = {r["status"] for r in records}
    assert {"success", "partial_success", "failure", "pending"} <= statuses


OPS = ("baseline", "refinement")


def test_outcome_depends_on_operator_parents_and_tools() -> None:
    """Refinement beats baseline, good parents give good children, pytest helps."""
    records = [r for r in generate_pool(3000, seed=2)["trajectories"].values()]
    scores = {r["trajectory_id"]: r.get("success_score") for r in records}
    scored = [r for r in records if r.get("success_score") is not None]

    def mean(rs: list[dict[str, object]]) -> float:
        return statistics.fmean(float(r["success_score"]) for r in rs)  # type: ignore[arg-type]

    by_op = {op: [r for r in scored if r["operator_applied"] == op] for op in OPS}
    assert mean(by_op["refinement"]) > mean(by_op["baseline"]) + 0.1
    with_pytest = [r for r in scored if "pytest" in r["tools_used"]]
    without = [r for r in scored if "pytest" not in r["tools_used"]]
    assert mean(with_pytest) > mean(without) + 0.05
    pairs = [
        (scores[p], r["success_score"])
        for r in scored
        for p in r["parent_trajectories"]
        if scores.get(p) is not None
    ]
    parent, child = zip(*pairs, strict=True)
    assert statistics.correlation(parent, child) > 0.2


def test_files_change_kind_lineage_and_agent_carry_signal() -> None:
    """Touching tests beats touching configuration, adding beats removing, earlier
    siblings' scores track an attempt's, and another agent has its own base rate."""
    records = list(generate_pool(4000, seed=3)["trajectories"].values())
    scored = [r for r in records if r.get("success_score") is not None]

    def mean(rs: list[dict[str, Any]]) -> float:
        return statistics.fmean(float(r["success_score"]) for r in rs)

    tests = [r for r in scored if any(f.startswith("tests/") for f in r["modified_files"])]
    config = [r for r in scored if "config.yaml" in r["modified_files"]]
    assert mean(tests) > mean(config) + 0.05

    def added(r: dict[str, Any]) -> float:
        lines = r["code_changes"].splitlines()[1:]
        return sum(line.startswith("+") for line in lines) / max(len(lines), 1)

    assert mean([r for r in scored if added(r) > 0.7]) > mean([r for r in scored if added(r) < 0.3])
    by_parent: dict[str, list[float]] = {}
    for r in scored:
        if len(r["parent_trajectories"]) == 1:
            by_parent.setdefault(r["parent_trajectories"][0], []).append(r["success_score"])
    pairs = [(s[0], s[1]) for s in by_parent.values() if len(s) >= 2]
    first, second = zip(*pairs, strict=True)
    assert statistics.correlation(first, second) > 0.1
    qa = [r for r in generate_pool(2000, seed=3, agent="qa")["trajectories"].values()]
    assert {r["agent_name"] for r in qa} == {"qa"}
    assert mean([r for r in qa if r.get("success_score") is not None]) < mean(scored) - 0.03


def test_the_truth_is_each_records_chance_and_stays_out_of_the_records() -> None:
    """generate_pool_with_truth's probabilities are calibrated (the labelled records'
    success rate, overall and in each fifth by the truth, is their mean truth) and no
    record holds them."""
    pool, truth = generate_pool_with_truth(4000, seed=3)
    assert pool == generate_pool(4000, seed=3)
    records = pool["trajectories"].items()
    scored = [(truth[i].probability, r["success_score"] >= 0.7) for i, r in records
              if r.get("success_score") is not None]  # fmt: skip
    scored.sort()
    fifth = len(scored) // 5
    for part in (scored, *(scored[k * fifth : (k + 1) * fifth] for k in range(5))):
        expected = statistics.mean(p for p, _ in part)
        spread = 3 * (expected * (1 - expected) / len(part)) ** 0.5 + 0.005
        assert abs(statistics.mean(s for _, s in part) - expected) < spread
    text = json.dumps(pool)
    assert not any(repr(truth[i].probability) in text for i in list(truth)[:50])
