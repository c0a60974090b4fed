"""Pool files written into a folder and read back as a run reads them, for the tests of
what a resident process keeps between runs (the drift reference, the judged ids, the
encoder and the encoded rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories

Pool = dict[str, Any]


def read_files(folder: Path, files: dict[str, Pool]) -> PoolColumns:
    """``files`` written in ``folder`` (nothing else there) and read as a run reads them."""
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for name, pool in files.items():
        (folder / name).write_text(json.dumps(pool))
    return read_trajectories(folder, keep_text=False).columns


def read_records(folder: Path, files: dict[str, list[Pool]], pool: Pool) -> ReadResult:
    """Each of ``files`` (a name and its records) written in ``folder`` (nothing else
    there) as ``pool`` holding those records, and the folder read as a run reads it."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for name, records in files.items():
        trajectories = {r["trajectory_id"]: r for r in records}
        (folder / name).write_text(json.dumps({**pool, "trajectories": trajectories}))
    return read_trajectories(folder, keep_text=False)
