"""Kept numeric rows grown, not rewritten (world_model.kept_numeric, kept_numeric_file):
a pool grown at its end appends a frame, a torn or killed append reads as the old rows,
and a resident process keeps the pool in memory under the file's identity."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_kept_numeric import RECORDS, _bits, _columns, _ids, _relabel, _worked_out

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory, process_memory
from genesis_fp16_infrastructure.world_model import (
    content_keys,
    features,
    kept_numeric,
    kept_numeric_file,
)
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric

TREE = Path(__file__).resolve().parents[3]


def _want(columns: PoolColumns) -> np.ndarray:
    return _bits(features.numeric_rows(columns, columns.labelled))


def _leaves(count: int) -> list[int]:
    """The last ``count`` records that no record names as a parent."""
    named = {p for r in RECORDS for p in r["parent_trajectories"]}
    return [i for i, r in enumerate(RECORDS) if r["trajectory_id"] not in named][-count:]


def _grown_pools(tmp_path: Path) -> tuple[PoolColumns, PoolColumns, list[int]]:
    """A pool without its last 10 leaves and records 100-104 (parents of kept records:
    those are worked out again, their depths move), then the pool with them added in a
    file sorting last."""
    held = set(_leaves(10)) | set(range(100, 105))
    old = [r for i, r in enumerate(RECORDS) if i not in held]
    first = _columns(tmp_path / "data", {"a.json": old})
    added = [RECORDS[i] for i in sorted(held)]
    return first, _columns(tmp_path / "data", {"a.json": old, "b.json": added}), sorted(held)


def test_a_grown_pool_appends_its_new_rows_not_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool grown by records at its end: only they and the kept records beside them
    are worked out, the file keeps its inode and grows by a frame far smaller than the
    file, and a fresh read of the file (frames applied) gives the very same bits."""
    first, grown, held = _grown_pools(tmp_path)
    want = _want(grown)
    KeptNumeric(tmp_path / "cache", "data").rows(first)
    kept = KeptNumeric(tmp_path / "cache", "data")
    before = kept.path.stat()
    calls = _worked_out(monkeypatch)
    got = kept.rows(grown)
    after = kept.path.stat()
    assert np.array_equal(_bits(got), want)
    assert kept.appended == 1 and kept.computed < len(grown.labelled) // 2
    new = {RECORDS[i]["trajectory_id"] for i in held}
    assert new & _ids(grown, grown.labelled) <= _ids(grown, np.concatenate(calls))
    assert after.st_ino == before.st_ino, "the file was written whole again"
    assert 0 < after.st_size - before.st_size < before.st_size // 4
    calls.clear()
    cold = KeptNumeric(tmp_path / "cache", "data")
    assert np.array_equal(_bits(cold.rows(grown)), want)
    assert calls == [] and cold.computed == 0 and cold.unreadable == 0


def test_many_appends_read_back_and_are_written_whole_in_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool grown one file at a time: each read of the file (every frame applied) is
    the worked-out rows; past MAX_FRAMES frames the file is written whole once."""
    monkeypatch.setattr(kept_numeric, "MAX_FRAMES", 3)
    files: dict[str, list[dict[str, Any]]] = {"a.json": RECORDS[:150]}
    appended = 0
    for k, start in enumerate(range(150, 300, 30)):
        files[f"b{k}.json"] = RECORDS[start : start + 30]
        columns = _columns(tmp_path / "data", files)
        kept = KeptNumeric(tmp_path / "cache", "data")
        assert np.array_equal(_bits(kept.rows(columns)), _want(columns))
        assert kept.unreadable == 0
        appended += kept.appended
    assert appended == 3  # frames 2-4 appended, the fifth pool written whole, then one more


@pytest.mark.parametrize("change", ["relabelled", "edited"])
def test_a_relabelled_or_edited_record_is_worked_out_again_from_memory(
    tmp_path: Path, change: str
) -> None:
    """The kept pool in memory, then a record relabelled or edited: its row is worked out
    again (never the kept one), the file written whole, and the rows are the worked-out
    bits."""
    memory = KeptInMemory(64 * 2**20)
    columns = _columns(tmp_path / "data", {"a.json": RECORDS})
    KeptNumeric(tmp_path / "cache", "data", memory).rows(columns)
    records = copy.deepcopy(RECORDS)
    named = [p for r in RECORDS for p in r["parent_trajectories"]]
    target = max(set(named), key=named.count)  # labelled, with children
    record = next(r for r in records if r["trajectory_id"] == target)
    if change == "relabelled":
        _relabel(record)
    else:
        record["code_changes"] += "\n+one more line"
    columns = _columns(tmp_path / "data", {"a.json": records})
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    got = kept.rows(columns)
    assert kept.from_memory == 1 and kept.appended == 0 and kept.computed >= 1
    assert np.array_equal(_bits(got), _want(columns))


def test_memory_serves_a_later_run_without_reading_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one process with a budget: the next run takes the kept pool from memory (the
    file is not read), appends, and keeps the grown pool; the rows handed out are
    copies (a caller writing into them changes nothing kept)."""
    memory = KeptInMemory(64 * 2**20)
    first, grown, _ = _grown_pools(tmp_path)
    rows = KeptNumeric(tmp_path / "cache", "data", memory).rows(first)
    rows.fill_(7.0)  # the caller's own: what is kept stays as worked out

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the kept file was read")

    monkeypatch.setattr(kept_numeric, "read_frames", refuse)
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    assert np.array_equal(_bits(kept.rows(grown)), _want(grown))
    assert kept.from_memory == 1 and kept.appended == 1
    again = KeptNumeric(tmp_path / "cache", "data", memory)
    assert np.array_equal(_bits(again.rows(grown)), _want(grown))
    assert again.from_memory == 1 and again.computed == 0


def test_a_file_changed_behind_memory_is_read_not_the_memory(tmp_path: Path) -> None:
    """The kept pool in memory, then the file written by another process for another
    pool: its identity differs, so memory is not used; the rows are those of the file."""
    memory = KeptInMemory(64 * 2**20)
    first = _grown_pools(tmp_path)[0]
    KeptNumeric(tmp_path / "cache", "data", memory).rows(first)
    other = copy.deepcopy(RECORDS)
    for record in other[:40]:
        _relabel(record)
    elsewhere = _columns(tmp_path / "data", {"a.json": other})
    KeptNumeric(tmp_path / "cache", "data").rows(elsewhere)  # no memory: another process
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    assert np.array_equal(_bits(kept.rows(elsewhere)), _want(elsewhere))
    assert kept.from_memory == 0 and kept.computed == 0


@pytest.mark.parametrize("budget", [0, 1])
def test_a_budget_of_0_or_too_small_keeps_nothing_and_still_appends(
    tmp_path: Path, budget: int
) -> None:
    """A budget of 0 (no store) or one too small for the pool: nothing is kept in
    memory, every run reads the file, and the grown pool is still appended."""
    memory = process_memory(0) if budget == 0 else KeptInMemory(budget)
    first, grown, _ = _grown_pools(tmp_path)
    KeptNumeric(tmp_path / "cache", "data", memory).rows(first)
    kept = KeptNumeric(tmp_path / "cache", "data", memory)
    assert np.array_equal(_bits(kept.rows(grown)), _want(grown))
    assert kept.from_memory == 0 and kept.appended == 1
    assert memory is None or len(memory) == 0


def test_a_torn_append_at_any_byte_reads_as_the_old_rows(tmp_path: Path) -> None:
    """The file cut anywhere inside the appended frame, or that frame's bytes garbled (a
    crash mid-append): it reads as the pool before the append, never as other rows, and
    the next run appends again after cutting the torn tail off."""
    first, grown, _ = _grown_pools(tmp_path)
    KeptNumeric(tmp_path / "cache", "data").rows(first)
    kept = KeptNumeric(tmp_path / "cache", "data")
    old = kept.path.read_bytes()
    kept.rows(grown)
    new = kept.path.read_bytes()
    assert new.startswith(old) and len(new) > len(old)
    step = max(1, (len(new) - len(old)) // 40)
    cuts = [*range(len(old) + 1, len(new), step), len(new) - 1]
    garbled = old + bytes(b ^ 0x5A for b in new[len(old) :])
    for raw in [new[:cut] for cut in cuts] + [garbled, new[:-8] + b"\0" * 8]:
        kept.path.write_bytes(raw)
        seen = KeptNumeric(tmp_path / "cache", "data")
        state = seen._read(len(grown), len(grown.parent))
        assert state is not None and np.array_equal(state.kept.key, first_keys(first))
        again = KeptNumeric(tmp_path / "cache", "data")
        assert np.array_equal(_bits(again.rows(grown)), _want(grown))
        assert again.unreadable == 0 and again.appended == 1
        assert kept.path.read_bytes() == new  # the torn tail cut off, the frame again


def first_keys(columns: PoolColumns) -> np.ndarray:
    return content_keys.content_keys(columns, content_keys.parent_hashes(columns))


def test_kill_9_mid_append_leaves_the_old_rows(tmp_path: Path) -> None:
    """A process killed by SIGKILL halfway through writing its frame: the next read is
    the old pool's rows, and the grown pool's rows are worked out right and appended."""
    first, grown, _ = _grown_pools(tmp_path)
    KeptNumeric(tmp_path / "cache", "data").rows(first)
    size = (tmp_path / "cache").joinpath(KeptNumeric(tmp_path / "cache", "data").path.name)
    before = size.stat().st_size
    script = textwrap.dedent(
        f"""
        import os, signal
        from genesis_fp16_infrastructure.data.readers import read_trajectories
        from genesis_fp16_infrastructure.world_model import kept_numeric_file
        from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric
        real = os.pwrite
        def half(fd, data, at):
            real(fd, data[: len(data) // 2], at)
            os.kill(os.getpid(), signal.SIGKILL)
        kept_numeric_file.os.pwrite = half
        columns = read_trajectories({str(tmp_path / "data")!r}, keep_text=False).columns
        KeptNumeric({str(tmp_path / "cache")!r}, "data").rows(columns)
        """
    )
    paths = [str(TREE), str(TREE / "infrastructure"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=120)
    assert done.returncode == -9
    assert size.stat().st_size > before  # half a frame on disk
    seen = KeptNumeric(tmp_path / "cache", "data")
    state = seen._read(len(grown), len(grown.parent))
    assert state is not None and np.array_equal(state.kept.key, first_keys(first))
    again = KeptNumeric(tmp_path / "cache", "data")
    assert np.array_equal(_bits(again.rows(grown)), _want(grown))
    assert again.unreadable == 0 and again.appended == 1
    cold = KeptNumeric(tmp_path / "cache", "data")
    assert np.array_equal(_bits(cold.rows(grown)), _want(grown)) and cold.computed == 0


def test_a_frame_names_its_columns_and_checks_them(tmp_path: Path) -> None:
    """An append frame onto another pool's size than the frames before it make is refused
    whole (counted), not applied."""
    first, grown, _ = _grown_pools(tmp_path)
    KeptNumeric(tmp_path / "cache", "data").rows(first)
    kept = KeptNumeric(tmp_path / "cache", "data")
    size = kept.path.stat().st_size
    bogus = {"key": np.zeros(1, "<u8")}
    kept_numeric_file.append_frame(kept.path, kept_numeric.NUMERIC_VERSION, bogus, size, 5, 5)
    again = KeptNumeric(tmp_path / "cache", "data")
    assert np.array_equal(_bits(again.rows(grown)), _want(grown))
    assert again.unreadable == 1
