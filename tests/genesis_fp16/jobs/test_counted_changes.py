"""The daemon's promotion and rollback counters read what a run's transactions
committed (``TrainResult.transitions``), and the served-model journal only for what no
run reported (a run killed after its commit, an operator's command): each change once."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_harness import clear_daemon_env
from prometheus_client import CollectorRegistry

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.model_history import bound_agent_history
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16_infrastructure.agent_folder import candidates, transitions
from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Verdict
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.agent_folder.transaction import Committed, recording
from genesis_fp16_infrastructure.api import AgentFolder
from genesis_fp16_infrastructure.contract.reports import CommittedChange

AGENT = "counted"
PROMOTED = {"outcome": "promoted", "reason": "better"}


class _Daemon:
    """The daemon's side: its settings, its metrics and the agent's folder."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        clear_daemon_env(monkeypatch)
        self.settings = Settings(state_dir=tmp_path, agents={AGENT: {"data_path": tmp_path}})  # type: ignore[dict-item]
        self.metrics = DaemonMetrics(CollectorRegistry(), "test")
        self.home = AgentFolder(tmp_path, AGENT)
        self.folder = self.home.checkpoint_dir

    def baseline(self) -> None:
        """What the agent's first run in this daemon does (recording.record_start)."""
        pointer = read_pointer(self.folder)
        self.metrics.live.cursor.baseline(AGENT, [] if pointer is None else pointer.journal)

    def run_ended(self, reported: tuple[CommittedChange, ...] = ()) -> tuple[float, float]:
        """The run's end as the daemon handles it (model_history.bound_agent_history), and
        the two counters after it: promotions, live rollbacks."""
        bound_agent_history(self.settings, self.metrics, self.home, reported)
        sample = self.metrics.registry.get_sample_value
        promotions = sample("genesis_fp16_promotions_total", {"agent": AGENT}) or 0.0
        rollbacks = sample("genesis_fp16_live_rollbacks_total", {"agent": AGENT}) or 0.0
        return promotions, rollbacks

    def serve(self, digest: str, how: str) -> None:
        """A candidate trained and served as the gate serves it (its verdict carried)."""
        candidate = candidates.new_candidate(self.folder, {"fingerprint": digest, "records": 10})
        checkpoint = candidate / "ckpt-0000000005.pt"
        checkpoint.write_bytes(b"weights " + digest.encode())
        entry = candidates.candidate_entry(
            self.folder, candidate, checkpoint, Verdict.from_json(PROMOTED)
        )
        assert transitions.serve(self.folder, entry, how, verdict=PROMOTED)


def _reported(committed: list[Committed]) -> tuple[CommittedChange, ...]:
    """What a run carries back (judging.run.run_judged): its transactions' entries."""
    return tuple(CommittedChange(e.seq, e.kind, e.reason) for c in committed for e in c.entries)


def test_a_runs_reported_changes_count_when_the_journal_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The served-model pointer replaced by one whose journal starts at 1 again (an
    operator removed it, or restored an older state folder) while the daemon had counted
    up to 3: the runs' promotions count, as they report them (a journal walk from 3
    counted neither), and so does a later rollback no run reported (a killed run's)."""
    daemon = _Daemon(tmp_path, monkeypatch)
    for digest in ("aaaa", "bbbb", "cccc"):
        daemon.serve(digest, "gate")
    daemon.baseline()  # the daemon's first run here: the journal stands at 3
    SERVED_POINTER.at(daemon.folder).unlink()  # the operator starts the history again
    with recording() as committed:  # a run serves the first model again: journal 1
        daemon.serve("dddd", "first")
    assert daemon.run_ended(_reported(committed)) == (1.0, 0.0)
    with recording() as committed:  # the next run's gate promotes: journal 2
        daemon.serve("eeee", "gate")
    assert [e.seq for c in committed for e in c.entries] == [2]
    assert daemon.run_ended(_reported(committed)) == (2.0, 0.0)
    transitions.rollback(daemon.folder, verdict={"reason": "live_regression"})  # killed run
    assert daemon.run_ended() == (2.0, 1.0)
    assert daemon.run_ended() == (2.0, 1.0)  # each once


def test_a_change_reported_and_in_the_journal_counts_once_and_an_unreported_one_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's promotion, reported and in the journal, counts once; a live rollback a
    killed run committed without a report counts from the journal, once; an operator's
    rollback and promotion by hand count in neither counter (as before)."""
    daemon = _Daemon(tmp_path, monkeypatch)
    daemon.baseline()  # nothing served yet
    with recording() as committed:
        daemon.serve("aaaa", "first")
    assert daemon.run_ended(_reported(committed)) == (1.0, 0.0)
    with recording() as committed:
        daemon.serve("bbbb", "gate")
    transitions.rollback(daemon.folder, verdict={"reason": "live_regression"})  # killed run
    assert daemon.run_ended(_reported(committed)) == (2.0, 1.0)
    daemon.serve("cccc", "manual")
    pin = transitions.operator_pin("model rollback")
    transitions.rollback(daemon.folder, pin=pin, verdict=Verdict(reason="operator"))
    assert daemon.run_ended() == (2.0, 1.0)
