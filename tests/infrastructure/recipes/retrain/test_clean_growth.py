"""se_darwin learns from clean growth without losing what it knew (issue 93, item 4): a
first model on four Genesis agents' pools, then a fifth agent's clean records, judged as a
scheduled run judges them, at the default budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from se_darwin_runs import train

from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.data.synthetic import generate_pool

AGENTS = tuple(f"agent_{k}" for k in range(5))  # base rates alike: the fifth is more of the same
RECORDS = 900  # each agent's; held out: ~180 records a known agent, ~710 of all four
SEED = 0


def _add(data: Path, name: str, agent: str, seed: int) -> None:
    data.mkdir(exist_ok=True)
    (data / f"{name}.json").write_text(json.dumps(generate_pool(RECORDS, seed, agent=agent)))


def _worse(result: TrainResult) -> list[str]:
    """The gate's comparisons that showed the candidate worse beyond the margin."""
    assert result.gate is not None
    return [c.reason for c in result.gate.comparisons if c.finding == "worse"]


@pytest.mark.slow
def test_a_fifth_agents_clean_records_are_promoted_without_a_known_agent_worse(
    tmp_path: Path,
) -> None:
    """The candidate on the grown pool is promoted, or inconclusive and then promoted after
    one more clean batch; never rejected, and no known agent's segment shown worse. At
    f277212 (one fresh network a held-out run) it was inconclusive twice at this seed
    (benchmarks/results/se_darwin_growth_93_cpu-2-cores.md has the figures)."""
    data, ckpt = tmp_path / "data", tmp_path / "ck"
    for k, agent in enumerate(AGENTS[:4]):
        _add(data, agent, agent, SEED * 100 + k)
    first = train(data, ckpt, steps=None, seed=SEED)
    assert first.gate is not None and first.gate.outcome == "promoted"
    verdicts = []
    for name, seed in ((AGENTS[4], SEED * 100 + 4), (f"{AGENTS[4]}-more", SEED * 100 + 50)):
        _add(data, name, AGENTS[4], seed)
        grown = train(data, ckpt, steps=None, seed=SEED, resume=True)
        assert grown.extra["resumed_from"] is None  # new records: trained afresh
        assert not _worse(grown), _worse(grown)
        assert grown.gate is not None
        verdicts.append(grown.gate.outcome)
        if grown.gate.outcome != "inconclusive":
            break
    assert verdicts in (["promoted"], ["inconclusive", "promoted"]), verdicts
