"""Every transition of the served model, killed (SIGKILL) after each of its writes.

For each transition (the gate's promotion and rejection, the live watch's rollback, the
operator's promote, rollback and unpin, the pre-run repair and the operator's repair over
an unusable pointer, prune), a child process runs it as its caller does
(lifecycle_kill_child.py) once to count its durable steps, then once per step, killed
right after it. After each kill the daemon's next owner call (its post-run recovery and
prune, then its journal count) runs, and the folder must hold the state before the transition or the
state after it: no model lost, no verdict that disagrees with the pointer, the watch's
rollback counted once when it reached the pointer and never when it did not, and its
event in the agent's outbox once when it happened, never when it did not.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
from prometheus_client import CollectorRegistry
from served_models import gate_serve, trained

from genesis_fp16.metrics.served_metrics import LiveMetrics, PromotionMetrics
from genesis_fp16_infrastructure.agent_folder import (
    candidates,
    lifecycle_records,
    outbox,
    outbox_catch_up,
    repair,
    transitions,
)
from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER, VERDICT
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Pin
from genesis_fp16_infrastructure.agent_folder.pointer import (
    ServedPointer,
    read_pointer,
    served_checkpoint,
    write_pointer,
)
from genesis_fp16_infrastructure.agent_folder.transaction import transaction
from genesis_fp16_infrastructure.contract.reports import LiveReport
from genesis_fp16_infrastructure.errors import ServedPointerError

CHILD = Path(__file__).with_name("lifecycle_kill_child.py")
AGENT = "se_darwin"
SCENARIOS = (
    "gate_promote",
    "gate_reject",
    "watch_rollback",
    "operator_promote",
    "operator_rollback",
    "operator_unpin",
    "repair",
    "operator_repair",
    "prune",
)
DAY = 86400.0


def _build(tmp: Path, scenario: str) -> Path:
    """The folder before the transition: three models served in turn (c2 served, history
    c1, c0), a fresh unjudged candidate and one rejected 30 days ago; returns the roles."""
    ck = tmp / "state" / "agents" / AGENT / "checkpoints"
    served = [trained(ck, d) for d in ("aaaa0000", "bbbb0000", "cccc0000")]
    for candidate in served:
        gate_serve(ck, candidate, unless_pinned=True)
    fresh, old = trained(ck, "dddd0000"), trained(ck, "eeee0000")
    month_ago = time.time() - 30 * DAY  # written as write_verdict would have, then
    verdict = {"outcome": "rejected", "decided_at": "a month ago", "decided_at_s": month_ago}
    with outbox_catch_up.verdict_announced(old, verdict):
        VERDICT.at(old).write_text(json.dumps(verdict))
    if scenario == "operator_unpin":
        with transaction(ck, settle=False) as tx:
            tx.stage(_pinned(tx.pointer))
    if scenario in ("repair", "operator_repair"):  # a pointer naming a checkpoint gone
        pointer = read_pointer(ck)
        assert pointer is not None
        gone = msgspec.structs.replace(
            pointer.served, checkpoint="candidates/gone/ckpt-0000000005.pt"
        )
        write_pointer(ck, replace(pointer, served=gone))
    roles = {"checkpoints": str(ck), "served": served[-1].name, "fresh": fresh.name}
    roles["old_rejected"] = old.name
    (tmp / "roles.json").write_text(json.dumps(roles))
    return tmp / "roles.json"


def _pinned(pointer: ServedPointer | None) -> ServedPointer:
    assert pointer is not None
    return transitions.journaled(pointer, replace(pointer, pinned=Pin(by="test")), "pin")


def _child(roles: Path, scenario: str, kill_after: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env["GENESIS_FP16_STATE_DIR"] = str(roles.parent / "state")
    command = [sys.executable, str(CHILD), str(roles), scenario, str(kill_after)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def _journal(ck: Path) -> list[lifecycle_records.JournalEntry] | None:
    try:
        pointer = read_pointer(ck)
    except ServedPointerError:
        return None
    return [] if pointer is None else pointer.journal


def _next_owner_call(ck: Path, metrics: tuple[LiveMetrics, PromotionMetrics]) -> list[int]:
    """What the daemon does after a run, killed or not (model_history.bound_agent_history): recover
    what the run left to finish (transitions.recover), prune (keeping the last five
    served and 60 days of decisions: nothing here is due), then count the journal's
    rollbacks and promotions. Returns what it counted of each."""
    with contextlib.suppress(ServedPointerError):  # it prunes nothing (the daemon logs it)
        transitions.recover(ck)
        candidates.prune(ck, 5, 60.0)
    live, promotion = metrics
    new = live.cursor.new(AGENT, _journal(ck) or [])
    return [live.count_rollbacks(AGENT, new), promotion.count_promotions(AGENT, new)]


def _live_report(report: dict[str, Any]) -> LiveReport:
    """The run's report of the child's rollback, as the daemon receives it (the fields
    the child's figures leave out filled in)."""
    assert report["rolled_back"] is True
    filled = {"against": None, "new_records": 300}
    return LiveReport.from_json({**filled, **report})


def _copy(base: Path, root: Path) -> tuple[Path, Path]:
    """A copy of the folder ``base`` at ``root``: its roles file and checkpoint folder."""
    shutil.copytree(base, root, symlinks=True)
    roles = json.loads((root / "roles.json").read_text())
    ck = root / Path(roles["checkpoints"]).relative_to(base)
    (root / "roles.json").write_text(json.dumps({**roles, "checkpoints": str(ck)}))
    return root / "roles.json", ck


def _counter(ck: Path) -> tuple[LiveMetrics, PromotionMetrics]:
    """The daemon's counting path, its baseline taken before the transition."""
    registry = CollectorRegistry()
    live = LiveMetrics(registry)
    live.cursor.baseline(AGENT, _journal(ck) or [])
    return live, PromotionMetrics(registry)


def _state(ck: Path) -> dict[str, Any]:
    """What a transition changes: the pointer (served, history, pin; "unusable") and each
    candidate's verdict outcome (None: unfinished), timestamps left out."""
    try:
        pointer = read_pointer(ck)
        served_checkpoint(ck)
    except ServedPointerError:
        pointer = None
        where = "in place" if SERVED_POINTER.at(ck).exists() else "set aside"
        shown: Any = f"unusable, {where}"
    else:
        assert pointer is not None
        shown = [pointer.served.id, [e.id for e in pointer.history], bool(pointer.pinned)]
    verdicts = {
        c.name: candidates.read_verdict(c).to_json().get("outcome")
        for c in candidates.list_candidates(ck)
    }
    return {"pointer": shown, "verdicts": verdicts}


def _assert_nothing_lost(ck: Path) -> None:
    """Every checkpoint the pointer or a promoted verdict names exists, and no verdict
    disagrees with the pointer's journal."""
    pointer = repair.repairable_pointer(ck)
    if pointer is not None and pointer.served.id != "gone":
        for entry in [pointer.served, *pointer.history]:
            if "gone" not in str(entry.checkpoint):
                assert (ck / str(entry.checkpoint)).is_file(), entry
        assert transitions.disagreeing(ck, pointer) == {}
    for candidate in candidates.list_candidates(ck):
        verdict = candidates.read_verdict(candidate).to_json()
        if verdict.get("outcome") == "promoted":
            assert (candidate / verdict["checkpoint"]).is_file(), candidate


def _assert_announced(ck: Path) -> None:
    """The outbox holds one event per transition the pointer's journal holds and one per
    rejection a kept candidate's verdict says (each once, the kill's lost copy caught up
    by the next owner call, under the id made of what it announces), and no other
    rejection than a pruned candidate's: nothing announced that did not happen."""
    pointer = repair.repairable_pointer(ck)
    journal = [] if pointer is None else pointer.journal
    expected = {
        outbox_catch_up.journal_event_id(AGENT, e)
        for e in journal
        if e.kind not in outbox_catch_up.UNANNOUNCED
    }
    events = outbox.read_events(ck.parent)
    assert {e.id for e in events if e.kind != "reject"} == expected
    rejected = {}
    for candidate in candidates.list_candidates(ck):
        verdict = candidates.read_verdict(candidate).to_json()
        if verdict.get("outcome") == "rejected":
            rejected[outbox_catch_up.verdict_event_id(AGENT, candidate.name, verdict)] = (
                candidate.name
            )
    kept = [
        e
        for e in events
        if e.kind == "reject" and (ck / "candidates" / e.data["candidate_id"]).exists()
    ]
    assert sorted(e.id for e in kept) == sorted(rejected)  # else pruned since: it happened


def _matches(state: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> bool:
    """The state before or after; prune's removals are one transition per candidate, so
    each candidate is as before or as after there, the pointer whole."""
    if state in (before, after):
        return True
    if state["pointer"] not in (before["pointer"], after["pointer"]):
        return False
    names = set(before["verdicts"]) | set(after["verdicts"])
    gone = "gone"
    return all(
        state["verdicts"].get(n, gone)
        in (before["verdicts"].get(n, gone), after["verdicts"].get(n, gone))
        for n in names
    )


@pytest.mark.slow  # ~60 child processes (25 s of CPU)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_kill_after_any_write_leaves_the_state_before_or_after(
    tmp_path: Path, scenario: str
) -> None:
    """Killed after each of its durable steps, the transition leaves, once the daemon's
    next owner call ran, the state before or the state after: no model lost, no verdict
    disagreeing with the pointer, the watch's rollback and the gate's promotion counted once
    if they happened, never if they did not."""
    base = tmp_path / "base"
    _build(base, scenario)
    roles, ck = _copy(base, tmp_path / "clean")
    before = _state(ck)
    metrics = _counter(ck)
    clean = _child(roles, scenario, 0)
    assert clean.returncode == 0, clean.stderr[-3000:]
    steps, report = json.loads(clean.stdout.strip().splitlines()[-1]).values()
    counted_clean = _next_owner_call(ck, metrics)
    _assert_announced(ck)
    if scenario == "watch_rollback":  # the run's report as well: still one rollback
        metrics[0].observe(AGENT, _live_report(report), False)
        assert metrics[0].rollbacks.labels(agent=AGENT)._value.get() == 1.0
    after = _state(ck)
    assert steps >= 1 and after != before
    for kill_after in range(1, steps + 1):
        roles, ck = _copy(base, tmp_path / f"kill-{kill_after}")
        metrics = _counter(ck)
        killed = _child(roles, scenario, kill_after)
        assert killed.returncode == -signal.SIGKILL, (kill_after, killed.stderr[-3000:])
        counted = _next_owner_call(ck, metrics)
        _next_owner_call(ck, metrics)  # a second catch-up (the next run) adds no event
        state = _state(ck)
        assert _matches(state, before, after), (kill_after, state, before, after)
        _assert_nothing_lost(ck)
        _assert_announced(ck)
        completed = state["pointer"] == after["pointer"] != before["pointer"]
        assert counted == (counted_clean if completed else [0, 0]), (kill_after, state)
        shutil.rmtree(ck.parents[3])
    assert counted_clean == [scenario == "watch_rollback", scenario == "gate_promote"]
