"""benchmarks/daemon_judging_cost.py's run wait, shared with run_anatomy.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "daemon_judging_cost.py"
WHEN = "2026-11-29T00:00:00+00:00"


def _log(path: Path, *events: dict[str, object], tail: str = "") -> Path:
    lines = [json.dumps({"timestamp": WHEN, "agent": "se_darwin", **e}) for e in events]
    path.write_text("\n".join(lines) + ("\n" + tail if tail else "\n"))
    return path


def test_a_failed_run_ends_the_wait_with_its_error(tmp_path: Path) -> None:
    """A failed run's line stops the wait at once, naming its error, instead of a wait
    of 600 s for a finished line that will not come."""
    ended = load_script(SCRIPT)._ended
    log = _log(tmp_path / "daemon.log", {"event": "training run started"})
    assert not ended(log, "se_darwin", 0)
    failed = {"event": "training run failed", "error": "the run's process exited with code 1"}
    log = _log(tmp_path / "daemon.log", {"event": "training run started"}, failed)
    with pytest.raises(SystemExit, match="se_darwin's run failed: the run's process exited"):
        ended(log, "se_darwin", 0)


def test_a_finished_run_ends_the_wait_and_a_half_written_line_waits(tmp_path: Path) -> None:
    """One finished line: more than 0 runs ended, not more than 1; a failed line still
    being written is no failure yet."""
    ended = load_script(SCRIPT)._ended
    finished = {"event": "training run finished", "phases": {"train": 1.0}}
    log = _log(tmp_path / "daemon.log", finished, tail='{"event": "training run failed", "er')
    assert ended(log, "se_darwin", 0) and not ended(log, "se_darwin", 1)
