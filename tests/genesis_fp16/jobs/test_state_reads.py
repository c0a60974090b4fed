"""One se_darwin job reads its state folder once, in its plan: ``served.json`` at most 3
times (the plan's read, and the locked read-and-write-back of a promotion and of the
history's pruning), ``data_manifest.json`` once, each changed data file hashed once; a
run's child process reads none of them (it takes the plan's snapshot from its run file).

Counted as test_checkpoint_reads.py counts checkpoint reads, on the real job: every
``open`` for reading (Python's audit hook, whoever opens: ``Path.read_text``, ``open``,
``os.open``) of a file of that name, and every hash of a data file
(``data.manifest._digest_and_prefix``, the one place a scan hashes).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import clear_daemon_env
from in_process import train_in_process
from prometheus_client import CollectorRegistry

from genesis_fp16.config.plugins import load_plugin
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.jobs.run_request import plan_request
from genesis_fp16.launch.launcher import train_in_child
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16_infrastructure.data import manifest
from genesis_fp16_infrastructure.folder import AgentFolder

AGENT = "se_darwin"
STATE_FILES = ("served.json", "data_manifest.json")

# The audit hook of this process (a hook cannot be removed): it counts while a _Reads is on.
_ACTIVE: list[Counter[str]] = []


def _reading(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):  # open(), io.open(), Path.read_text()
        return "r" in mode and "+" not in mode
    return isinstance(flags, int) and flags & os.O_ACCMODE == os.O_RDONLY  # os.open()


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not _ACTIVE or not isinstance(args[0], str | bytes | os.PathLike):
        return
    name = os.path.basename(os.fsdecode(args[0]))
    if name in STATE_FILES and _reading(args[1], args[2]):
        _ACTIVE[-1][name] += 1


sys.addaudithook(_hook)


@contextmanager
def _counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """State-file reads by name, and hashes as ``hashed:<data file>``, inside the block."""
    counts: Counter[str] = Counter()
    digest = manifest._digest_and_prefix

    def counted(file: Path, prefix_size: int) -> Any:
        counts[f"hashed:{file}"] += 1
        return digest(file, prefix_size)

    monkeypatch.setattr(manifest, "_digest_and_prefix", counted)
    _ACTIVE.append(counts)
    try:
        yield counts
    finally:
        _ACTIVE.remove(counts)
        monkeypatch.setattr(manifest, "_digest_and_prefix", digest)


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[JobContext, Any, Path]:
    """A daemon's job context (its run on a thread: the daemon's reads and the run's in
    one count) after a first job trained and served a model on a 600-record pool."""
    clear_daemon_env(monkeypatch)
    train_in_process(monkeypatch)
    loaded = load_plugin(AGENT)
    data = loaded.plugin.generate_sample_data(tmp_path / "data", 600, 0)
    settings = Settings(
        state_dir=tmp_path / "state",
        steps_per_run=8,
        auto_precision="rule",
        # fp32: the same gate verdict on every CPU (bf16 where the CPU has it would do too)
        agents={AGENT: {"data_path": str(data), "precision": "fp32"}},  # type: ignore[dict-item]
    )
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    ctx = JobContext(settings, metrics, DeviceSlots(1), threading.Event())
    run_agent_job(ctx, AGENT, *loaded)
    return ctx, loaded, data


def _add_records(loaded: Any, data: Path, tmp_path: Path) -> None:
    """100 new records in the pool file: changed data, which trains a candidate."""
    pool = json.loads(data.read_text())
    more = json.loads(loaded.plugin.generate_sample_data(tmp_path / "more", 100, 1).read_text())
    for key, record in more["trajectories"].items():
        pool["trajectories"][f"new-{key}"] = {**record, "trajectory_id": f"new-{key}"}
    data.write_text(json.dumps(pool))


def _outcomes(ctx: JobContext) -> dict[str, float | None]:
    return {
        outcome: ctx.metrics.registry.get_sample_value(
            "genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": outcome}
        )
        for outcome in ("success", "up_to_date", "failed")
    }


def test_a_job_on_changed_data_reads_each_state_file_once_in_its_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New records: the job plans, trains, promotes and prunes, reading served.json 3
    times (it read 14 before the snapshot), the manifest once (3) and hashing the changed
    pool file once (3)."""
    ctx, loaded, data = _job(tmp_path, monkeypatch)
    _add_records(loaded, data, tmp_path)
    with _counting(monkeypatch) as counts:
        run_agent_job(ctx, AGENT, *loaded)
    assert _outcomes(ctx) == {"success": 2, "up_to_date": None, "failed": None}
    folder = AgentFolder(tmp_path / "state", AGENT).checkpoint_dir
    pointer = json.loads((folder / "served.json").read_text())
    assert pointer["served"]["how"] == "gate"  # promoted: the pointer was written back
    assert counts["served.json"] <= 3, counts
    assert counts["data_manifest.json"] == 1, counts
    assert counts[f"hashed:{data}"] == 1, counts


def test_an_up_to_date_job_reads_each_state_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing new: the plan's data check answers the job (no run starts), and served.json
    is read by the plan and the history's pruning alone, the manifest once."""
    ctx, loaded, data = _job(tmp_path, monkeypatch)
    with _counting(monkeypatch) as counts:
        run_agent_job(ctx, AGENT, *loaded)
    assert _outcomes(ctx) == {"success": 1, "up_to_date": 1, "failed": None}
    assert counts["served.json"] <= 2, counts
    assert counts["data_manifest.json"] == 1, counts
    assert counts[f"hashed:{data}"] <= 1, counts  # 1 when the pool was written < 2 s ago


# Installed in the child through PYTHONPATH (the run's child keeps it): counts as _hook does
# and writes the counts to $STATE_READS_OUT when the child exits.
_CHILD_COUNTER = textwrap.dedent(
    """
    import atexit, json, os, sys
    from collections import Counter

    _out, _counts = os.environ.get("STATE_READS_OUT"), Counter()

    def _hook(event, args):
        if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        name, mode, flags = os.path.basename(os.fsdecode(args[0])), args[1], args[2]
        reading = ("r" in mode and "+" not in mode) if isinstance(mode, str) else (
            isinstance(flags, int) and flags & os.O_ACCMODE == os.O_RDONLY)
        if name in ("served.json", "data_manifest.json") and reading:
            _counts[name] += 1

    if _out:
        from genesis_fp16_infrastructure.data import manifest
        _digest = manifest._digest_and_prefix

        def _counted(file, prefix_size):
            _counts["hashed:" + str(file)] += 1
            return _digest(file, prefix_size)

        manifest._digest_and_prefix = _counted
        sys.addaudithook(_hook)
        atexit.register(lambda: open(_out, "w").write(json.dumps(_counts)))
    """
)


def test_a_runs_child_reads_no_state_file_and_hashes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run in a child process (the daemon's default isolation) takes the plan's pointer,
    scan and verdict from its run file: it opens served.json only to promote (the locked
    read-and-write-back), never the manifest, and hashes no data file."""
    ctx, loaded, data = _job(tmp_path, monkeypatch)
    _add_records(loaded, data, tmp_path)
    with _counting(monkeypatch) as planned:
        plan = plan_request(ctx.settings, AGENT, *loaded, "cpu")
    assert planned["served.json"] == 1 and planned["data_manifest.json"] == 1, planned
    assert planned[f"hashed:{data}"] == 1, planned
    data_check = plan.snapshot.data if plan.snapshot is not None else None
    assert data_check is not None and data_check.up_to_date is None
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_CHILD_COUNTER)
    out = tmp_path / "child_reads.json"
    env = {**os.environ, "PYTHONPATH": str(hooks), "STATE_READS_OUT": str(out)}
    result = train_in_child(plan, timeout=300, env=env)
    assert result.outcome == "success" and result.gate is not None
    promoted = result.gate.outcome == "promoted"
    counts = json.loads(out.read_text())
    assert counts.get("served.json", 0) == int(promoted), counts  # promoted: under the lock
    assert counts.get("data_manifest.json", 0) == 0, counts
    assert not [key for key in counts if key.startswith("hashed:")], counts
