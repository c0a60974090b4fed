"""The ``first`` fixture: one first se_darwin model served, trained once per test module
that takes it (test_kept_outputs, test_gate_takes_evaluation); each test copies it."""

from __future__ import annotations

from pathlib import Path

import pytest
from first_served import RECORDS, write_pool
from se_darwin_runs import train


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ``first/`` holds a first model served (``ck``) on a pool of
    RECORDS (``data``), trained without a budget (nothing kept); each test copies it."""
    tmp = tmp_path_factory.mktemp("first_served")
    write_pool(tmp / "first" / "data", "pool.json", RECORDS, seed=40)
    result = train(tmp / "first" / "data", tmp / "first" / "ck", steps=40)
    assert result.gate is not None and result.gate.outcome == "promoted"
    return tmp
