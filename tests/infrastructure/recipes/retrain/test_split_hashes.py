"""The split's and the fingerprint's hashes, a million ids at a time, are the documented
ones: a record keeps its part, its fold and its fingerprint across versions."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import record_id_hash, record_id_hashes
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.split import (
    SPLIT_HASH,
    Draw,
    choose_split,
    judged_held_out,
)

IDS = ["t1", "", "traj-000042", "ünïcode-id", "a:b", "x" * 200]


def _blake(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def _version_1(ids: list[str]) -> Draw:
    """A draw of ``ids`` for version 1, which hashes the ids alone."""
    return Draw(ids, np.zeros(len(ids), dtype=np.int64))


def test_split_points_are_the_hash_of_seed_salt_and_id() -> None:
    for seed in (0, 7):
        for salt in ("", "validation:"):
            expected = [int.from_bytes(_blake(f"{seed}:{salt}{i}"), "big") / 2**64 for i in IDS]
            assert _version_1(IDS).points(seed, salt, 1).tolist() == expected


def test_folds_and_id_hashes_are_the_documented_hashes() -> None:
    assert _version_1(IDS).folds(3, 5, 1).tolist() == [
        int.from_bytes(_blake(f"3:fold:{i}"), "big") % 5 for i in IDS
    ]
    expected = [int.from_bytes(_blake(i), "big", signed=True) for i in IDS]
    assert record_id_hashes(IDS).tolist() == expected == [record_id_hash(i) for i in IDS]


def _splitmix(record_hash: int, seed: int, salt: str) -> int:
    """Version 2's draw, in Python integers: the id's record hash xor the key, mixed."""
    z = (record_hash % 2**64) ^ int.from_bytes(_blake(f"{seed}:{salt}"), "big")
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return z ^ (z >> 31)


def test_version_2_draws_mix_the_id_hash_with_the_seed_and_salt() -> None:
    hashes = record_id_hashes(IDS).tolist()
    draw = Draw(IDS, np.array(hashes, dtype=np.int64))
    for seed in (0, 7):
        for salt in ("", "validation:"):
            expected = [(_splitmix(h, seed, salt) >> 11) * 2.0**-53 for h in hashes]
            assert draw.points(seed, salt, 2).tolist() == expected
            # Version 1 is the blake2b of seed, salt and id, as before: the id hashes unread.
            assert (
                draw.points(seed, salt, 1).tolist()
                == _version_1(IDS).points(seed, salt, 1).tolist()
            )
    assert draw.folds(3, 5, 2).tolist() == [_splitmix(h, 3, "fold:") % 5 for h in hashes]
    assert draw.folds(3, 5, 1).tolist() == _version_1(IDS).folds(3, 5, 1).tolist()
    with pytest.raises(TrainRequestError, match="split hash version 3"):
        draw.points(0, "", 3)


def test_a_checkpoint_keeps_the_split_it_was_drawn_with(tmp_path: Path) -> None:
    """A fresh run draws with SPLIT_HASH; resuming a checkpoint from before the version
    was kept draws its validation part as it did (version 1), so no record changes part
    mid-run; either way the held-out part is the judged run's records."""
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(generate_pool(4000, seed=2)))
    data = read_trajectories(path)
    options = TaskOptions.from_mapping({"cross_validation": False})
    fresh = choose_split(data, options, 5)
    assert fresh.hash == SPLIT_HASH == 2
    old = choose_split(data, options, 5, {"model": {"members": 1}, "split": {"seed": 5}})
    assert old.hash == 1
    judged = np.flatnonzero(judged_held_out(data))
    assert old.held_out.tolist() == fresh.held_out.tolist() == judged.tolist()
    assert not np.array_equal(old.validation, fresh.validation)  # the versions draw differently
    # Both validate on about the same share.
    assert abs(len(fresh.validation) - len(old.validation)) < 0.2 * len(old.validation)
