"""A scaffold-made plugin (`new-agent`) served by a real daemon and continued over five
clean growths of its data is promoted or inconclusive each time, never rejected (issue
93, item 5): more records like the ones it learned never make its gate throw a run away."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, DaemonProcess
from judged_daemon import clean_growths

RECORDS = 300  # the first pool, and each growth's new records
GROWTHS = 5


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_scaffold_plugin_continued_over_five_clean_growths_is_never_rejected(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """The first model on 300 clean records is served; then five times 300 new clean
    records (the same distribution, a new seed each) are appended and `genesis-fp16 run`
    continues the served model: each run's gate, judged on held-out records, says
    promoted or inconclusive, never rejected. Over 8 seeds each growth was promoted
    (benchmarks/results/scaffold_clean_growths_cpu-intel-xeon-2-cores.md)."""

    def start(env: dict[str, str]) -> DaemonProcess:
        return daemon_factory(env, fixtures=False)

    first, *growths = clean_growths(start, tmp_path, RECORDS, GROWTHS, seed=0)
    assert first["outcome"] == "promoted", first
    assert len(growths) == GROWTHS
    for gate in growths:
        assert gate["outcome"] in ("promoted", "inconclusive"), gate["reason"]
        assert gate["evidence"] == "held_out", gate  # judged on records neither trained on
