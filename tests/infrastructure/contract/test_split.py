"""The held-out split: a record's side is its id's alone (stable as the pool grows or is
reordered), about the stated fraction is held out, hashes of either 64-bit integer type
give the same sides, what it cannot read is refused in one line, and sorted_unique is
np.unique's answer."""

from __future__ import annotations

import numpy as np
import pytest

from genesis_fp16_infrastructure.contract import split
from genesis_fp16_infrastructure.contract.split import (
    HELD_OUT,
    HeldOutSplit,
    ScoreOnly,
    id_hashes,
    sorted_unique,
)


def test_a_record_keeps_its_side_as_the_pool_grows_and_is_reordered() -> None:
    """The sides of 1,000 ids are the same alone, after 9,000 more, and shuffled."""
    ids = [f"line-{i}" for i in range(1000)]
    alone = HELD_OUT.of_ids(ids)
    grown = HELD_OUT.of_ids([f"new-{i}" for i in range(9000)] + ids)[9000:]
    order = np.random.default_rng(0).permutation(1000)
    shuffled = HELD_OUT.of_ids([ids[i] for i in order])
    assert np.array_equal(alone, grown) and np.array_equal(alone[order], shuffled)
    assert 0 < alone.sum() < 1000


def test_about_the_fraction_is_held_out_and_another_salt_is_another_split() -> None:
    """100,000 ids: 20% held out within 1% (the binomial's s.d. is 0.13%); a split of
    another salt holds out an independent 20% (the overlap near 4%)."""
    ids = [f"record-{i}" for i in range(100_000)]
    held = HELD_OUT.of_ids(ids)
    other = HeldOutSplit(salt="another").of_ids(ids)
    assert abs(held.mean() - 0.2) < 0.01 and abs(other.mean() - 0.2) < 0.01
    assert abs((held & other).mean() - 0.04) < 0.005


def test_signed_and_unsigned_hashes_give_the_same_sides() -> None:
    """An int64 hash (se_darwin's record_id_hash) is read as the same 64 bits."""
    hashes = id_hashes([str(i) for i in range(5000)])
    assert np.array_equal(HELD_OUT.of_hashes(hashes), HELD_OUT.of_hashes(hashes.view(np.int64)))


@pytest.mark.parametrize(
    ("call", "why"),
    [
        (lambda: HELD_OUT.of_hashes(np.zeros(3, dtype=np.int32)), "dtype int32, not 64-bit"),
        (lambda: HELD_OUT.of_hashes(np.zeros(3)), "dtype float64, not 64-bit"),
        (lambda: HeldOutSplit(fraction=1.0), "fraction 1.0 is not in"),
    ],
)
def test_what_the_split_cannot_read_is_refused_in_one_line(call: object, why: str) -> None:
    """Hashes of another width or kind, a fraction outside (0, 1): ValueError naming it."""
    with pytest.raises(ValueError, match=why) as caught:
        call()  # type: ignore[operator]
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("dtype", [np.uint64, np.int64])
def test_sorted_unique_is_numpys_unique_of_ids(dtype: type) -> None:
    """sorted_unique gives np.unique's array (values, order, dtype) for 64-bit ids with
    repeats, extremes and none at all."""
    rng = np.random.default_rng(5)
    drawn: np.ndarray = rng.integers(0, 2**63, 5_000, dtype=np.int64).astype(dtype)
    extremes: np.ndarray = np.array([0, 1, np.iinfo(dtype).max, np.iinfo(dtype).min], dtype=dtype)
    for values in (np.concatenate([drawn, drawn[::3], extremes]), extremes[:1], drawn[:0]):
        found, expected = sorted_unique(values), np.unique(values)
        assert found.dtype == expected.dtype and found.tolist() == expected.tolist()


def test_rows_asked_by_their_place_in_a_listing_are_the_rows_looked_up() -> None:
    """A ``ScoreOnly`` made of rows of a listing gives those rows for the listing's ids
    (a list or a tuple of them) without a lookup per id, and the rows a set lookup gives
    for ids that are not the listing (one changed, reordered, one more): the same
    answer as ``ScoreOnly(ids)`` every time."""
    listing = tuple(f"record-{i}" for i in range(50))
    at = [2, 3, 17, 49]
    asked = ScoreOnly.of_rows(listing, at)
    plain = ScoreOnly(frozenset(listing[r] for r in at))
    assert asked.ids == plain.ids
    changed = list(listing)
    changed[17] = "record-17b"
    others = (list(listing), listing, changed, list(reversed(listing)), [*listing, "x"])
    for ids in others:
        assert asked.rows(ids) == plain.rows(ids)

    class Counted(frozenset[str]):
        looked_up = 0

        def __contains__(self, item: object) -> bool:
            Counted.looked_up += 1
            return super().__contains__(item)

    counted = ScoreOnly(Counted(plain.ids), listing, tuple(at))
    assert counted.rows(list(listing)) == at and Counted.looked_up == 0
    assert counted.rows(changed) == [2, 3, 49] and Counted.looked_up == len(changed)


def test_the_ids_of_rows_asked_are_a_set_made_when_read() -> None:
    """A ``ScoreOnly`` made of rows of a listing builds no set of its ids until a plugin
    reads ``ids`` (a plugin asking by rows of the listing never does); read, it is the set
    of the ids at those rows, the one ``ScoreOnly(ids)`` holds. Neither ids nor rows:
    refused in one line."""
    listing = tuple(f"record-{i}" for i in range(20))
    asked = ScoreOnly.of_rows(listing, [0, 4, 19])
    assert asked.rows(listing) == [0, 4, 19] and "ids" not in vars(asked)
    assert asked.ids == frozenset({"record-0", "record-4", "record-19"})
    assert asked.rows(list(reversed(listing))) == [0, 15, 19]
    with pytest.raises(ValueError, match=r"^ScoreOnly: the ids asked for"):
        ScoreOnly()


def test_kept_sides_are_reused_for_the_same_or_a_grown_pool_and_equal_a_fresh_draw() -> None:
    """The same hashes asked again are answered from the kept draw, a pool grown at its
    end is drawn past the kept hashes alone, and both answers equal a draw of every hash;
    the caller's array is its own (changing it changes nothing kept)."""
    hashes = id_hashes([f"kept-{i}" for i in range(5000)])
    fresh = HELD_OUT._draw(hashes)
    before = dict(split.DRAWS)
    first = HELD_OUT.of_hashes(hashes[:4000])
    first[:] = True  # the caller's own copy
    again = HELD_OUT.of_hashes(hashes[:4000])
    grown = HELD_OUT.of_hashes(hashes)
    assert np.array_equal(again, fresh[:4000]) and np.array_equal(grown, fresh)
    assert split.DRAWS["kept"] > before.get("kept", 0)
    assert split.DRAWS["grown"] > before.get("grown", 0)


def test_a_planted_or_stale_kept_draw_is_not_believed() -> None:
    """A kept answer whose sides were planted (flipped) or whose hashes are not the
    asked ones' first (a changed pool), or drawn under another salt, is not used: the
    answer is a draw of every hash."""
    hashes = id_hashes([f"planted-{i}" for i in range(3000)])
    fresh = HELD_OUT._draw(hashes)
    planted = split._Drawn.of((HELD_OUT.fraction, HELD_OUT.salt), hashes, ~fresh)
    split._keep_drawn(planted)
    assert np.array_equal(HELD_OUT.of_hashes(hashes), fresh)
    changed = hashes.copy()
    changed[5] ^= np.uint64(1)
    split._keep_drawn(split._Drawn.of((HELD_OUT.fraction, HELD_OUT.salt), changed, ~fresh))
    assert np.array_equal(HELD_OUT.of_hashes(hashes), fresh)
    with split.drawn_with("another salt") as other:
        assert np.array_equal(other.of_hashes(hashes), other._draw(hashes))
        assert not np.array_equal(other.of_hashes(hashes), fresh)


def test_rows_asked_by_a_listing_are_an_array_no_one_can_change() -> None:
    """The rows a run asked by are its own copy: the caller's array changed after
    changes nothing, and the array handed out cannot be written or made writeable;
    asked of other ids, there is none (``rows`` looks them up)."""
    listing = ("a", "b", "c", "d")
    given = np.array([1, 3])
    asked = ScoreOnly.of_rows(listing, given)
    given[0] = 0
    at = asked.row_array(listing)
    assert at is not None and at.tolist() == [1, 3] == asked.rows(list(listing))
    with pytest.raises(ValueError):
        at.flags.writeable = True
    with pytest.raises(ValueError):
        at[0] = 2
    assert asked.row_array(("a", "b", "c", "e")) is None
    assert asked.rows(["d", "x", "b", "y"]) == [0, 2]


_M64 = (1 << 64) - 1


def _finalised(x: int) -> int:
    """splitmix64's finaliser on one Python int (module docstring), mod 2**64."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _unshift(y: int, shift: int) -> int:
    """The x with x ^ (x >> shift) == y."""
    x = y
    for _ in range(64 // shift + 1):
        x = y ^ (x >> shift)
    return x


def _before(z: int) -> int:
    """The finaliser's input whose output is ``z`` (each step undone)."""
    x = _unshift(z, 31)
    x = _unshift((x * pow(0x94D049BB133111EB, -1, 1 << 64)) & _M64, 27)
    return _unshift((x * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & _M64, 30)


def test_sides_at_the_fraction_s_edge_are_the_float_reading_s() -> None:
    """A hash whose draw is a number in [0, 1) just under, at or just past the fraction
    (hashes made by undoing the finaliser) is held out exactly where ``z * 2**-53 <
    fraction`` holds in float64, for a fraction of exact binary places (0.5) and ones of
    none (0.2, 0.3, 1 - 2**-40); and the mixing is splitmix64's on 1,000 random hashes."""
    rng = np.random.default_rng(7)
    values = rng.integers(0, 2**63, 1000, dtype=np.int64).view(np.uint64)
    expected = [_finalised(int(v) ^ 0x1234) for v in values.tolist()]
    assert split.splitmix64(values, np.uint64(0x1234)).tolist() == expected
    for fraction in (0.5, 0.2, 0.3, 1 - 2**-40):
        drawn = HeldOutSplit(fraction=fraction, salt="edge")
        key = int(
            np.frombuffer(split.hashlib.blake2b(b"edge", digest_size=8).digest(), np.uint64)[0]
        )
        edge = int(fraction * 2**53)
        tops = [edge - 1, edge, edge + 1, 0, 2**53 - 1]
        hashes = [_before((top << 11) | low) ^ key for top in tops for low in (0, 2047)]
        held = drawn._draw(np.array(hashes, dtype=np.uint64))
        floats = [top * 2.0**-53 < fraction for top in tops for _ in (0, 2047)]
        assert held.tolist() == floats
