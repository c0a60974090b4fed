"""The judged stores' files (judging/stores.py): a torn file is set aside, never raised."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import JUDGED_IDS
from genesis_fp16_infrastructure.judging import stores


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9])
def test_a_torn_npz_is_set_aside_and_reported_not_raised(tmp_path: Path, keep: float) -> None:
    """A judged-ids file cut short after its zip header (a torn write, a full disk) reads as
    no file: it is set aside as unusable and reported once, and the run goes on."""
    stores.write_known_ids(tmp_path, np.arange(500, dtype=np.uint64))
    path = JUDGED_IDS.at(tmp_path)
    raw = path.read_bytes()
    assert raw[:2] == b"PK"  # a zip, as np.savez writes
    path.write_bytes(raw[: int(len(raw) * keep)])
    reported: list[files.SetAside] = []
    forget = files.on_set_aside(reported.append)
    try:
        assert stores.read_known_ids(tmp_path) is None
    finally:
        forget()
    assert not path.exists()
    assert len(reported) == 1
    assert list(tmp_path.glob(f"{path.name}.unusable-*"))


def test_known_is_isin_of_any_ids_in_a_sorted_pool() -> None:
    """stores.known answers as np.isin does (the judged run's lookups, and the retrain
    recipe's new records for drift), of int64 hashes too, for an empty or one-id pool."""
    rng = np.random.default_rng(3)
    held = rng.integers(-(2**63), 2**63 - 1, size=5000, dtype=np.int64)
    values = np.concatenate([held[::7], rng.integers(-(2**63), 2**63 - 1, 3000, np.int64)])
    for pool in (held, held[:0], held[:1]):
        assert np.array_equal(stores.known(values, np.sort(pool)), np.isin(values, pool))
