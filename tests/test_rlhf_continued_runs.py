"""benchmarks/rlhf_continued_runs.py --daemon: rlhf_ppo's continued runs in a real daemon."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "rlhf_continued_runs.py"


def _script() -> ModuleType:
    return load_script(SCRIPT)


def _record(outcome: str, candidate: float, served: float | None, reason: str) -> dict[str, Any]:
    gate: dict[str, Any] = {
        "outcome": outcome,
        "reason": reason,
        "candidate": {"losses": {"loss": candidate}},
    }
    gate["served"] = None if served is None else {"losses": {"loss": served}}
    return {"gate": gate, "steps": 240, "wall_seconds": 1.5}


def test_the_served_reward_is_the_kept_models_and_the_interval_the_gates() -> None:
    """Promoted: the candidate is served, its reward 1 - its loss; rejected: the served
    model stays, its reward 1 - its loss; the interval is read from the gate's reason,
    and a first model, compared with nothing, has none."""
    script = _script()
    reason = "current: loss 0.2 vs served 0.3, worse by -0.12 to -0.08 (95%), within the margin"
    promoted = script.daemon_row(0, 1, _record("promoted", 0.2, 0.3, reason))
    assert promoted["served_reward"] == pytest.approx(0.8)
    assert promoted["difference"] == "-0.12 to -0.08 (95%)"
    rejected = script.daemon_row(0, 2, _record("rejected", 0.4, 0.3, reason))
    assert rejected["served_reward"] == pytest.approx(0.7) and rejected["verdict"] == "rejected"
    first = script.daemon_row(0, 0, _record("promoted", 0.5, None, "the first model"))
    assert first["difference"] is None and first["served_loss"] is None
    assert first["served_reward"] == pytest.approx(0.5)


@pytest.mark.slow
def test_a_daemon_serves_a_first_model_then_continues_it(tmp_path: Path) -> None:
    """A real daemon, two runs of 8 steps on two new 100-prompt task files: the first
    model promoted, the second run judged against it with an interval, the table written."""
    out = tmp_path / "table.md"
    argv = ["--daemon", "--seeds", "0", "--count", "100", "--runs", "2", "--steps", "8"]
    _script().main([*argv, "--port", "19579", "--out", str(out)])
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 0 |")]
    assert len(rows) == 2
    first, second = (row.split(" | ") for row in rows)
    assert first[2] == "promoted" and first[5] == "—" and first[6] == "—"
    assert second[3] == "8" and second[5] != "—" and "(95%)" in second[6]
    assert second[2] in {"promoted", "inconclusive", "rejected"}


def _run(run: int, verdict: str, low: float, high: float) -> dict[str, Any]:
    return {"run": run, "verdict": verdict, "difference": f"{low:+g} to {high:+g} (95%)"}


def test_the_reward_change_adds_the_promoted_runs_after_the_first() -> None:
    """Runs 2 on, promoted: their paired loss differences' means add (the reward's with
    the other sign) and their variances add, the gate's bounds being mean +- 1.645 s.e.;
    run 1 and the runs that kept the served model add nothing."""
    script = _script()
    se = 0.01 / script.Z_95  # a bound 0.01 either side of the mean
    rows = [
        {"run": 0, "verdict": "promoted", "difference": None},
        _run(1, "promoted", -0.5, -0.4),
        _run(2, "promoted", -0.03, -0.01),
        _run(3, "inconclusive", -0.2, 0.2),
        _run(4, "promoted", 0.0, 0.02),
    ]
    change, low, high = script.reward_change(rows)
    assert change == pytest.approx(0.02 - 0.01)
    half = 1.959964 * (2 * se**2) ** 0.5
    assert (low, high) == (pytest.approx(change - half), pytest.approx(change + half))


def test_a_summary_reads_back_the_table_the_daemon_mode_writes() -> None:
    """The written table read back: counts of each verdict over runs 1 on, the served
    reward after run 1 and after the last."""
    script = _script()
    record = _record("promoted", 0.5, None, "the first model")
    rows = [script.daemon_row(3, 0, record)]
    reason = "worse by -0.03 to -0.01 (95%)"
    rows.append(script.daemon_row(3, 1, _record("promoted", 0.3, 0.5, reason)))
    rows.append(
        script.daemon_row(3, 2, _record("rejected", 0.4, 0.3, "worse by +0.08 to +0.12 (95%)"))
    )
    line = script.summary(script.read_table(script._daemon_table(rows, 2000)), 2000)
    assert line.startswith("| 2,000 | 3 | 1 | 0 | 1 | 0.700000 | 0.700000 | +0.000000")
