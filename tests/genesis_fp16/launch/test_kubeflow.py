"""Kubeflow Trainer: the PET_* hand-off to torchrun, and progress reports to the status URL."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from genesis_fp16.launch import kubeflow
from genesis_fp16.launch.handoff import child_env
from genesis_fp16.launch.kubeflow import (
    PetLayout,
    PetLayoutError,
    StatusReporter,
    hand_off_to_torchrun,
    report_progress,
    trainer_status,
)
from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_infrastructure.training import TrainingSummary
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint

# The dev extra has it; a bare GPU image does not, and a failed import stops pytest.
pytest.importorskip("kubeflow_trainer_api")
from kubeflow_trainer_api.models import TrainerV1alpha1UpdateTrainJobStatusRequest

REPO = Path(__file__).resolve().parents[3]
PET = {
    "PET_NNODES": "2",
    "PET_NPROC_PER_NODE": "1",
    "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "genesis-fp16-train-node-0-0.genesis-fp16-train",
    "PET_MASTER_PORT": "29400",
}


def _summary(step: int, loss: float = 0.5) -> TrainingSummary:
    return TrainingSummary(
        precision="bf16",
        step=step,
        optimizer_steps=step,
        skipped_steps=0,
        overflow_rate=0.0,
        overflow_rate_window=0.0,
        loss_scale=1.0,
        grad_norm=float("nan"),
        train_loss=loss,
        nonfinite_losses=0,
        samples=step * 8,
        samples_per_second=100.0,
        wall_seconds=1.0,
        unstable=False,
    )


def test_pet_layout_becomes_torchruns_flags() -> None:
    """Each PET_* variable becomes the torchrun flag of the same name, before -m genesis_fp16."""
    layout = PetLayout.from_environ(PET)
    assert layout is not None
    command = layout.torchrun_command(["train", "se_darwin", "--resume"], "/venv/bin/python")
    assert command == [
        "/venv/bin/python",
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc-per-node=1",
        "--node-rank=1",
        "--master-addr=genesis-fp16-train-node-0-0.genesis-fp16-train",
        "--master-port=29400",
        "-m",
        "genesis_fp16",
        "train",
        "se_darwin",
        "--resume",
    ]


def test_no_layout_outside_a_pet_pod_or_inside_a_rank() -> None:
    """Without PET_NNODES, or once torchrun has set RANK, nothing is handed off."""
    assert PetLayout.from_environ({}) is None
    assert PetLayout.from_environ({**PET, "RANK": "0"}) is None
    calls: list[list[str]] = []
    hand_off_to_torchrun({"RANK": "0", **PET}, ["train", "x"], "py", lambda p, a: calls.append(a))
    assert calls == []
    hand_off_to_torchrun(PET, ["train", "x"], "py", lambda p, a: calls.append(a))
    assert calls and calls[0][-2:] == ["train", "x"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"PET_MASTER_ADDR": ""}, "PET_MASTER_ADDR is not"),
        ({"PET_NODE_RANK": "2"}, "PET_NODE_RANK='2': must be an integer between 0 and 1"),
        ({"PET_NNODES": "two"}, "PET_NNODES='two'"),
        ({"PET_MASTER_PORT": "70000"}, "PET_MASTER_PORT='70000'"),
        ({"PET_NPROC_PER_NODE": "0"}, "auto, cpu, gpu"),
    ],
)
def test_a_broken_layout_is_refused_by_name(change: dict[str, str], message: str) -> None:
    """An incomplete or impossible PET_* layout fails at start, naming the variable."""
    with pytest.raises(PetLayoutError, match=message):
        PetLayout.from_environ({**PET, **change})


def test_auto_processes_per_node_is_passed_through() -> None:
    """The runtime's default numProcPerNode (auto) reaches torchrun as is."""
    layout = PetLayout.from_environ({**PET, "PET_NPROC_PER_NODE": "auto"})
    assert layout is not None and layout.nproc_per_node == "auto"


def test_launcher_child_never_sees_the_pet_layout() -> None:
    """The daemon's standalone torchrun drops PET_* (they would become multi-node flags)."""
    assert child_env({**PET, "PATH": "/bin"}) == {"PATH": "/bin", "PYTHONSAFEPATH": "1"}


def _validated(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` read by the trainer API's own request model and written back."""
    model = TrainerV1alpha1UpdateTrainJobStatusRequest.from_dict(body)
    assert model is not None
    back = model.to_dict()
    # The model parses the timestamp (a string that is no date-time would fail here).
    stamp = back["trainerStatus"]["lastUpdatedTime"]
    assert stamp.tzinfo is not None
    back["trainerStatus"]["lastUpdatedTime"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    return back


def test_status_body_is_a_valid_update_request_of_the_trainer_api() -> None:
    """Percent, ETA and metrics survive the trainer API's model unchanged (no unknown key)."""
    body = trainer_status(_summary(50), done=50, total=200, elapsed=10.0)
    assert _validated(body) == body
    status = body["trainerStatus"]
    assert status["progressPercentage"] == 25 and status["estimatedRemainingSeconds"] == 30
    metrics = {m["name"]: m["value"] for m in status["metrics"]}
    assert metrics["train_loss"] == "0.5" and metrics["precision"] == "bf16"
    assert "grad_norm" not in metrics  # NaN is left out, not sent as a string


def test_status_check_catches_a_misspelt_field() -> None:
    """A body with a misspelt key does not survive the model, so the check above can fail."""
    body = trainer_status(_summary(50), done=50, total=200, elapsed=10.0)
    body["trainerStatus"]["progressPercent"] = body["trainerStatus"].pop("progressPercentage")
    assert _validated(body) != body


def test_unknown_budget_reports_metrics_without_percent_and_finish_is_100() -> None:
    """The agent's own budget has no percent or ETA until the end, which reports 100% and 0 s."""
    running = trainer_status(_summary(5), done=5, total=None, elapsed=1.0)["trainerStatus"]
    assert "progressPercentage" not in running and "estimatedRemainingSeconds" not in running
    done = trainer_status(_summary(9), done=0, total=None, elapsed=1.0, finished=True)
    assert done["trainerStatus"]["progressPercentage"] == 100
    assert done["trainerStatus"]["estimatedRemainingSeconds"] == 0


class _StatusServer(http.server.ThreadingHTTPServer):
    bodies: list[dict[str, Any]]
    authorizations: list[str | None]
    status_code: int


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _StatusServer

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.server.bodies.append(json.loads(self.rfile.read(length)))
        self.server.authorizations.append(self.headers.get("Authorization"))
        self.send_response(self.server.status_code)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def status_server() -> Iterator[_StatusServer]:
    """A local HTTP endpoint that records what the trainer's status server would receive."""
    server = _StatusServer(("127.0.0.1", 0), _Handler)
    server.bodies, server.authorizations, server.status_code = [], [], 200
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _url(server: _StatusServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/apis/trainer/status"


def _request(tmp_path: Path, on_log: Any = None) -> TrainRequest:
    return TrainRequest(
        agent="se_darwin",
        precision="bf16",
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "ckpt",
        steps=100,
        log_interval=10,
        on_log=on_log,
    )


def test_reports_reach_the_endpoint_throttled_with_the_rotating_token(
    status_server: _StatusServer, tmp_path: Path
) -> None:
    """Rank 0's summaries are posted with the token file's bearer; the end reports 100%."""
    token = tmp_path / "token"
    token.write_text("first-token\n")
    seen: list[TrainingSummary] = []
    environ = {kubeflow.STATUS_URL: _url(status_server), kubeflow.STATUS_TOKEN: str(token)}
    with report_progress(environ, _request(tmp_path, seen.append), True, lambda: False) as req:
        assert req.on_log is not None
        req.on_log(_summary(10))
        time.sleep(0.5)  # posted at once: the first report waits for nothing
        for step in range(20, 60, 10):  # within the 5 s interval: each replaces the last
            req.on_log(_summary(step))
        token.write_text("second-token\n")
    assert [s.step for s in seen] == [10, 20, 30, 40, 50]
    bodies = status_server.bodies
    assert len(bodies) == 2, bodies  # the first, then the final (which replaced step 50's)
    assert bodies[0]["trainerStatus"]["progressPercentage"] == 10
    assert bodies[-1]["trainerStatus"]["progressPercentage"] == 100
    assert status_server.authorizations[0] == "Bearer first-token"
    assert status_server.authorizations[-1] == "Bearer second-token"
    assert all(_validated(body) == body for body in bodies)


def test_a_failing_endpoint_never_fails_training(
    status_server: _StatusServer, tmp_path: Path
) -> None:
    """HTTP 500 and a closed port are logged and counted; training callbacks still run."""
    status_server.status_code = 500
    seen: list[TrainingSummary] = []
    reporter = StatusReporter(_url(status_server), None, None, interval=0.0)
    reporter.submit(trainer_status(_summary(1), 1, 10, 1.0))
    reporter.close()
    assert (reporter.sent, reporter.failed) == (0, 1)
    environ = {kubeflow.STATUS_URL: f"http://127.0.0.1:{_free_port()}/"}
    with report_progress(environ, _request(tmp_path, seen.append), True, lambda: False) as req:
        assert req.on_log is not None
        req.on_log(_summary(10))
    assert [s.step for s in seen] == [10]


def test_other_ranks_and_unset_url_leave_the_request_alone(tmp_path: Path) -> None:
    """Only rank 0 reports, and only when KUBEFLOW_TRAINER_STATUS_URL is set."""
    request = _request(tmp_path)
    with report_progress({}, request, True, lambda: False) as same:
        assert same is request
    environ = {kubeflow.STATUS_URL: "http://127.0.0.1:9/"}
    with report_progress(environ, request, False, lambda: False) as same:
        assert same is request


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_nodes_driven_only_by_pet_variables(
    status_server: _StatusServer, tmp_path: Path
) -> None:
    """Two `genesis-fp16 train` processes, PET_* only: one gloo run of world size 2, reported."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GENESIS_FP16_", "PET_", "KUBEFLOW_"))
        and k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
    }
    env.update(
        GENESIS_FP16_STATE_DIR=str(tmp_path / "state"),
        GENESIS_FP16_LOG_INTERVAL="2",
        GENESIS_FP16_SAMPLE_COUNT="400",
        OMP_NUM_THREADS="1",
        PET_NNODES="2",
        PET_NPROC_PER_NODE="1",
        PET_MASTER_ADDR="127.0.0.1",
        PET_MASTER_PORT=str(_free_port()),
        KUBEFLOW_TRAINER_STATUS_URL=_url(status_server),
    )
    checkpoints = tmp_path / "shared" / "checkpoints"
    command = [sys.executable, "-m", "genesis_fp16", "train", "se_darwin", "--steps", "6"]
    command += ["--precision", "fp32", "--device", "cpu", "--json"]
    command += ["--checkpoint-dir", str(checkpoints)]
    nodes = [
        subprocess.Popen(
            command,
            cwd=REPO,
            env={**env, "PET_NODE_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=240) for node in nodes]
    for node, (_, err) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, err[-3000:]
    result = json.loads(outputs[0][0].strip().splitlines()[-1])
    assert result["steps"] == 6
    assert outputs[1][0].strip() == ""  # only global rank 0 prints
    state = load_checkpoint(Path(result["checkpoint"]))  # in its candidate folder (issue 35)
    assert len(state[keys.RNG_PER_RANK]) == 2  # one process group of two ranks
    assert status_server.bodies, "rank 0 reported no progress"
    assert status_server.bodies[-1]["trainerStatus"]["progressPercentage"] == 100
