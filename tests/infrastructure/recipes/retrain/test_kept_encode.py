"""A record is encoded once (issue 90, item 2): a task whose numeric rows come from the
kept ones (world_model.kept_numeric) is the task that works every record out, tensor for
tensor and, trained, weight for weight; and its encode works out only what is new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pool_files import ResidentReads

from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.recipes.retrain import run as retrain_run
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.split import choose_split
from genesis_fp16_infrastructure.recipes.retrain.task import Batch, WorldModelTask
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.run.fit import fit
from genesis_fp16_infrastructure.training.run.task import FitOptions
from genesis_fp16_infrastructure.world_model import features
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric
from genesis_fp16_infrastructure.world_model.lineage_columns import PoolIndex

SEED = 5


def _write(folder: Path, name: str, pool: dict[str, Any], records: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    trajectories = {r["trajectory_id"]: r for r in records}
    (folder / name).write_text(json.dumps({**pool, "trajectories": trajectories}))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point:
        return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    return torch.equal(a, b)


def _parts(task: WorldModelTask) -> dict[str, Batch]:
    """The task's three parts, each as one batch of its own."""
    return {
        "train_data": task.train_data.batch(),
        "validation_data": task.validation_data,
        "eval_data": task.eval_data,
    }


@pytest.mark.parametrize("cross_validation", [False, True])
def test_a_task_from_kept_rows_trains_the_same_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cross_validation: bool
) -> None:
    """A pool's first run keeps its rows; the next run, 60 records later, takes the kept
    ones: the same encoded parts, encoder and numeric rows bit for bit as a task that
    works every record out, the same weights after 12 steps, and the per-record work
    (features.numeric_rows) asked for the new records and their siblings alone."""
    pool = generate_pool(3400 if not cross_validation else 700, seed=SEED)
    records = list(pool["trajectories"].values())
    data_folder = tmp_path / "data"
    _write(data_folder, "a.json", pool, records[:-60])
    options = TaskOptions.from_mapping({"cross_validation": cross_validation, "batch_size": 64})
    first = read_trajectories(data_folder, keep_text=False)
    WorldModelTask(first, options, SEED, kept=KeptNumeric(tmp_path / "cache", data_folder))
    _write(data_folder, "b.json", pool, records[-60:])
    data = read_trajectories(data_folder, keep_text=False)
    asked: list[int] = []
    real = features.numeric_rows

    def counted(
        columns: PoolColumns, rows: np.ndarray, index: PoolIndex | None = None
    ) -> torch.Tensor:
        asked.append(len(rows))
        return real(columns, rows, index)

    monkeypatch.setattr(features, "numeric_rows", counted)
    kept = KeptNumeric(tmp_path / "cache", data_folder)
    cached = WorldModelTask(data, options, SEED, kept=kept)
    # The 60 new records and those sharing a parent with them, of 700 or 3,400.
    assert kept.computed == sum(asked) and 0 < kept.computed < 3 * 60
    monkeypatch.setattr(features, "numeric_rows", real)
    plain = WorldModelTask(data, options, SEED)
    assert cached.encoder == plain.encoder
    for (part, a_part), b_part in zip(_parts(cached).items(), _parts(plain).values(), strict=True):
        for a, b in zip(a_part, b_part, strict=True):
            assert _same(a, b), part
    rows_a, rows_b = cached.take_numeric_rows(), plain.take_numeric_rows()
    assert rows_a is not None and rows_b is not None and _same(rows_a, rows_b)
    folders = [tmp_path / "ck-kept", tmp_path / "ck-plain"]
    trained = [
        fit(task, FitOptions(steps=12, seed=SEED, checkpoint_dir=folder))
        for task, folder in zip((cached, plain), folders, strict=True)
    ]
    saved = [torch.load(r.checkpoint, weights_only=True) for r in trained if r.checkpoint]
    assert len(saved) == 2 and saved[0][keys.EXTRA]["encoder"] == saved[1][keys.EXTRA]["encoder"]
    for a, b in ((saved[0][keys.MODEL], saved[1][keys.MODEL]),):
        assert a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


@pytest.mark.parametrize("budget", [64 * 2**20, 0])
def test_a_later_run_in_one_process_appends_its_new_rows(tmp_path: Path, budget: int) -> None:
    """Two runs in one process, as a resident run process serves them: the later run, 40
    records on (a file sorting last), works out only the new records and those beside
    them and appends to the kept file (its inode kept, not written whole); with a memory
    budget it takes the kept pool from memory, with a budget of 0 from the file."""
    pool = generate_pool(600, seed=SEED)
    records = list(pool["trajectories"].values())
    data = tmp_path / "data"
    _write(data, "a.json", pool, records[:-40])

    def run(name: str) -> dict[str, Any]:
        request = TrainRequest(
            agent="se_darwin", precision=PrecisionRequest("fp32"), precision_reason="test",
            state_dir=tmp_path / "state", checkpoint_dir=tmp_path / "state" / name,
            data_path=data, seed=SEED, steps=4, keep_in_memory_bytes=budget,
            options={"hidden": 8, "cross_validation": False},
        )  # fmt: skip
        result = retrain_run.train(request)
        return dict(result.extra["record_cache"])

    first = run("first")
    assert first["numeric_computed"] > 500
    kept_file = next((tmp_path / "state").rglob("numeric-*.gfnum"))
    before = kept_file.stat()
    _write(data, "b.json", pool, records[-40:])
    later = run("later")
    after = kept_file.stat()
    assert after.st_ino == before.st_ino, "the kept file was written whole again"
    assert before.st_size < after.st_size
    assert 0 < later["numeric_computed"] < 3 * 40 and later["numeric_appended"] == 1
    assert later["numeric_from_memory"] == (1 if budget else 0)


def test_a_run_never_writes_into_the_kept_rows_it_is_handed(tmp_path: Path) -> None:
    """Three runs in one process: the first works the rows out, the second (40 records
    on) grows them and is handed the kept rows themselves (no copy) for its encode,
    training, drift and scorings; the third, of the same pool, takes them from memory,
    unrefused: no run wrote into them (a write is refused: test_kept_numeric_keys)."""
    pool = generate_pool(600, seed=SEED)
    records = list(pool["trajectories"].values())
    data = tmp_path / "data"
    _write(data, "a.json", pool, records[:-40])

    def run(name: str) -> dict[str, Any]:
        request = TrainRequest(
            agent="se_darwin", precision=PrecisionRequest("fp32"), precision_reason="test",
            state_dir=tmp_path / "state", checkpoint_dir=tmp_path / "state" / name,
            data_path=data, seed=SEED, steps=8, keep_in_memory_bytes=64 * 2**20,
            options={"hidden": 8, "cross_validation": False},
        )  # fmt: skip
        return dict(retrain_run.train(request).extra["record_cache"])

    run("first")
    _write(data, "b.json", pool, records[-40:])
    later = run("later")
    assert later["numeric_appended"] == 1 and later["numeric_written"] == 0
    third = run("third")
    assert third["numeric_from_memory"] == 1 and third["numeric_written"] == 0
    assert third["numeric_computed"] == 0


def test_each_distinct_categorical_value_is_worked_out_once_a_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's three parts share the pool's distinct operators, tool lists and patterns:
    each field's columns per distinct value are worked out once (3 tables), not once per
    part (9), and the parts are the ones each encoded alone, bit for bit."""
    pool = generate_pool(3400, seed=SEED)
    _write(tmp_path / "data", "a.json", pool, list(pool["trajectories"].values()))
    data = read_trajectories(tmp_path / "data", keep_text=False)
    options = TaskOptions.from_mapping({"cross_validation": False})
    values: list[int] = []
    real = features._word_columns

    def counted(found: Any, vocabulary: Any, other: bool) -> torch.Tensor:
        values.append(len(found))
        return real(found, vocabulary, other)

    monkeypatch.setattr(features, "_word_columns", counted)
    task = WorldModelTask(data, options, SEED)
    columns = data.columns
    distinct = sum(len(c.values) for c in (columns.operator, columns.tools, columns.pattern))
    assert len(values) == 3 and sum(values) == distinct
    numeric = features.numeric_rows(columns, columns.labelled)
    split = task.split
    for part, rows in (("train_data", split.train), ("eval_data", split.held_out)):
        alone = task.encoder.encode_parts(
            features.Categorical.of_rows(columns, columns.labelled[rows]),
            numeric,
            torch.from_numpy(rows),
        )
        assert _same(_parts(task)[part].x, alone), part


def _changed(records: list[dict[str, Any]], change: str) -> list[dict[str, Any]]:
    """``records`` with one record relabelled, edited or removed: the one most named as a
    parent (its children read its score and depth)."""
    records = [dict(r) for r in records]
    named = [p for r in records for p in r["parent_trajectories"]]
    target = max(set(named), key=named.count)
    at = next(i for i, r in enumerate(records) if r["trajectory_id"] == target)
    if change == "removal":
        return records[:at] + records[at + 1 :]
    if change == "relabel":
        score = records[at].get("success_score")
        records[at]["success_score"] = 0.9 if score is None else round(1.0 - score, 4)
    else:
        records[at]["code_changes"] = str(records[at].get("code_changes", "")) + "\n+one line"
    return records


@pytest.mark.parametrize("change", ["relabel", "edit", "removal", "another fit"])
def test_a_changed_pool_or_another_fit_encodes_as_a_full_encode(
    tmp_path: Path, change: str
) -> None:
    """After a first task kept its rows: a record relabelled, edited or removed, or the
    same pool fitted again on another split (another seed): the task from the kept rows
    is the task that works every record out, encoder and every tensor, bit for bit."""
    pool = generate_pool(3400, seed=SEED)
    records = list(pool["trajectories"].values())
    folder = tmp_path / "data"
    _write(folder, "a.json", pool, records)
    options = TaskOptions.from_mapping({"cross_validation": False, "batch_size": 64})
    first = read_trajectories(folder, keep_text=False)
    WorldModelTask(first, options, SEED, kept=KeptNumeric(tmp_path / "cache", folder))
    seed = SEED
    if change == "another fit":
        seed = SEED + 1
    else:
        _write(folder, "a.json", pool, _changed(records, change))
    data = read_trajectories(folder, keep_text=False)
    kept = KeptNumeric(tmp_path / "cache", folder)
    cached = WorldModelTask(data, options, seed, kept=kept)
    plain = WorldModelTask(data, options, seed)
    assert kept.reused > 0 and cached.encoder == plain.encoder
    for (part, a_part), b_part in zip(_parts(cached).items(), _parts(plain).values(), strict=True):
        for a, b in zip(a_part, b_part, strict=True):
            assert _same(a, b), part


def test_a_version_2_split_reads_no_id(tmp_path: Path) -> None:
    """A split drawn by version 2 (the records' id hashes) looks up no id's text; a
    version 1 draw reads each id, and both draw as they did."""
    from genesis_fp16_infrastructure.recipes.retrain import split as split_module

    pool = generate_pool(700, seed=SEED)
    _write(tmp_path / "data", "a.json", pool, list(pool["trajectories"].values()))
    data = read_trajectories(tmp_path / "data", keep_text=False)
    columns = data.columns
    rows = np.arange(len(columns.labelled))
    expected = {
        version: split_module.Draw(
            [columns.ids[r] for r in columns.labelled.tolist()], columns.id_hash[columns.labelled]
        ).points(SEED, "", version)
        for version in (1, 2)
    }

    class Counted(list[str]):
        reads = 0

        def __getitem__(self, at: Any) -> Any:
            Counted.reads += 1
            return super().__getitem__(at)

    object.__setattr__(columns, "ids", Counted(columns.ids))
    for version, reads in ((2, 0), (1, len(rows))):
        Counted.reads = 0
        got = split_module.Draw.of_rows(columns, rows).points(SEED, "", version)
        assert np.array_equal(got, expected[version]) and Counted.reads == reads


def test_a_record_moved_between_parts_moves_no_row(tmp_path: Path) -> None:
    """In a resident run process (a memory budget), a later run 40 records on whose split
    moved a validation record into the training part (validation's capped share shrinks
    as a pool grows): only the rows the kept numeric rows worked out again are encoded
    (the new records and those beside them), the training part is rows of the kept pool
    (no copy of it), and every part is the plain task's, bit for bit."""
    pool = generate_pool(3400, seed=SEED)
    records = list(pool["trajectories"].values())
    folder, cache = tmp_path / "data", tmp_path / "cache"
    _write(folder, "a.json", pool, records[:-40])
    options = TaskOptions.from_mapping({"cross_validation": False, "batch_size": 64})
    memory = KeptInMemory(256 * 2**20)
    first = WorldModelTask(
        read_trajectories(folder, keep_text=False), options, SEED,
        kept=KeptNumeric(cache, folder, memory),
    )  # fmt: skip
    saved = first.extra_state()
    del first  # the run before has ended: its rows are not lent any more
    _write(folder, "b.json", pool, records[-40:])
    data = read_trajectories(folder, keep_text=False)
    grown = choose_split(data, options, SEED, saved)
    moved = grown.validation[3]
    split = grown._replace(
        train=np.sort(np.append(grown.train, moved)), validation=np.delete(grown.validation, 3)
    )
    kept = KeptNumeric(cache, folder, memory)
    later = WorldModelTask(data, options, SEED, saved=saved, split=split, kept=kept)
    plain = WorldModelTask(data, options, SEED, saved=saved, split=split)
    encoded = later.kept_encoded
    assert encoded is not None and 40 <= encoded.encoded == kept.computed < 3 * 40
    assert encoded.reused == len(data.columns.labelled) - kept.computed
    part = later.train_data
    assert part.index is not None and len(part.rows) == len(data.columns.labelled)
    assert int(part.index[np.searchsorted(split.train, moved)]) == moved
    for (name, a_part), b_part in zip(_parts(later).items(), _parts(plain).values(), strict=True):
        for a, b in zip(a_part, b_part, strict=True):
            assert _same(a, b), name
    order = torch.randperm(len(part), generator=torch.Generator().manual_seed(SEED))
    for a, b in zip(part.take(order), plain.train_data.take(order), strict=True):
        assert _same(a, b)


@pytest.mark.parametrize(("spliced", "held"), [(False, False), (True, False), (True, True)])
def test_parts_after_a_file_sorting_first_are_a_full_encode(
    tmp_path: Path, spliced: bool, held: bool
) -> None:
    """In a resident run process, a run of one encoder, then a file of new records that
    sorts before the old one (every kept row moves after them): the kept rows are taken
    from where they were (most of them: the new ones and those beside them encoded),
    and every part is the plain task's, bit for bit; again after a second such file.
    ``spliced``: read through a record cache kept in memory, as the daemon reads, so the
    read lays the new records among the kept ones and the kept rows follow them (a
    splice frame, the encoded rows placed by the note); else a fresh read, and those rows
    are written whole. ``held``: the task before still alive, its rows unchanged by the
    next run's (which go to a store of their own)."""
    pool = generate_pool(3400, seed=SEED)
    records = list(pool["trajectories"].values())
    folder, cache = tmp_path / "data", tmp_path / "cache"
    _write(folder, "m.json", pool, records[:-80])
    options = TaskOptions.from_mapping({"cross_validation": False, "batch_size": 64})
    memory = KeptInMemory(256 * 2**20)
    reads = ResidentReads(folder, tmp_path / "records", memory if spliced else None)
    first = WorldModelTask(reads.read(), options, SEED, kept=KeptNumeric(cache, folder, memory))
    saved = first.extra_state()
    before = {name: [t.clone() for t in part] for name, part in _parts(first).items()}
    previous = first if held else None
    del first
    for name, new in (("b.json", records[-80:-40]), ("a.json", records[-40:])):
        _write(folder, name, pool, new)
        data = reads.read()
        kept = KeptNumeric(cache, folder, memory)
        task = WorldModelTask(data, options, SEED, saved=saved, kept=kept)
        plain = WorldModelTask(data, options, SEED, saved=saved)
        for (part, a_part), b_part in zip(
            _parts(task).items(), _parts(plain).values(), strict=True
        ):
            for a, b in zip(a_part, b_part, strict=True):
                assert _same(a, b), part
        if previous is not None:  # the task before: its rows as they were
            for part, rows in _parts(previous).items():
                assert all(map(_same, rows, before[part])), part
        encoded = task.kept_encoded
        assert encoded is not None and 0 < encoded.encoded < 3 * 40
        assert encoded.reused > len(data.columns.labelled) // 2
        assert kept.spliced == encoded.laid == int(spliced)
        before = {name: [t.clone() for t in part] for name, part in _parts(task).items()}
        previous = task if held else None
        del task, plain, encoded


def test_the_held_out_part_grows_from_the_kept_one(tmp_path: Path) -> None:
    """In a resident run process, runs of one encoder as the pool grows: the later run's
    held-out rows are the last run's (taken, not gathered) but for those encoded again
    (the new records' siblings) and the new records' (gathered); after a relabelled record
    (the kept numeric rows written whole, the rows reused keeping their stamps) the pool's
    rows that held are taken still: every part is the plain task's, bit for bit, each
    time."""
    pool = generate_pool(3400, seed=SEED)
    records = list(pool["trajectories"].values())
    folder, cache = tmp_path / "data", tmp_path / "cache"
    _write(folder, "a.json", pool, records[:-80])
    options = TaskOptions.from_mapping({"cross_validation": False, "batch_size": 64})
    memory = KeptInMemory(256 * 2**20)
    first = WorldModelTask(
        read_trajectories(folder, keep_text=False), options, SEED,
        kept=KeptNumeric(cache, folder, memory),
    )  # fmt: skip
    saved, held = first.extra_state(), len(first.split.held_out)
    del first

    def later(records_now: list[dict[str, Any]]) -> tuple[WorldModelTask, WorldModelTask]:
        _write(folder, "b.json", pool, records_now)
        data = read_trajectories(folder, keep_text=False)
        task = WorldModelTask(
            data, options, SEED, saved=saved, kept=KeptNumeric(cache, folder, memory)
        )
        plain = WorldModelTask(data, options, SEED, saved=saved)
        for (name, a_part), b_part in zip(
            _parts(task).items(), _parts(plain).values(), strict=True
        ):
            for a, b in zip(a_part, b_part, strict=True):
                assert _same(a, b), name
        return task, plain

    task, plain = later(records[-80:-40])
    encoded = task.kept_encoded
    # All but the new records' kept siblings (encoded again: their sibling columns moved).
    assert encoded is not None and held - 3 * 40 < encoded.part_reused <= held
    assert len(task.split.held_out) > held
    held = len(task.split.held_out)
    del task, plain, encoded
    task, _ = later(records[-80:])
    assert task.kept_encoded is not None and held - 3 * 40 < task.kept_encoded.part_reused <= held
    del task
    (folder / "b.json").unlink()
    _write(folder, "a.json", pool, _changed(records[:-80], "relabel"))
    task, _ = later(records[-80:])
    # The pool's rows that held are taken; the held-out part's rows too where its places
    # begin with the kept part's (the relabel may move them: then it is gathered whole)
    encoded = task.kept_encoded
    assert encoded is not None and encoded.reused > len(task.split.held_out)
    assert encoded.part_reused <= held
