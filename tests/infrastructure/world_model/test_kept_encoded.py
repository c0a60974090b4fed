"""The encoded rows kept in a resident run process (world_model.kept_encoded): a later
pool's matrix from them is the matrix of encoding every record with the same encoder, bit
for bit; only new and changed records are encoded; nothing stale is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pool_files import read_records

from genesis_fp16_infrastructure.data.readers import ReadResult
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.world_model.features import (
    Categorical,
    FeatureEncoder,
    numeric_rows,
)
from genesis_fp16_infrastructure.world_model.kept_encoded import KeptEncoded
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric

SEED = 7


def _full(encoder: FeatureEncoder, data: ReadResult) -> torch.Tensor:
    """Every labelled record encoded, as a run that keeps nothing encodes them."""
    columns = data.columns
    numeric = numeric_rows(columns, columns.labelled)
    return encoder.encode_parts(Categorical.of_rows(columns, columns.labelled), numeric)


def _matrix(
    kept: KeptEncoded,
    encoder: FeatureEncoder,
    columns: Any,
    numeric: torch.Tensor,
    stamp: np.ndarray | None,
) -> torch.Tensor:
    """Every labelled record's encoded row, as one part of the pool."""
    every = np.arange(len(columns.labelled))
    return kept.part("every", every, encoder, columns, numeric, stamp)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _edited(records: list[dict[str, Any]], change: str) -> list[dict[str, Any]]:
    """``records`` with the 10th labelled one relabelled, its numbers edited, or its tools
    and pattern changed (categorical values only: its numeric row the same)."""
    records = [dict(r) for r in records]
    record = records[10]
    if change == "relabel":
        record["success_score"] = round(1.0 - (record.get("success_score") or 0.0), 4)
    elif change == "edit":
        record["code_changes"] = str(record.get("code_changes", "")) + "\n+one line\n+two"
    else:
        record["tools_used"] = ["a_tool_never_seen"]
        record["reasoning_pattern"] = "a pattern never seen"
    return records


@pytest.mark.parametrize("change", ["growth", "relabel", "edit", "categorical"])
def test_a_later_matrix_is_a_full_encode_of_what_changed_alone(tmp_path: Path, change: str) -> None:
    """A first pool's matrix kept; then 50 records more (in a file sorting last), or one
    record relabelled, edited or given other tools: the matrix is the full encode of the
    new pool bit for bit, and the rows encoded again are few (the new ones and those
    beside them; the changed record among them)."""
    pool = generate_pool(1200, seed=SEED)
    records = list(pool["trajectories"].values())
    memory = KeptInMemory(256 * 2**20)
    first = read_records(tmp_path / "data", {"a.json": records[:1150]}, pool)
    columns = first.columns
    encoder = FeatureEncoder.fit_parts(
        Categorical.of_rows(columns, columns.labelled),
        numeric_rows(columns, columns.labelled),
        columns.success,
    )
    numeric = KeptNumeric(tmp_path / "cache", tmp_path / "data", memory)
    rows = numeric.rows(columns)
    kept = KeptEncoded(memory, str(numeric.path))
    assert _same(_matrix(kept, encoder, columns, rows, numeric.stamp), _full(encoder, first))
    assert kept.encoded == len(columns.labelled)
    if change == "growth":
        files = {"a.json": records[:1150], "b.json": records[1150:]}
    else:
        files = {"a.json": _edited(records[:1150], change)}
    data = read_records(tmp_path / "data", files, pool)
    columns = data.columns
    numeric = KeptNumeric(tmp_path / "cache", tmp_path / "data", memory)
    rows = numeric.rows(columns)
    kept = KeptEncoded(memory, str(numeric.path))
    matrix = _matrix(kept, encoder, columns, rows, numeric.stamp)
    full = _full(encoder, data)
    assert _same(matrix, full)
    assert kept.encoded + kept.reused == len(columns.labelled)
    if change == "growth":
        assert 0 < kept.encoded < 3 * 50
    else:  # another content key: the kept numeric rows are written whole, new stamps
        assert kept.encoded == len(columns.labelled)


def test_a_row_whose_categorical_values_changed_is_encoded_again(tmp_path: Path) -> None:
    """Rows whose stamps say their numbers are kept, one of them now of other tools and
    pattern: that row is encoded again (its values compared through the codes), and the
    matrix is the full encode."""
    pool = generate_pool(400, seed=SEED)
    records = list(pool["trajectories"].values())
    memory = KeptInMemory(64 * 2**20)
    first = read_records(tmp_path / "a", {"a.json": records}, pool)
    columns = first.columns
    numeric = numeric_rows(columns, columns.labelled)
    encoder = FeatureEncoder.fit_parts(Categorical.of_rows(columns, columns.labelled), numeric)
    stamp = np.arange(len(columns.labelled), dtype=np.uint64)
    _matrix(KeptEncoded(memory, "pool"), encoder, columns, numeric, stamp)
    data = read_records(tmp_path / "b", {"a.json": _edited(records, "categorical")}, pool)
    columns = data.columns
    kept = KeptEncoded(memory, "pool")
    now = numeric_rows(columns, columns.labelled)
    assert _same(_matrix(kept, encoder, columns, now, stamp), _full(encoder, data))
    assert kept.encoded == 1


def test_another_encoder_encodes_every_row(tmp_path: Path) -> None:
    """A matrix kept for one encoder is not used for another (a fit of other records):
    every row is encoded, and the matrix is that encoder's full encode."""
    pool = generate_pool(600, seed=SEED)
    records = list(pool["trajectories"].values())
    memory = KeptInMemory(64 * 2**20)
    data = read_records(tmp_path / "data", {"a.json": records}, pool)
    columns = data.columns
    numeric = KeptNumeric(tmp_path / "cache", tmp_path / "data", memory)
    rows = numeric.rows(columns)
    half = columns.labelled[: len(columns.labelled) // 2]
    encoders = [
        FeatureEncoder.fit_parts(Categorical.of_rows(columns, part), numeric_rows(columns, part))
        for part in (columns.labelled, half)
    ]
    assert encoders[0] != encoders[1]
    for encoder in encoders:
        kept = KeptEncoded(memory, str(numeric.path))
        rows = numeric.rows(columns)
        assert _same(_matrix(kept, encoder, columns, rows, numeric.stamp), _full(encoder, data))
        assert kept.encoded == len(columns.labelled)


def test_without_a_store_nothing_is_kept(tmp_path: Path) -> None:
    """No store (a run outside a resident process): every row encoded, every time."""
    pool = generate_pool(300, seed=SEED)
    data = read_records(tmp_path / "data", {"a.json": list(pool["trajectories"].values())}, pool)
    columns = data.columns
    numeric = numeric_rows(columns, columns.labelled)
    encoder = FeatureEncoder.fit_parts(Categorical.of_rows(columns, columns.labelled), numeric)
    for _ in range(2):
        kept = KeptEncoded(None, "pool")
        assert _same(_matrix(kept, encoder, columns, numeric, None), _full(encoder, data))
        assert kept.encoded == len(columns.labelled)


def test_a_grown_part_is_written_after_its_kept_rows_unless_one_given_out_lives(
    tmp_path: Path,
) -> None:
    """A part grown at its end is the kept part's store with the new rows after the kept
    ones (no copy: the same storage); while the part given out before still lives it is
    copied instead, and the part given out before keeps its bits."""
    pool = generate_pool(500, seed=SEED)
    records = list(pool["trajectories"].values())
    memory = KeptInMemory(64 * 2**20)
    data = read_records(tmp_path / "data", {"a.json": records}, pool)
    columns = data.columns
    numeric = numeric_rows(columns, columns.labelled)
    encoder = FeatureEncoder.fit_parts(Categorical.of_rows(columns, columns.labelled), numeric)
    n = len(columns.labelled)
    stamp = np.arange(n, dtype=np.uint64)
    full = _full(encoder, data)
    every = np.arange(n)
    first = KeptEncoded(memory, "pool").part("p", every[:-60], encoder, columns, numeric, stamp)
    before = first.clone()
    kept = KeptEncoded(memory, "pool")
    lent = kept.part("p", every[:-30], encoder, columns, numeric, stamp)  # `first` lives
    assert _same(lent, full[:-30]) and kept.encoded == 30 and _same(first, before)
    assert lent.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    storage = lent.untyped_storage().data_ptr()
    del first, lent
    kept = KeptEncoded(memory, "pool")
    grown = kept.part("p", every, encoder, columns, numeric, stamp)
    assert _same(grown, full) and kept.encoded == 30 and kept.reused == n - 30
    assert grown.untyped_storage().data_ptr() == storage  # written after the kept rows


def test_a_record_moved_out_of_a_part_shifts_its_kept_rows_into_a_new_store(
    tmp_path: Path,
) -> None:
    """A part that lost a record in its middle (validation's share shrank: the record went
    to another part) and grew at its end: the kept rows are gathered to their new places
    and only the new records encoded, the full encode's bits."""
    pool = generate_pool(500, seed=SEED)
    memory = KeptInMemory(64 * 2**20)
    data = read_records(tmp_path / "data", {"a.json": list(pool["trajectories"].values())}, pool)
    columns = data.columns
    numeric = numeric_rows(columns, columns.labelled)
    encoder = FeatureEncoder.fit_parts(Categorical.of_rows(columns, columns.labelled), numeric)
    n = len(columns.labelled)
    stamp = np.arange(n, dtype=np.uint64)
    every = np.arange(n)
    KeptEncoded(memory, "pool").part("p", every[:-30], encoder, columns, numeric, stamp)
    moved = np.delete(every, 5)
    kept = KeptEncoded(memory, "pool")
    part = kept.part("p", moved, encoder, columns, numeric, stamp)
    assert _same(part, _full(encoder, data)[moved])
    assert (kept.encoded, kept.reused) == (30, n - 31)
