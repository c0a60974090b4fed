"""Pool files written into a folder and read back as a run reads them, for the tests of
what a resident process keeps between runs (the drift reference, the judged ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import read_trajectories

Pool = dict[str, Any]


def read_files(folder: Path, files: dict[str, Pool]) -> PoolColumns:
    """``files`` written in ``folder`` (nothing else there) and read as a run reads them."""
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for name, pool in files.items():
        (folder / name).write_text(json.dumps(pool))
    return read_trajectories(folder, keep_text=False).columns
