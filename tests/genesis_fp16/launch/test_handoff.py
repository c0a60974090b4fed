"""The run file and the child's environment: what a run's child gets from its daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genesis_fp16.launch.handoff import child_env, read_run_file, write_run_file
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequest


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
    assert read_run_file(path) == (request, "DEBUG", True)
    path.write_text(json.dumps(request.to_json()))
    with pytest.raises(KeyError):
        read_run_file(path)
