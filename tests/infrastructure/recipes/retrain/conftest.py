"""The ``first`` fixture: one first se_darwin model served, trained once per test module
that takes it (test_kept_outputs, test_gate_takes_evaluation); each test copies it. And
``fresh_drift_memory``: a test starts and ends with this process's memory store and the
drift reference's counts empty (the drift reference's tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from first_served import RECORDS, write_pool
from se_darwin_runs import train

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure import kept_in_memory


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ``first/`` holds a first model served (``ck``) on a pool of
    RECORDS (``data``), trained without a budget (nothing kept); each test copies it."""
    tmp = tmp_path_factory.mktemp("first_served")
    write_pool(tmp / "first" / "data", "pool.json", RECORDS, seed=40)
    result = train(tmp / "first" / "data", tmp / "first" / "ck", steps=40)
    assert result.gate is not None and result.gate.outcome == "promoted"
    return tmp


@pytest.fixture
def fresh_drift_memory() -> Iterator[None]:
    """Nothing kept and no counts, before the test and after it."""
    kept_in_memory._PROCESS.clear()
    drift.KEPT.clear()
    yield
    kept_in_memory._PROCESS.clear()
    drift.KEPT.clear()
