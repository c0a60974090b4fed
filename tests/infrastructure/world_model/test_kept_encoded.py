"""The encoded rows kept in a resident run process (world_model.kept_encoded): a later
pool's matrix from them is the matrix of encoding every record with the same encoder, bit
for bit; only new and changed records are encoded; nothing stale or planted is read."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pool_files import read_records

from genesis_fp16_infrastructure.data.readers import ReadResult
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.world_model import kept_encoded
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
    """Every labelled record's encoded row, the kept ones taken."""
    return kept.pool(encoder, columns, numeric, stamp)


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


@pytest.mark.parametrize("change", ["growth", "before", "relabel", "edit", "categorical"])
def test_a_later_matrix_is_a_full_encode_of_what_changed_alone(tmp_path: Path, change: str) -> None:
    """A first pool's matrix kept; then 50 records more (in a file sorting last, or first:
    every kept row moved after them), or one record relabelled, edited or given other
    tools: the matrix is the full encode of the new pool bit for bit, and the rows
    encoded again are few (the new ones and those beside them; the changed record among
    them)."""
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
    elif change == "before":
        files = {"0.json": records[1150:], "a.json": records[:1150]}
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
    # Another content key writes the kept numeric rows whole, but the rows reused keep
    # their stamps: only the changed record and those beside it are encoded again
    assert 0 < kept.encoded < 3 * 50


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


def _grown_pools(tmp_path: Path, sizes: tuple[int, ...]) -> list[ReadResult]:
    """One pool read at each of ``sizes`` records, each the one before with records added
    in a file sorting last (a pool grown at its end)."""
    pool = generate_pool(max(sizes), seed=SEED)
    records = list(pool["trajectories"].values())
    reads, files, start = [], {}, 0
    for k, size in enumerate(sizes):
        files[f"{k:02d}.json"] = records[start:size]
        start = size
        reads.append(read_records(tmp_path / f"data{k}", dict(files), pool))
    return reads


def test_a_grown_pool_is_written_after_its_kept_rows_unless_rows_given_out_live(
    tmp_path: Path,
) -> None:
    """A pool grown at its end is the kept rows' store with the new rows after the kept
    ones (no copy: the same storage); while the rows given out before still live they are
    copied instead, and the rows given out before keep their bits."""
    reads = _grown_pools(tmp_path, (440, 470, 500))
    memory = KeptInMemory(64 * 2**20)
    numeric = KeptNumeric(tmp_path / "cache", tmp_path / "data", memory)
    columns = reads[0].columns
    encoder = FeatureEncoder.fit_parts(
        Categorical.of_rows(columns, columns.labelled), numeric_rows(columns, columns.labelled)
    )

    def matrix(data: ReadResult) -> tuple[torch.Tensor, KeptEncoded]:
        rows = numeric.rows(data.columns)
        kept = KeptEncoded(memory, str(numeric.path))
        return _matrix(kept, encoder, data.columns, rows, numeric.stamp), kept

    first, _ = matrix(reads[0])
    before = first.clone()
    lent, kept = matrix(reads[1])  # `first` lives
    assert _same(lent, _full(encoder, reads[1])) and _same(first, before)
    assert 0 < kept.encoded < len(lent) - len(first) + 60
    assert lent.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    storage = lent.untyped_storage().data_ptr()
    del first, lent
    grown, kept = matrix(reads[2])
    assert _same(grown, _full(encoder, reads[2])) and kept.reused > 400
    assert grown.untyped_storage().data_ptr() == storage  # written after the kept rows


def test_a_planted_or_stale_entry_is_refused(tmp_path: Path) -> None:
    """An entry in the store under the pool's name that is not what the rows were made of:
    rows of another width or fewer rows than it says (refused whole, counted), rows placed
    one record off or stamped by another working out (those rows encoded again), or
    garbage rows of the right stamps but another encoder's state (not used): each time
    the matrix is the full encode, bit for bit."""
    pool = generate_pool(400, seed=SEED)
    memory = KeptInMemory(64 * 2**20)
    data = read_records(tmp_path / "data", {"a.json": list(pool["trajectories"].values())}, pool)
    columns = data.columns
    numeric = numeric_rows(columns, columns.labelled)
    encoder = FeatureEncoder.fit_parts(Categorical.of_rows(columns, columns.labelled), numeric)
    n = len(columns.labelled)
    stamp = np.arange(n, dtype=np.uint64)
    full = _full(encoder, data)
    _matrix(KeptEncoded(memory, "pool"), encoder, columns, numeric, stamp)
    key = (kept_encoded.KIND, "pool")
    entry = memory.get(key, kept_encoded.KIND)
    assert isinstance(entry, kept_encoded._Entry)
    garbage = torch.full_like(entry.buffer, 7.0)
    shifted = np.concatenate((entry.labelled[1:], entry.labelled[-1:] + 1))
    plants = {
        "narrow": (replace(entry, buffer=entry.buffer[:, :-1]), n, 1),
        "short": (replace(entry, buffer=entry.buffer[: n - 1]), n, 1),
        "shifted": (replace(entry, buffer=garbage, labelled=shifted), n, 0),
        "restamped": (replace(entry, buffer=garbage, stamp=stamp + np.uint64(n)), n, 0),
        "another encoder": (replace(entry, buffer=garbage, encoder={"other": 1}), n, 0),
    }
    for name, (planted, encoded, refused) in plants.items():
        memory.put(key, kept_encoded.KIND, planted, 0, name)
        kept = KeptEncoded(memory, "pool")
        assert _same(_matrix(kept, encoder, columns, numeric, stamp), full), name
        assert (kept.encoded, kept.refused) == (encoded, refused), name
    kept = KeptEncoded(memory, "pool")  # the last run's rows, kept as they were made
    assert _same(_matrix(kept, encoder, columns, numeric, stamp), full)
    assert (kept.encoded, kept.reused) == (0, n)
