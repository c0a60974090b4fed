"""`genesis-fp16 train` under a real torchrun, and the daemon's launcher that supervises it."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from genesis_fp16.launch import launcher
from genesis_fp16.launch.devices import LayoutError, check_layout, cuda_device_count
from genesis_fp16.launch.distributed import TorchrunEnv, rank_device
from genesis_fp16.launch.launcher import LaunchError, child_command, relay_stderr, train_in_child
from genesis_fp16.plugin_api import PrecisionRequest, TrainRequest, TrainRequestError
from genesis_fp16_infrastructure.training import TrainingSummary
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager, load_checkpoint

REPO = Path(__file__).resolve().parents[3]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.pop("ENABLE_FP16_TRAINING", None)
    env.update(
        GENESIS_FP16_STATE_DIR=str(tmp_path / "state"),
        GENESIS_FP16_LOG_INTERVAL="2",
        GENESIS_FP16_SAMPLE_COUNT="400",
        OMP_NUM_THREADS="1",
    )
    return env


def _stub_request(tmp_path: Path) -> TrainRequest:
    """A request for a launcher test whose command is replaced by a stand-in child."""
    return TrainRequest(
        agent="stub",
        precision="fp32",
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "ckpt",
    )


def _ranks_alive(marker: str) -> list[int]:
    """Pids of live processes whose command line mentions ``marker``."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            alive.append(int(entry.name))
    return alive


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigterm_to_torchrun_stops_every_rank_with_a_checkpoint(tmp_path: Path) -> None:
    """SIGTERM to torchrun: both ranks stop at a step boundary and the newest checkpoint loads."""
    checkpoints = tmp_path / "ckpt"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", "-m", "genesis_fp16", "train", "se_darwin"]
    command += ["--steps", "1000000", "--precision", "fp32", "--json", "--json-progress"]
    # gloo ranks on any host: auto would be cuda on a GPU host, and 2 ranks on 1 GPU are
    # refused before launch (the daemon's NPROC=2 tests pin cpu the same way).
    command += ["--device", "cpu", "--checkpoint-dir", str(checkpoints)]
    child = subprocess.Popen(
        command, cwd=REPO, env=_env(tmp_path), stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    decided = json.loads(child.stdout.readline())  # rank 0's precision, before any step
    assert decided == {"precision": "fp32"}
    first = json.loads(child.stdout.readline())  # rank 0's first progress line
    assert first["progress"]["step"] >= 2
    child.send_signal(signal.SIGTERM)
    rest = child.stdout.read().splitlines()
    code = child.wait(timeout=60)
    assert code == 0 or code == 1  # torchrun itself reports the signal as a failure (1)
    assert not _ranks_alive(str(checkpoints))
    result = json.loads(rest[-1])
    assert result["stopped_early"] is True
    assert 2 <= result["steps"] < 1000000
    # se_darwin's ranks share one candidate folder (issue 35): its newest is the result's.
    newest = CheckpointManager(Path(result["checkpoint"]).parent).checkpoints()[-1]
    assert str(newest) == result["checkpoint"]
    assert newest.parent.parent == checkpoints / "candidates"
    state = load_checkpoint(newest)  # torch.load(weights_only=True)
    assert state[keys.STEP] == result["steps"]
    assert len(state[keys.RNG_PER_RANK]) == 2


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_launcher_reports_progress_and_stops_on_request(tmp_path: Path) -> None:
    """The daemon's launcher passes rank 0's summaries on and stops the job cleanly on request."""
    from genesis_fp16_agents.se_darwin import plugin

    summaries: list[TrainingSummary] = []
    request = TrainRequest(
        agent="se_darwin",
        precision="bf16",
        precision_reason="test",
        state_dir=tmp_path / "state",
        checkpoint_dir=tmp_path / "ckpt",
        # The request crosses to the ranks whole: its data is named, not generated there.
        data_path=plugin.generate_sample_data(tmp_path / "data", 400, 0),
        log_interval=2,
        steps=1000000,
        resume=True,
        on_log=summaries.append,
        should_stop=lambda: len(summaries) >= 2,
    )
    env = _env(tmp_path)
    env["PYTHONPATH"] = str(REPO)
    result = train_in_child(request, nproc=2, timeout=100, env=env)
    assert result.stopped_early and result.precision_used == "bf16"
    assert [s.step for s in summaries[:2]] == [2, 4]
    assert result.checkpoint is not None and result.checkpoint.exists()
    assert result.steps >= 4 and result.eval["loss"] > 0


# Ranks that never stop: the launcher's last resort has to kill them itself.
STUBBORN_RANK = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("rank up", flush=True)
time.sleep(600)
"""


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_launcher_kills_torchrun_and_its_ranks_when_they_ignore_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill_after: torchrun and both ranks (each in a session of its own) die; no hang."""
    script = tmp_path / "stubborn_rank.py"
    script.write_text(STUBBORN_RANK)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", str(script)]
    monkeypatch.setattr(launcher, "child_command", lambda request, nproc: command)
    request = _stub_request(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    # torchrun itself waits 30 s for its ranks after SIGTERM; this kill comes first.
    with pytest.raises(LaunchError, match="the run was killed: still running"):
        launcher.train_in_child(request, nproc=2, timeout=8, kill_after=3, env=env)
    assert not _ranks_alive(str(script))


# A child that logs to stderr the way a rank does, in more than a pipe's buffer, and fails.
CHATTY_CHILD = """
import json, os, sys
fmt = os.environ.get("GENESIS_FP16_LOG_FORMAT")
for i in range(2000):
    print(json.dumps({"event": f"line {i}", "level": "info", "format": fmt}), file=sys.stderr)
print("Traceback (most recent call last):", file=sys.stderr)
sys.exit(1)
"""


def test_relay_stderr_keeps_records_fields_and_plain_lines_in_order() -> None:
    """A rank's JSON record keeps its level and fields; other lines: warning when error-like."""
    record = {"event": "joined", "level": "warning", "logger": "x.y", "timestamp": "T", "n": 2}
    stream = io.StringIO(
        json.dumps(record) + "\n"
        "W0115 10:00:00.123000 42 torch/distributed/run.py:792] *****\n"
        "Setting up\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in <module>\n'
        "ValueError: bad\n"
        "[1, 2]\n"
    )
    with capture_logs() as logs:
        relay_stderr(stream)
    plain = [(r["log_level"], r["line"]) for r in logs[1:]]
    assert logs[0] == {
        "event": "joined",
        "log_level": "warning",
        "child_logger": "x.y",
        "child_timestamp": "T",
        "n": 2,
    }
    assert plain == [
        ("warning", "W0115 10:00:00.123000 42 torch/distributed/run.py:792] *****"),
        ("info", "Setting up"),
        ("warning", "Traceback (most recent call last):"),
        ("warning", '  File "a.py", line 1, in <module>'),
        ("warning", "ValueError: bad"),
        ("info", "[1, 2]"),
    ]
    assert {r["event"] for r in logs[1:]} == {"torchrun stderr"}


def test_launcher_relays_every_stderr_line_with_the_jobs_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child's stderr comes back through structlog, all of it, in JSON, with agent/run_id."""
    command = [sys.executable, "-c", CHATTY_CHILD]
    monkeypatch.setattr(launcher, "child_command", lambda request, nproc: command)
    request = _stub_request(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "GENESIS_FP16_LOG_FORMAT"}
    merge = structlog.contextvars.merge_contextvars
    with (
        structlog.contextvars.bound_contextvars(agent="stub", run_id="r1"),
        capture_logs(processors=[merge]) as logs,
        pytest.raises(LaunchError),
    ):
        train_in_child(request, nproc=2, timeout=30, env=env)
    assert [r["event"] for r in logs[:-1]] == [f"line {i}" for i in range(2000)]
    # The child's log format is the run file's, not a setting in its environment.
    assert {(r["agent"], r["run_id"], r["format"]) for r in logs[:-1]} == {("stub", "r1", None)}
    assert logs[-1]["line"] == "Traceback (most recent call last):"
    assert logs[-1]["agent"] == "stub" and logs[-1]["log_level"] == "warning"


def test_child_command_hands_the_whole_request_as_a_file(tmp_path: Path) -> None:
    """The ranks get one --request file: precision, reason, guard, options round-trip whole."""
    from genesis_fp16_infrastructure.training import GuardConfig

    request = TrainRequest(
        agent="a",
        precision=PrecisionRequest(
            "auto",
            mode="measure",
            excluded={"bf16": "probe red"},
            floor="bf16",
            floor_reason="precision guard memory: demoted ...",
            cache=tmp_path / "s" / "cal.json",
        ),
        precision_reason="default: auto",
        state_dir=tmp_path / "s",
        checkpoint_dir=tmp_path / "s" / "c",
        data_path=Path("d"),
        epochs=3,
        seed=7,
        fsdp=True,
        cuda_graph="off",
        guard=GuardConfig(check_interval=5, overflow_rate_limit=None),
        options={"preset": "bf16_pure", "lr": 0.01},
    )
    command = child_command(request, 4, python="py")
    text = " ".join(command)
    assert text.startswith("py -P -m torch.distributed.run --standalone --nproc-per-node 4 ")
    assert command[command.index("--request") + 1] == str(launcher.request_file(request))
    assert "--precision" not in command and "--steps" not in command
    handed = json.loads(json.dumps(request.to_json(), allow_nan=False))
    assert TrainRequest.from_json(handed) == request
    with pytest.raises(ValueError, match="nproc=0"):
        child_command(request, 0)


def test_torchrun_environment_is_read_once_and_checked() -> None:
    """RANK/WORLD_SIZE/LOCAL_RANK parse; absent means no torchrun; nonsense is refused."""
    assert TorchrunEnv.from_environ({}) is None
    env = TorchrunEnv.from_environ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    assert env == TorchrunEnv(1, 2, 1) and not env.is_main
    assert rank_device(env, "cuda") == "cuda:1" and rank_device(env, "cpu") == "cpu"
    with pytest.raises(ValueError, match="RANK=2 WORLD_SIZE=2"):
        TorchrunEnv.from_environ({"RANK": "2", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="must be an integer"):
        TorchrunEnv.from_environ({"RANK": "x", "WORLD_SIZE": "2"})


def test_agent_nproc_defaults_to_one_and_must_be_positive() -> None:
    """An agent trains in-process unless it asks for more processes; nproc=0 is refused."""
    from genesis_fp16.config.settings import AgentSettings

    assert AgentSettings().nproc == 1
    with pytest.raises(ValueError):
        AgentSettings(nproc=0)


def _layout_request(device: str) -> TrainRequest:
    return TrainRequest(
        agent="se_darwin",
        precision="fp32",
        precision_reason="r",
        state_dir=Path("s"),
        checkpoint_dir=Path("c"),
        device=device,
    )


def test_a_layout_the_host_cannot_run_is_refused_in_one_line() -> None:
    """More cuda ranks than GPUs, or every rank on cuda:N: refused, naming NPROC and the count."""
    one_gpu = lambda: 1  # noqa: E731
    with pytest.raises(LayoutError) as raised:
        check_layout(_layout_request("cuda"), 2, gpu_count=one_gpu)
    message = str(raised.value)
    assert message.startswith("GENESIS_FP16_AGENTS__SE_DARWIN__NPROC=2 on cuda needs 2 GPUs")
    assert "this host has 1" in message and "\n" not in message
    with pytest.raises(LayoutError, match="every rank would use that one GPU"):
        check_layout(_layout_request("cuda:0"), 2, gpu_count=lambda: 8)
    check_layout(_layout_request("cuda"), 2, gpu_count=lambda: 2)  # one GPU per rank
    check_layout(_layout_request("cuda:0"), 1, gpu_count=one_gpu)  # no torchrun layout
    check_layout(_layout_request("cpu"), 4, gpu_count=lambda: 0)  # gloo ranks share the CPU
    assert issubclass(LayoutError, TrainRequestError)  # one line in the daemon and the CLI


def test_the_launcher_checks_the_layout_before_starting_torchrun(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The launcher refuses with this host's real GPU count and starts nothing."""
    started: list[object] = []
    monkeypatch.setattr(launcher, "_start", lambda *args: started.append(args))
    nproc = max(2, cuda_device_count() + 1)
    with pytest.raises(LayoutError, match=f"this host has {cuda_device_count()}"):
        train_in_child(_layout_request("cuda"), nproc=nproc)
    assert started == []


def test_the_ranks_get_the_requests_device() -> None:
    """The handed request names its device, so every rank trains where it was asked."""
    request = _layout_request("cpu")
    assert TrainRequest.from_json(request.to_json()).device == "cpu"
