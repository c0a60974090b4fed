"""A record is drawn once (issue 90, item 2): a resident run process keeps a pool's split
draws (recipes.retrain.kept_split), and the next pool's split is the one split_examples
draws, bit for bit; a stale or planted entry is refused and every record drawn again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from genesis_fp16_infrastructure.contract.split import drawn_with, sorted_unique
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.recipes.retrain import kept_split
from genesis_fp16_infrastructure.recipes.retrain.kept_split import KIND, KeptSplit, merged
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.split import Split, split_examples
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric

SEED = 7


def _write(folder: Path, name: str, pool: dict[str, Any], records: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    trajectories = {r["trajectory_id"]: r for r in records}
    (folder / name).write_text(json.dumps({**pool, "trajectories": trajectories}))


def _same(a: Split, b: Split) -> bool:
    arrays = all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a[:3], b[:3], strict=True)
    )
    return arrays and a[3:] == b[3:]


def _known(data: ReadResult, split: Split) -> tuple[np.ndarray, np.ndarray]:
    columns = data.columns
    known = np.concatenate((split.train, split.validation))
    return (
        sorted_unique(columns.judged[known]),
        sorted_unique(columns.id_hash[columns.labelled[known]]),
    )


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReadResult, ReadResult, Path]:
    """A 4,000-record pool's first 3,880 records, then all of it (a file sorting last)."""
    folder = tmp_path_factory.mktemp("pools") / "data"
    pool = generate_pool(4000, seed=SEED)
    records = list(pool["trajectories"].values())
    _write(folder, "a.json", pool, records[:-120])
    first = read_trajectories(folder, keep_text=False)
    _write(folder, "b.json", pool, records[-120:])
    return first, read_trajectories(folder, keep_text=False), folder


def test_a_grown_pool_draws_its_new_records_alone(
    pools: tuple[ReadResult, ReadResult, Path],
) -> None:
    """The split of a pool grown at its end, its first records' draws kept, is
    split_examples' split of it, array for array; the new records alone are drawn, and
    the sorted hashes it merges are the ones the task sorted."""
    first, grown, _ = pools
    kept = KeptSplit(KeptInMemory(2**30), "pool")
    assert _same(kept.split(first, SEED), split_examples(first, SEED))
    assert kept.drawn == first.labelled and kept.reused == 0
    split = kept.split(grown, SEED)
    assert _same(split, split_examples(grown, SEED))
    assert kept.reused == first.labelled and kept.drawn == grown.labelled
    trained, distinct = kept.known(split) or (None, None)
    expected = _known(grown, split)
    assert trained is not None and distinct is not None
    assert trained.dtype == np.uint64 and np.array_equal(trained, expected[0])
    assert distinct.dtype == np.int64 and np.array_equal(distinct, expected[1])
    assert kept.known(split_examples(grown, SEED)) is None  # not its split: the task sorts


def test_a_stale_entry_draws_every_record_again(
    pools: tuple[ReadResult, ReadResult, Path],
) -> None:
    """An entry drawn under another seed or held-out salt, or from records the pool does
    not begin with (its first record another one now), is not used: every record is
    drawn, and the split is split_examples' all the same."""
    first, grown, folder = pools
    kept = KeptSplit(KeptInMemory(2**30), "pool")
    kept.split(first, SEED)
    assert _same(kept.split(grown, SEED + 1), split_examples(grown, SEED + 1))  # another seed
    assert kept.reused == 0
    with drawn_with("another salt"):
        assert _same(kept.split(grown, SEED + 1), split_examples(grown, SEED + 1))
    assert kept.reused == 0
    kept.split(first, SEED + 1)
    edited = read_trajectories(folder, keep_text=False)
    object.__setattr__(edited.columns, "id_hash", edited.columns.id_hash.copy())
    edited.columns.id_hash[0] ^= 1  # the first record is another record now
    assert _same(kept.split(edited, SEED + 1), split_examples(edited, SEED + 1))
    assert kept.reused == 0
    assert _same(kept.split(grown, SEED + 1), split_examples(grown, SEED + 1))
    assert kept.reused == 0  # the edited pool's first record is not this pool's
    kept.split(grown, SEED + 1)
    assert kept.reused == grown.labelled  # the same records: every draw kept


def test_a_planted_entry_is_refused(pools: tuple[ReadResult, ReadResult, Path]) -> None:
    """An entry that is not what the module keeps (another type, or its draws of another
    length than the records it names) is refused, counted, and every record drawn."""
    first, grown, _ = pools
    memory = KeptInMemory(2**30)
    kept = KeptSplit(memory, "pool")
    kept.split(first, SEED)
    key = (KIND, "pool")
    identity = memory._entries[key].identity
    entry = memory.get(key, identity)
    assert isinstance(entry, kept_split._Drawn)
    short = kept_split._Drawn(**{**vars(entry), "points": entry.points[:-1]})
    for planted in (short, {"held": entry.held}):
        memory.put(key, identity, planted, 1, "planted")
        refused = kept.refused
        assert _same(kept.split(grown, SEED), split_examples(grown, SEED))
        assert kept.refused == refused + 1 and kept.reused == 0


def test_merged_is_sorted_unique_of_both() -> None:
    """merged of two sorted arrays of distinct values is sorted_unique of the two, in
    either dtype the task merges, an empty one included."""
    rng = np.random.default_rng(0)
    for dtype in (np.int64, np.uint64):
        for n, m in ((0, 5), (50, 0), (1000, 40), (3, 300)):
            kept = sorted_unique(rng.integers(0, 2000, n).astype(dtype))
            new = sorted_unique(rng.integers(0, 2000, m).astype(dtype))
            out = merged(kept, new)
            assert out.dtype == dtype
            assert np.array_equal(out, sorted_unique(np.concatenate((kept, new))))


def test_a_task_with_kept_draws_is_the_task_without(
    pools: tuple[ReadResult, ReadResult, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resident process's later task (the split's draws and sorted hashes kept) has the
    split, trained ids and early-stopping data key of a task that keeps nothing."""
    first, grown, folder = pools
    options = TaskOptions.from_mapping({})
    memory = KeptInMemory(2**30)
    starts: list[int] = []
    real = kept_split._grown

    def spied(columns: Any, seed: int, kept: Any, start: int) -> Any:
        starts.append(start)
        return real(columns, seed, kept, start)

    monkeypatch.setattr(kept_split, "_grown", spied)
    WorldModelTask(first, options, SEED, kept=KeptNumeric(tmp_path / "c", folder, memory))
    later = WorldModelTask(grown, options, SEED, kept=KeptNumeric(tmp_path / "c", folder, memory))
    assert starts == [0, first.labelled]  # the later task drew the new records alone
    plain = WorldModelTask(grown, options, SEED)
    assert _same(later.split, plain.split)
    assert later.trained_ids.dtype == plain.trained_ids.dtype
    assert np.array_equal(later.trained_ids.numpy(), plain.trained_ids.numpy())
    assert later.data_key == plain.data_key
