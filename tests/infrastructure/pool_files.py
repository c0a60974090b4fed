"""Pool files written into a folder and read back as a run reads them, for the tests of
what a resident process keeps between runs (the drift reference, the judged ids, the
encoder and the encoded rows)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.data.manifest import Manifest, scan_files
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory

Pool = dict[str, Any]
AGE_NS = 60 * 10**9  # a file written this long ago: older than the record cache's racy window


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


class ResidentReads:
    """A folder read as a resident run process reads it: through a record cache whose
    joined pool ``memory`` keeps from one read to the next, so that a new file is joined
    alone, after the kept pool's records or laid among them (``data.pool_splice``: a file
    sorting among the old). Without ``memory``, each read is a fresh one."""

    def __init__(self, folder: Path, cache: Path, memory: KeptInMemory | None) -> None:
        self.folder, self.cache, self.memory = folder, cache, memory
        self.manifest: Manifest | None = None
        self.aged: set[Path] = set()

    def write(self, name: str, pool: Pool) -> None:
        """``pool`` as the file ``name`` in the folder."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / name).write_text(json.dumps(pool))

    def read(self) -> ReadResult:
        """The folder read, each file new since the last read dated ``AGE_NS`` back first
        (once: a new ctime would make it another file to the cache)."""
        if self.memory is None:
            return read_trajectories(self.folder, keep_text=False)
        for file in set(self.folder.iterdir()) - self.aged:
            past = file.stat().st_mtime_ns - AGE_NS
            os.utime(file, ns=(past, past))
            self.aged.add(file)
        self.manifest, _ = scan_files(self.folder, self.manifest)
        cache = RecordCache(self.cache, self.manifest, self.memory)
        return read_trajectories(self.folder, cache=cache, keep_text=False)
