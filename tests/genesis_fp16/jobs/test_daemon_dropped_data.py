"""Data where people put it (issue 60, part 6): the real daemon, with no data path
configured, trains se_darwin on its data folder, so a pool dropped beside the generated
sample is read; a malformed one is quarantined and named; a file that brings nothing new
(touched, or an identical copy) costs no training and leaves the served model served."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonFactory, DaemonProcess
from se_darwin_daemon import AGENT, write_pool

from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.data.synthetic import generate_pool

SAMPLE = 300  # GENESIS_FP16_SAMPLE_COUNT: the generated pool, kept small for the CPU
DROPPED = 600  # a new agent's records, enough for the gate to judge the candidate on
QUARANTINED = "genesis_fp16_records_quarantined_total"


def _state(daemon: DaemonProcess) -> Path:
    return daemon.state_dir / "agents" / AGENT


def _finished_after(
    daemon: DaemonProcess, mark: int, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """The first run that finished after the daemon's ``mark``-th log line and passes
    ``check``, waited for (the daemon keeps running every second meanwhile)."""

    def found() -> dict[str, Any] | None:
        later = daemon.logs()[mark:]
        done = [e for e in later if e.get("event") == "training run finished" and check(e)]
        return done[0] if done else None

    return daemon.wait_for(found, what, 300)


def _served_id(daemon: DaemonProcess) -> str:
    pointer = read_pointer(_state(daemon) / "checkpoints")
    assert pointer is not None
    return str(pointer.served.id)


def _launches(daemon: DaemonProcess, mark: int = 0) -> int:
    """Run processes the daemon started after its ``mark``-th log line."""
    later = daemon.logs()[mark:]
    # Started by exec, forked by the run worker, or served by its resident run process (the
    # default): each is a launch.
    starts = (
        "launching the run's",
        "the run worker forked the run's",
        "the run worker's resident run process",
    )
    return sum(str(e.get("event", "")).startswith(starts) for e in later)


def _last_run_reason(daemon: DaemonProcess) -> str:
    return str(json.loads((_state(daemon) / "last_run.json").read_text())["reason"])


def _said_at(daemon: DaemonProcess, mark: int, start: str) -> int | None:
    """The index of the first log line after ``mark`` whose event starts with ``start``."""
    for index, event in enumerate(daemon.logs()[mark:], start=mark):
        if str(event.get("event", "")).startswith(start):
            return index
    return None


def _quarantined_by_reads(daemon: DaemonProcess) -> int:
    """Records quarantined by the runs that read the data, by their log lines (a run the
    manifest found up to date read nothing: its count is the stored run's)."""
    done = daemon.events("training run finished")
    return sum(e.get("quarantined") or 0 for e in done if not _by_manifest(e))


def _by_manifest(event: dict[str, Any]) -> bool:
    return (event.get("data") or {}).get("checked_by") == "manifest"


def _settled(event: dict[str, Any]) -> bool:
    return _by_manifest(event) and not (event.get("data") or {}).get("files_hashed")


def _trained(event: dict[str, Any]) -> bool:
    return bool(event.get("steps"))


def _up_to_date(event: dict[str, Any]) -> bool:
    return event.get("outcome") == "up_to_date"


@pytest.mark.slow
def test_pools_dropped_beside_the_sample_are_trained_on_quarantined_or_cost_nothing(
    daemon_factory: DaemonFactory,
) -> None:
    """A pool dropped beside the sample is trained on (its records counted, none
    removed); a malformed file (and a file with a malformed record) is quarantined,
    named in one log line, counted on /metrics by each run that reads it, and costs no
    training; a touched sample costs no run process; an identical copy trains nothing:
    the served model stays served and each skip says "up to date: nothing new"."""
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
            "GENESIS_FP16_SAMPLE_COUNT": str(SAMPLE),
            "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "fp32",
            "GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_EPOCHS": "2",
            "GENESIS_FP16_SCHEDULE": "1",
        },
        fixtures=False,
    )
    first = _finished_after(daemon, 0, _trained, "the first model")
    sample = _state(daemon) / "data" / "trajectory_pools" / AGENT / "trajectory_pool.json"
    assert sample.is_file() and first["data"]["change"] == "first"

    # A new pool, written under a partial name and renamed into place beside the sample.
    mark = len(daemon.logs())
    write_pool(sample.with_name("dropped.json"), generate_pool(DROPPED, seed=5, agent="qa"))
    grown = _finished_after(daemon, mark, _trained, "a run on the dropped pool")
    assert grown["data"]["new"] > DROPPED // 2 and grown["data"]["removed"] == 0
    assert grown["data"]["records"] == first["data"]["records"] + grown["data"]["new"]
    served = _served_id(daemon)
    quiet = _finished_after(daemon, len(daemon.logs()), _up_to_date, "an up-to-date run")
    assert quiet["data"]["checked_by"] == "manifest"

    # A malformed file, and a file with one good and one malformed record.
    assert daemon.sample(QUARANTINED, agent=AGENT) == 0  # exported from start-up
    mark = len(daemon.logs())
    (sample.parent / "broken.json").write_text('{"trajectories": {"t1": ')
    key, known = next(iter(json.loads(sample.read_text())["trajectories"].items()))
    known = {**known, "trajectory_id": key}  # a record the served model saw: nothing new
    mixed = json.dumps(known) + '\n{"trajectory_id": "x", "success_score": 7}\n'
    (sample.parent / "mixed.jsonl").write_text(mixed)
    named = max(
        daemon.wait_for(lambda s=start: _said_at(daemon, mark, s), f"a line {start!r}", 120)
        for start in ("quarantined data file", "quarantined 1 record(s) of")
    )
    skipped = _finished_after(daemon, named, lambda e: True, "the run that read them")
    said = [str(e.get("event")) for e in daemon.logs()[mark:]]
    broken = [line for line in said if line.startswith("quarantined data file")]
    mixed_line = [line for line in said if line.startswith("quarantined 1 record(s) of")]
    assert len(broken) == 1 and "broken.json: truncated" in broken[0], said
    assert len(mixed_line) == 1 and "mixed.jsonl, the first at line 2" in mixed_line[0], said
    assert skipped["outcome"] == "up_to_date" and skipped["steps"] == 0
    assert skipped["quarantined"] == 2  # counted: the truncated file and the bad line
    assert daemon.sample(QUARANTINED, agent=AGENT) == 2  # later runs: the manifest's
    assert _last_run_reason(daemon).startswith("up to date: nothing new")
    kept = [json.loads(line) for f in (_state(daemon) / "quarantine").glob("*.jsonl")
            for line in f.read_text().splitlines()]  # fmt: skip
    assert {Path(k["source"]).name for k in kept} >= {"broken.json", "mixed.jsonl"}
    assert _served_id(daemon) == served

    # Touched: hashed again, the same bytes, no run process started. First a run that
    # hashed nothing: files written within 2 s of a scan are hashed again for a while.
    _finished_after(daemon, len(daemon.logs()), _settled, "a run that hashed nothing")
    mark = len(daemon.logs())
    os.utime(sample)  # now
    touched = _finished_after(
        daemon, mark, lambda e: e["data"].get("files_hashed", 0) >= 1, "a run after the touch"
    )
    assert touched["outcome"] == "up_to_date" and touched["data"]["checked_by"] == "manifest"
    assert _launches(daemon, mark) == 0
    assert _last_run_reason(daemon).startswith("up to date: nothing new")

    # An identical copy: read (a new file), its records the served model's: no step.
    mark = len(daemon.logs())
    shutil.copyfile(sample, sample.parent / ".copy.json.tmp")  # a partial write: ignored
    os.replace(sample.parent / ".copy.json.tmp", sample.parent / "copy.json")
    copied = _finished_after(
        daemon, mark, lambda e: e["data"].get("checked_by") != "manifest", "a run on the copy"
    )
    assert copied["outcome"] == "up_to_date" and copied["steps"] == 0
    assert copied["data"]["new"] == 0 and copied["data"]["removed"] == 0
    assert _served_id(daemon) == served
    # The copy's run read the folder again, and set the two records aside again.
    assert copied["quarantined"] == 2
    assert daemon.sample(QUARANTINED, agent=AGENT) == _quarantined_by_reads(daemon) >= 4
    assert daemon.sample("genesis_fp16_training_runs_total", agent=AGENT, outcome="failed") in (
        None,
        0.0,
    )
