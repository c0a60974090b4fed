"""The gate's segments (gate.Segments.of): the pairs inside the known segments and each
known segment's veto, the same as asked plainly, one segment and one comparison at a
time, name by name."""

from __future__ import annotations

import numpy as np
import pytest

from genesis_fp16_infrastructure.judging.gate import SEGMENT_MIN_RECORDS, Segments


def _plainly(
    segments: tuple[str, ...], rows: np.ndarray, known: set[str] | None
) -> tuple[list[bool] | None, list[tuple[str, list[bool]]]]:
    """What Segments.of answers, asked of each pair's segment name by name."""
    paired = [segments[r] for r in rows.tolist()]
    if len(set(paired)) < 2:
        return None, []
    inside = [known is None or name in known for name in paired]
    vetoes = []
    for name in sorted({n for n, i in zip(paired, inside, strict=True) if i}):
        picked = [n == name for n in paired]
        if sum(picked) >= SEGMENT_MIN_RECORDS:
            vetoes.append((name, picked))
    return inside, vetoes


@pytest.mark.parametrize("seed", range(12))
def test_segments_are_those_asked_plainly(seed: int) -> None:
    """Random segments (some too small for a veto, some never paired, some unknown), rows
    in any order: the same pairs inside and the same vetoes, in the same order."""
    rng = np.random.default_rng(seed)
    names = [f"s{k}" for k in range(int(rng.integers(1, 7)))]
    weights = rng.dirichlet(np.ones(len(names)))
    segments = tuple(rng.choice(names, size=int(rng.integers(50, 400)), p=weights).tolist())
    rows = rng.permutation(len(segments))[: int(rng.integers(1, len(segments)))]
    known = None if seed % 3 == 0 else set(rng.choice(names, size=len(names) // 2).tolist())
    found = Segments.of(segments, rows, known)
    inside, vetoes = _plainly(segments, rows, known)
    assert (None if found.inside is None else found.inside.tolist()) == inside
    assert [(n, p.tolist()) for n, p in found.vetoes] == vetoes


def test_one_segment_paired_asks_a_single_question() -> None:
    """Two segments in the listing but one among the pairs: no segment is asked apart."""
    found = Segments.of(("a", "b", "a", "a"), np.array([0, 2, 3]), None)
    assert found.inside is None and found.vetoes == ()
