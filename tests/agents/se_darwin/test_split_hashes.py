"""The split's and the fingerprint's hashes, a million ids at a time, are the documented
ones: a record keeps its part, its fold and its fingerprint across versions."""

from __future__ import annotations

import hashlib

from genesis_fp16_agents.se_darwin.split import assign_folds, is_held_out, split_point, split_points
from genesis_fp16_infrastructure.data.record_key import record_id_hash, record_id_hashes

IDS = ["t1", "", "traj-000042", "ünïcode-id", "a:b", "x" * 200]


def _blake(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def test_split_points_are_the_hash_of_seed_salt_and_id() -> None:
    for seed in (0, 7):
        for salt in ("", "validation:"):
            expected = [int.from_bytes(_blake(f"{seed}:{salt}{i}"), "big") / 2**64 for i in IDS]
            assert split_points(IDS, seed, salt) == expected
            assert [split_point(i, seed, salt) for i in IDS] == expected
            assert [is_held_out(i, seed, 0.5, salt) for i in IDS] == [p < 0.5 for p in expected]


def test_folds_and_id_hashes_are_the_documented_hashes() -> None:
    assert assign_folds(IDS, 3, 5) == [
        int.from_bytes(_blake(f"3:fold:{i}"), "big") % 5 for i in IDS
    ]
    expected = [int.from_bytes(_blake(i), "big", signed=True) for i in IDS]
    assert record_id_hashes(IDS) == expected == [record_id_hash(i) for i in IDS]
