"""The pools of the se_darwin runs that start from a first model served on RECORDS
(the ``first`` fixture, conftest.py): its own and what the later runs add. Shared by
the tests of what a resident run keeps and of the gate taking its candidate's
evaluation."""

from __future__ import annotations

import json
from pathlib import Path

from genesis_fp16_infrastructure.agent_folder.pointer import checkpoint_of, read_pointer
from genesis_fp16_infrastructure.data.synthetic import generate_pool

RECORDS = 3600  # a held-out split: 30% of the pool over 1,000 records (split.py)


def write_pool(folder: Path, name: str, records: int, seed: int) -> None:
    """A synthetic pool of ``records`` drawn with ``seed``, as ``folder/name``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(generate_pool(records, seed=seed)))


def served_checkpoint(folder: Path) -> Path:
    """The checkpoint the pointer of ``folder``'s runs (``folder / "ck"``) serves."""
    pointer = read_pointer(folder / "ck")
    assert pointer is not None
    return checkpoint_of(folder / "ck", pointer)
