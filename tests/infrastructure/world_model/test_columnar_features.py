"""The column-wise encoder gives today's row-at-a-time features bit for bit."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import OPERATORS, AttemptInput
from genesis_fp16_infrastructure.data.synthetic import write_pool, write_replay_buffer
from genesis_fp16_infrastructure.world_model.features import (
    NUMERIC_FEATURES,
    FeatureEncoder,
    _numeric,
    numeric_columns,
)


def _row_reference(encoder: FeatureEncoder, attempt: AttemptInput, pool: Pool) -> list[float]:
    """The encoder's row as it was computed before the columns (kept here as the yardstick)."""
    numeric = _numeric(attempt, pool)
    row = [(v - m) / s for v, m, s in zip(numeric, encoder.mean, encoder.std, strict=True)]
    row += [1.0 if attempt.operator == op else 0.0 for op in OPERATORS]
    used = set(attempt.tools_used)
    row += [1.0 if tool in used else 0.0 for tool in encoder.tools]
    row.append(float(len(used - set(encoder.tools))))
    row += [1.0 if attempt.reasoning_pattern == p else 0.0 for p in encoder.patterns]
    row.append(0.0 if attempt.reasoning_pattern in encoder.patterns else 1.0)
    rate = dict(encoder.agent_rates).get(attempt.agent, encoder.base_rate)

    def logit(p: float) -> float:
        p = min(1 - 1e-6, max(1e-6, p))
        return math.log(p / (1 - p))

    row.append(round(logit(rate) - logit(encoder.base_rate), 6))
    return row


def test_column_features_equal_row_features_bit_for_bit(tmp_path: Path) -> None:
    """A generated pool and a replay buffer (several agents, unknown tools and patterns,
    an encoder fitted on a part) encode to the very bits the per-row code gave."""
    write_pool(tmp_path / "pools", 1500, seed=3, agent="se_darwin")
    write_replay_buffer(tmp_path / "pools" / "replay.jsonl", 300, seed=4, agent="other")
    data = read_trajectories(tmp_path / "pools")
    attempts = [e.attempt for e in data.examples]
    fitted_on = attempts[: len(attempts) // 2]
    successes = [e.label.success for e in data.examples[: len(fitted_on)]]
    encoder = FeatureEncoder.fit(fitted_on, data.pool, successes, max_tools=4, max_patterns=3)
    expected = torch.tensor(
        [_row_reference(encoder, a, data.pool) for a in attempts], dtype=torch.float32
    )
    got = encoder.encode(attempts, data.pool)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))
    # The precomputed numeric columns give the same bits as computing them inside.
    again = encoder.encode(attempts, data.pool, numeric_columns(attempts, data.pool))
    assert torch.equal(again.view(torch.int32), expected.view(torch.int32))


def test_an_empty_list_encodes_to_no_rows() -> None:
    """No attempts: a (0, n_features) matrix, as before."""
    width = len(NUMERIC_FEATURES)
    encoder = FeatureEncoder(("a",), ("p",), (0.0,) * width, (1.0,) * width)
    assert encoder.encode([], {}).shape == (0, encoder.n_features)
