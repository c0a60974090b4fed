"""The run file and the child's environment: what a run's child gets from its daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genesis_fp16.cli import UsageError
from genesis_fp16.commands.train import _read_request_file
from genesis_fp16.launch.handoff import child_env, read_run_file, write_run_file
from genesis_fp16.plugin_api import PrecisionRequest, TrainRequest
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    Pin,
    ServedEntry,
    ServedPointer,
)
from genesis_fp16_infrastructure.api import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.data.manifest import FileState, Manifest, Prefix
from genesis_fp16_infrastructure.training import GuardConfig

# A run file written by the daemon at ce3cee1f (its own codec, before the request was a
# record of the library's one codec), every field of the request away from its default.
MAIN_RUN_FILE = Path(__file__).with_name("run_file_ce3cee1f.json")


def test_the_child_environment_holds_no_setting_and_no_working_directory() -> None:
    """GENESIS_FP16_*/ENABLE_FP16_* are removed, PYTHONSAFEPATH is set, and an empty
    PYTHONPATH entry (the working directory) is dropped while the others stay."""
    env = child_env(
        {
            "GENESIS_FP16_STEPS_PER_RUN": "2",
            "enable_fp16_trainig": "false",
            "PYTHONPATH": "/opt/plugins::/srv/more:",
            "CUDA_VISIBLE_DEVICES": "0",
        }
    )
    assert env == {
        "PYTHONPATH": "/opt/plugins:/srv/more",
        "CUDA_VISIBLE_DEVICES": "0",
        "PYTHONSAFEPATH": "1",
    }
    assert "PYTHONPATH" not in child_env({"PYTHONPATH": ":"})


def test_the_run_file_round_trips_and_refuses_a_bare_request(tmp_path: Path) -> None:
    """write_run_file/read_run_file keep the request and log level; a file without the
    log level (a bare request) is refused, not read with a guessed one."""
    request = TrainRequest(
        agent="a",
        precision="fp16",
        precision_reason="flag",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "c",
        steps=3,
    )
    path = tmp_path / "run.json"
    write_run_file(path, request, "DEBUG")
    assert read_run_file(path) == (request, "DEBUG")
    path.write_text(json.dumps(request.to_json()))
    with pytest.raises(KeyError):
        read_run_file(path)


def _snapshot() -> AgentSnapshot:
    """A snapshot with everything a child reads: a pinned pointer, a scan (one grown file
    with its prefix) and an up-to-date verdict."""
    pointer = ServedPointer(
        ServedEntry(id="c2", checkpoint="candidates/c2/ckpt-0000000008.pt"),
        [ServedEntry(id="c1", checkpoint="candidates/c1/ckpt-0000000008.pt")],
        Pin(by="operator"),
    )
    prefix = Prefix(100, "cd" * 16, 4, "0a")
    grown = FileState("pool/a.jsonl", 120, 7, "ab" * 16, ctime_ns=11, inode=12, prefix=prefix)
    scan = Manifest((grown, FileState("pool/b.json", 9, 8, "ef" * 16, 13, 14)), 123)
    return AgentSnapshot(None, pointer, None, DataCheck(scan, {"outcome": "up_to_date"}))


def test_the_run_file_carries_the_plans_snapshot(tmp_path: Path) -> None:
    """The pointer, the scan (with a grown file's prefix, which a saved manifest drops,
    and each file's ctime and inode, which the record cache checks) and the verdict reach
    the child as the plan took them; the plan's state stays."""
    snapshot = _snapshot()
    request = TrainRequest(
        agent="a",
        precision_reason="flag",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "c",
        snapshot=snapshot,
    )
    path = tmp_path / "run.json"
    write_run_file(path, request, "INFO")
    handed = read_run_file(path)[0].snapshot
    assert handed == snapshot
    assert handed is not None and handed.data is not None and handed.data.scan is not None
    assert handed.data.scan.files[0].prefix == snapshot.data.scan.files[0].prefix  # type: ignore[union-attr]


def test_a_run_file_an_older_daemon_wrote_reads_and_writes_the_same(tmp_path: Path) -> None:
    """The run file written at ce3cee1f reads back as the request it held, and writing that
    request again gives the same bytes: the codec changed, the file did not."""
    snapshot = AgentSnapshot(None, _snapshot().pointer, "a pointer error", _snapshot().data)
    request = TrainRequest(
        precision=PrecisionRequest(
            "bf16", basis="a preset", mode="measure", excluded={"fp16": "probe red"},
            note="a note", floor="fp32", floor_reason="remembered",
            cache=Path("state/cal.json"), budget_s=2.5,
        ),
        device="cuda:1", steps=7, epochs=3, seed=11, resume=False, checkpoint_steps=9,
        checkpoint_seconds=2.5, log_interval=4, fsdp=True, initial_loss_scale=2048.0,
        guard=GuardConfig(
            ladder=("fp16", "fp32"), check_interval=5, nonfinite_limit=None,
            overflow_rate_limit=0.25,
        ),
        cuda_graph="off", compile="on", agent="se_darwin", precision_reason="flag",
        state_dir=Path("state"), checkpoint_dir=Path("state/ck"), data_path=Path("pool"),
        quarantine_path=Path("quarantine"), golden_data_path=Path("golden.json"),
        options={"hidden": 64, "layers": [1, 2], "nested": {"a": None, "b": 1.5}},
        memory_limit_bytes=1 << 30, forced=True, snapshot=snapshot, range_stats=False,
    )  # fmt: skip
    assert read_run_file(MAIN_RUN_FILE) == (request, "DEBUG")
    path = tmp_path / "run.json"
    write_run_file(path, request, "DEBUG")
    assert path.read_bytes() == MAIN_RUN_FILE.read_bytes()


@pytest.mark.parametrize(
    "damage",
    [
        5,
        {"version": 2},
        {"version": 1, "pointer": [], "pointer_error": None, "data": None},
        {"version": 1, "pointer": {"served": {}, "history": [3]}, "pointer_error": None},
        {"version": 1, "pointer": None, "pointer_error": None, "data": {"scan": 1}},
        {"version": 1, "pointer": None, "pointer_error": None, "data": {"scan": {"files": 1}}},
        {"version": 1, "pointer": None, "pointer_error": None, "data": []},
    ],
)
def test_a_damaged_snapshot_in_the_run_file_is_one_line(tmp_path: Path, damage: object) -> None:
    """A run file whose snapshot is not one the daemon writes: the child refuses it in one
    line naming the file (train's --request reader), never a traceback."""
    request = TrainRequest(
        agent="a", precision_reason="flag", state_dir=tmp_path, checkpoint_dir=tmp_path
    )
    path = tmp_path / "run.json"
    write_run_file(path, request, "INFO")
    run = json.loads(path.read_text())
    run["request"]["snapshot"] = damage
    path.write_text(json.dumps(run))
    with pytest.raises(UsageError) as refused:
        _read_request_file(path)
    assert str(refused.value).startswith(f"--request {path}: not a readable run request")
    assert "\n" not in str(refused.value)
