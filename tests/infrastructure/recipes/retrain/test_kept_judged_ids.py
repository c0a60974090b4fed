"""The judged ids of a pool kept in a resident process (issue 90 item 4): a pool grown at
its end names its new records alone, and a relabel, an edit or a removal names them all
again, the ids always those named from nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pool_files import Pool, read_files

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.schema import judged_id
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import split

BUDGET = 64 * 2**20


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    """Each test starts with nothing kept and no counts."""
    kept_in_memory._PROCESS.clear()
    split.JUDGED.clear()
    yield
    kept_in_memory._PROCESS.clear()
    split.JUDGED.clear()


def _from_nothing(columns: PoolColumns) -> tuple[str, ...]:
    keys = columns.key.tolist()
    return tuple(judged_id(i, k) for i, k in zip(columns.example_ids, keys, strict=True))


def test_a_pool_grown_at_its_end_names_its_new_records_alone(tmp_path: Path) -> None:
    """A new file sorting last: the kept records' ids are taken, the new ones alone named
    (without the kept ids: every one), the ids those named from nothing."""
    old, new = generate_pool(1200, 99), generate_pool(200, 3099)
    first = read_files(tmp_path / "data", {"a.json": old})
    split.judged_ids(first, BUDGET)
    grown = read_files(tmp_path / "data", {"a.json": old, "b.json": new})
    split.JUDGED.clear()
    ids = split.judged_ids(grown, BUDGET)
    assert split.JUDGED["taken"] == len(first.labelled)
    assert split.JUDGED["named"] == len(grown.labelled) - len(first.labelled)
    assert ids == _from_nothing(grown)
    with pytest.raises(AttributeError):  # a tuple: no caller changes the kept ids
        ids.append("changed by a caller")  # type: ignore[attr-defined]
    assert split.judged_ids(grown, BUDGET) == _from_nothing(grown)


def _relabel(pool: Pool) -> None:
    record = [r for r in pool["trajectories"].values() if "success_score" in r][3]
    record["success_score"] = 1.0 - record["success_score"]


def _edit(pool: Pool) -> None:
    record = [r for r in pool["trajectories"].values() if "success_score" in r][5]
    record["operator_applied"] = "rewrite"


def _remove(pool: Pool) -> None:
    del pool["trajectories"][list(pool["trajectories"])[7]]


@pytest.mark.parametrize("change", [_relabel, _edit, _remove], ids=lambda f: f.__name__[1:])
def test_a_changed_pool_names_every_record_again(
    tmp_path: Path, change: Callable[[Pool], None]
) -> None:
    """A relabel, an edit or a removal among the kept records: the kept ids are stale
    (counted), every record is named again, and the ids are those named from nothing."""
    old = generate_pool(1200, 99)
    split.judged_ids(read_files(tmp_path / "data", {"a.json": old}), BUDGET)
    change(old)
    columns = read_files(tmp_path / "data", {"a.json": old})
    split.JUDGED.clear()
    assert split.judged_ids(columns, BUDGET) == _from_nothing(columns)
    assert split.JUDGED["stale"] == 1 and split.JUDGED["taken"] == 0


def test_budget_zero_keeps_nothing(tmp_path: Path) -> None:
    """Without a budget every record is named, every time."""
    columns = read_files(tmp_path / "data", {"a.json": generate_pool(600, 99)})
    split.judged_ids(columns, 0)
    split.judged_ids(columns, 0)
    assert split.JUDGED["named"] == 2 * len(columns.labelled) and split.JUDGED["taken"] == 0
