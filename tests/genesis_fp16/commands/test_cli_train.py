"""`genesis-fp16 train` as a real process: --json contract, precision switch, errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch
from cli_fork import run_cli

from genesis_fp16_infrastructure.agent_folder.candidates import INCONCLUSIVE_KEEP
from genesis_fp16_infrastructure.agent_folder.layout import VERDICT
from genesis_fp16_infrastructure.data.synthetic import generate_pool

ROOT = Path(__file__).resolve().parents[3]
JSON_KEYS = {
    "agent",
    "precision_requested",
    "precision_used",
    "precision_reason",
    "execution",
    "execution_reason",
    "device",
    "steps",
    "skipped_steps",
    "overflow_rate",
    "loss_scale",
    "final_train_loss",
    "eval",
    "samples_per_second",
    "wall_seconds",
    "checkpoint",
    "quarantined",
    "outcome",
}


def _cli(
    cwd: Path, *args: str, env: Mapping[str, str] | None = None, stderr: int | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GENESIS_FP16_") and k != "ENABLE_FP16_TRAINING"
    }
    clean["GENESIS_FP16_STATE_DIR"] = str(cwd / "state")
    clean["GENESIS_FP16_LOG_LEVEL"] = "WARNING"
    clean.update(env or {})
    clean["PYTHONPATH"] = str(ROOT)
    # A forked child of a process that has imported torch (tests/cli_fork.py): what is
    # tested here is what train does, not how a fresh interpreter starts.
    err = subprocess.PIPE if stderr is None else stderr
    return run_cli(args, cwd=cwd, env=clean, stderr=err, timeout=300)


def _last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pool = generate_pool(400, seed=5)
    first = next(iter(pool["trajectories"]))
    pool["trajectories"][first]["success_score"] = 7.0  # one malformed record
    path = tmp_path_factory.mktemp("data") / "pool.json"
    path.write_text(json.dumps(pool))
    return path


def _one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("genesis-fp16: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.slow
def test_json_contract_and_quarantine(tmp_path: Path, data: Path) -> None:
    """--json ends stdout with one object holding every contract key; bad records are counted."""
    ckpt = tmp_path / "ckpt"
    proc = _cli(
        tmp_path, "train", "se_darwin", "--precision", "fp32", "--steps", "5",
        "--data", str(data), "--checkpoint-dir", str(ckpt), "--seed", "1", "--json",
    )  # fmt: skip
    out = _last_json(proc)
    assert out.keys() >= JSON_KEYS
    assert out["precision_requested"] == out["precision_used"] == "fp32"
    # The device is GENESIS_FP16_DEVICE's default, auto: cuda on a GPU host.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert out["steps"] == 5 and str(out["device"]).split(":")[0] == device
    assert out["quarantined"] == 1
    # A 400-record pool is cross-validated: eval is out of fold over every labelled record
    # the folds hold, which are all but the judged run's held-out records.
    extra, quality = out["extra"], out["eval"]
    split = extra["split"]  # type: ignore[index]
    assert split["mode"] == "cross_validation" and split["folds"] == 5
    assert quality["examples"] == split["records"] < extra["examples"]  # type: ignore[index]
    assert quality["auc_ci_low"] < quality["auc"] < quality["auc_ci_high"]  # type: ignore[index]
    # auto: eager on a CPU (no CUDA device) and, for now, on a GPU too (not yet verified).
    assert out["execution"] == "eager" and out["execution_reason"]
    assert Path(str(out["checkpoint"])).parent.parent == ckpt / "candidates"  # its own folder
    metrics = out["eval"]
    assert isinstance(metrics, dict)
    assert {"loss", "auc", "brier", "score_mae", "outcome_accuracy"} <= metrics.keys()
    (first,) = (ckpt / "quarantine").glob("*.jsonl")  # this run's file of its own
    entries = first.read_text().splitlines()
    assert len(entries) == 1 and "success_score" in json.loads(entries[0])["reason"]
    assert "\r" not in proc.stderr  # no progress bar without a terminal

    # A plain train on the same data (no flag): up to date whatever the budget, answered
    # by the manifest. Forced (--resume): its candidate continues the served model.
    same = _cli(
        tmp_path, "train", "se_darwin", "--precision", "fp32", "--steps", "3", "--seed", "1",
        "--data", str(data), "--checkpoint-dir", str(ckpt), "--json",
    )  # fmt: skip
    fresh = _last_json(same)
    assert fresh["outcome"] == "up_to_date" and fresh["steps"] == 0
    assert fresh["data"]["checked_by"] == "manifest"  # type: ignore[index]
    again = _cli(
        tmp_path, "train", "se_darwin", "--precision", "fp32", "--steps", "3", "--seed", "1",
        "--data", str(data), "--checkpoint-dir", str(ckpt), "--resume", "--json",
    )  # fmt: skip
    resumed = _last_json(again)
    assert resumed["steps"] == 3 and resumed["extra"]["total_steps"] == 8  # type: ignore[index]


@pytest.mark.slow
def test_rollback_switch_and_flag_precedence(tmp_path: Path, data: Path) -> None:
    """ENABLE_FP16_TRAINING=false forces fp32, true in .env asks fp16, --precision beats both."""
    common = ("train", "se_darwin", "--steps", "2", "--data", str(data), "--json")
    off = _last_json(
        _cli(tmp_path, *common, "--checkpoint-dir", str(tmp_path / "a"),
             env={"ENABLE_FP16_TRAINING": "false"})
    )  # fmt: skip
    assert off["precision_requested"] == off["precision_used"] == "fp32"
    assert "ENABLE_FP16_TRAINING=false" in str(off["precision_reason"])
    (tmp_path / ".env").write_text("ENABLE_FP16_TRAINING=true\n")
    on = _last_json(_cli(tmp_path, *common, "--checkpoint-dir", str(tmp_path / "b")))
    assert on["precision_requested"] == on["precision_used"] == "fp16"
    flag = _last_json(
        _cli(tmp_path, *common, "--checkpoint-dir", str(tmp_path / "c"), "--precision", "bf16",
             env={"ENABLE_FP16_TRAINING": "false"})
    )  # fmt: skip
    assert flag["precision_requested"] == flag["precision_used"] == "bf16"


@pytest.mark.slow
def test_without_data_trains_on_sample_data_in_the_state_folder(tmp_path: Path) -> None:
    """No --data: sample data is generated once under the state folder and trained on."""
    env = {"GENESIS_FP16_SAMPLE_COUNT": "300"}
    out = _last_json(_cli(tmp_path, "train", "se_darwin", "--steps", "2", "--json", env=env))
    agent_dir = tmp_path / "state" / "agents" / "se_darwin"
    assert (agent_dir / "data" / ".generated").exists()
    assert Path(str(out["checkpoint"])).parent.parent == agent_dir / "checkpoints" / "candidates"


def _on_a_terminal(tmp_path: Path, *args: str, columns: int = 120, **env: str) -> str:
    """Run ``genesis-fp16 *args`` with stderr on a pseudo-terminal ``columns`` wide (0: one
    that reports no size); returns what the terminal received."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = _cli(tmp_path, *args, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    terminal = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, terminal
    return terminal


@pytest.mark.slow
@pytest.mark.parametrize("columns", [120, 0])
def test_progress_bar_on_a_terminal(tmp_path: Path, data: Path, columns: int) -> None:
    """On a pseudo-terminal (of any width, or none reported) tqdm draws the bar with the
    rate and the ETA, and each log record (console format) is a line of its own,
    never glued to the bar."""
    import re

    # DEBUG: the validation lines below, which INFO leaves out.
    terminal = _on_a_terminal(
        tmp_path, "train", "se_darwin", "--steps", "24", "--precision", "fp32",
        "--data", str(data), "--checkpoint-dir", str(tmp_path / "ck"), columns=columns,
        GENESIS_FP16_LOG_LEVEL="DEBUG", GENESIS_FP16_LOG_FORMAT="console",
    )  # fmt: skip
    parts = [part for part in re.split(r"[\r\n]+", terminal) if part.strip()]
    bars = [part for part in parts if "/24 [" in part]
    bar = r"\s*\d+%\|.*\| (\d+)/24 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+(step/s|s/step), "
    bar += r"loss \S+, fp32, skipped \d+\]"
    # drawn before the first step, however long the start took on a loaded machine
    start = r"\s*0%\|\s*\| 0/24 \[\d\d:\d\d<\?, \?step/s\]"
    for drawn in bars:
        assert re.fullmatch(bar, drawn) or re.fullmatch(start, drawn), drawn
    done = {m.group(1) for m in (re.fullmatch(bar, drawn) for drawn in bars) if m}
    assert done >= {"10", "20", "24"}, bars
    records = [part for part in parts if "validation at step" in part]
    assert len(records) == 3  # steps 8, 16, 24: each printed above the bar, whole
    for record in records:
        assert "/24 [" not in record and "%|" not in record, record


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("nobody",), ("unknown agent 'nobody'", "se_darwin")),
        (("se_darwin", "--precision", "fp8"), ("'fp8'", "auto, fp32, bf16, fp16")),
        (("se_darwin", "--data", "missing/pool.json"), ("missing/pool.json", "no such file")),
        (("se_darwin", "--data", "/proc/self/mem"), ("cannot read data file", "/proc/self/mem")),
        (("se_darwin", "--steps", "0"), ("--steps 0",)),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], fragments: tuple[str, ...]
) -> None:
    """Unknown agent (listing known ones), bad precision, missing or unreadable data."""
    proc = _cli(tmp_path, "train", *args, "--checkpoint-dir", str(tmp_path / "ck"))
    _one_line_error(proc, *fragments)
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ((), "1 labelled example(s) cannot be dealt into 5 folds"),  # 1 of 2 held out
        (
            ("--option", "cross_validation=false"),
            "cannot be split into train, validation and held-out parts",
        ),
    ],
)
def test_a_request_the_plugin_refuses_is_one_line_and_exit_2(
    tmp_path: Path, options: tuple[str, ...], fragment: str
) -> None:
    """A plugin's TrainRequestError (here: of 2 records the judged run holds one out, and
    one cannot be dealt into folds, or split when cross-validation is off) is one line,
    exit 2."""
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(generate_pool(2, seed=5)))
    proc = _cli(tmp_path, "train", "se_darwin", "--data", str(path), "--steps", "2", *options)
    _one_line_error(proc, fragment)
    assert "Traceback" not in proc.stderr


def test_json_progress_leaves_no_blank_stderr_line(tmp_path: Path, data: Path) -> None:
    """--json-progress (the launcher's mode): no progress bar, so no line-ending blank line."""
    proc = _cli(tmp_path, "train", "se_darwin", "--data", str(data), "--steps", "2",
                "--json-progress", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "" not in proc.stderr.splitlines()


@pytest.mark.slow
def test_cuda_graph_on_runs_graphed_on_cuda_and_is_one_line_elsewhere(
    tmp_path: Path, data: Path
) -> None:
    """--cuda-graph on: a captured run on a GPU host; on a CPU, exit 2 with the reason."""
    proc = _cli(
        tmp_path, "train", "se_darwin", "--steps", "8", "--data", str(data),
        "--checkpoint-dir", str(tmp_path / "c"), "--cuda-graph", "on", "--json",
    )  # fmt: skip
    if torch.cuda.is_available():
        out = _last_json(proc)
        assert out["execution"] == "cuda_graph" and out["steps"] == 8
    else:  # the data's one malformed record is logged before: the error is the last line
        assert proc.returncode == 2, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("genesis-fp16: error: cuda_graph=on, but this run cannot")
        assert "CUDA graphs need a CUDA device" in last
    bad = _cli(tmp_path, "train", "se_darwin", "--cuda-graph", "yes")
    assert bad.returncode == 2 and "--cuda-graph" in bad.stderr


@pytest.mark.slow
def test_compile_on_runs_compiled_in_the_graph_on_cuda_and_is_one_line_elsewhere(
    tmp_path: Path, data: Path
) -> None:
    """--compile on: the compiled captured step on a GPU host; on a CPU, exit 2 naming why."""
    proc = _cli(
        tmp_path, "train", "se_darwin", "--steps", "8", "--precision", "bf16",
        "--data", str(data), "--checkpoint-dir", str(tmp_path / "c"), "--compile", "on", "--json",
    )  # fmt: skip
    if torch.cuda.is_available():
        out = _last_json(proc)
        assert out["execution"] == "cuda_graph_compiled" and out["steps"] == 8
        assert "max-autotune-no-cudagraphs" in str(out["execution_reason"])
    else:  # the data's one malformed record is logged before: the error is the last line
        assert proc.returncode == 2, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith(
            "genesis-fp16: error: compile=on runs the compiled model inside the captured step"
        )
        assert "CUDA graphs need a CUDA device" in last and "Traceback" not in proc.stderr
    bad = _cli(tmp_path, "train", "se_darwin", "--compile", "auto")
    assert bad.returncode == 2 and "--compile" in bad.stderr


@pytest.mark.slow
def test_rlhf_ppo_refuses_compile_on_in_one_line(tmp_path: Path) -> None:
    """rlhf_ppo never compiles its update step: --compile on is exit 2, naming the setting."""
    proc = _cli(tmp_path, "train", "rlhf_ppo", "--steps", "2", "--compile", "on")
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("genesis-fp16: error: rlhf_ppo: compile=on is not supported")
    assert "GENESIS_FP16_AGENTS__RLHF_PPO__COMPILE" in last


@pytest.mark.slow
def test_a_disk_that_refuses_the_checkpoint_is_one_line_naming_the_path(
    tmp_path: Path, data: Path
) -> None:
    """Files capped at 32 KiB (the kernel's EFBIG, as a full disk gives ENOSPC): the run
    ends with one line naming the checkpoint path and the setting, exit 1, no traceback."""
    import resource
    import signal

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write, do not kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, 32 * 1024))

    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(
        GENESIS_FP16_STATE_DIR=str(tmp_path / "state"),
        GENESIS_FP16_LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "genesis_fp16",
            "train",
            "se_darwin",
            "--data",
            str(data),
            "--precision",
            "fp32",
            "--steps",
            "4",
            "--checkpoint-dir",
            str(tmp_path / "ck"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=small_files,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("genesis-fp16: error:")]
    assert str(tmp_path / "ck") in line and "File too large" in line
    assert "GENESIS_FP16_STATE_DIR" in line


def test_eval_block_is_printed_once(tmp_path: Path, data: Path) -> None:
    """At INFO, the eval metrics appear once (the summary), not in two log lines as well."""
    proc = _cli(
        tmp_path, "train", "se_darwin", "--steps", "4", "--precision", "fp32",
        "--data", str(data), "--checkpoint-dir", str(tmp_path / "ck"),
        env={"GENESIS_FP16_LOG_LEVEL": "INFO", "GENESIS_FP16_LOG_FORMAT": "console"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    both = proc.stdout + proc.stderr
    assert both.count("success_bce_se") == 1, both  # the eval block's last entry


def test_request_file_carries_the_whole_run_and_refuses_other_flags(tmp_path: Path) -> None:
    """--request (the launcher's hand-off) with --steps: one line; a bad file: one line."""
    handed = tmp_path / "request.json"
    handed.write_text("{}")
    _one_line_error(
        _cli(tmp_path, "train", "se_darwin", "--request", str(handed), "--steps", "3"),
        "--request carries the whole run; drop --steps",
    )
    _one_line_error(
        _cli(tmp_path, "train", "se_darwin", "--request", str(handed)),
        f"--request {handed}: not a readable run request",
    )


def test_resume_with_steps_after_an_early_stopped_run_runs_them(tmp_path: Path) -> None:
    """`--resume --steps N` after a run that stopped on validation trains N more steps,
    and its text summary prints (it crashed on a 0-step result)."""
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps(generate_pool(300, seed=4)))
    common = ("train", "se_darwin", "--precision", "fp32", "--data", str(pool),
              "--checkpoint-dir", str(tmp_path / "ck"))  # fmt: skip
    first = _last_json(_cli(tmp_path, *common, "--json"))
    assert str(first["early_stop"]["stop_reason"]).startswith("no improvement")  # type: ignore[index]
    proc = _cli(tmp_path, *common, "--resume", "--steps", "5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith("  5 steps in fp32"), proc.stdout


def test_the_summary_leads_with_the_gates_verdict_in_a_short_line(tmp_path: Path) -> None:
    """The text summary's first line is the gate's verdict with a short reason (served,
    both models' primary loss, named, and the records compared); the precision's long
    reason is left to the log and --json."""
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps(generate_pool(300, seed=4)))
    common = ("train", "se_darwin", "--data", str(pool), "--steps", "5",
              "--checkpoint-dir", str(tmp_path / "ck"))  # fmt: skip
    first = _cli(tmp_path, *common, env={"GENESIS_FP16_LOG_LEVEL": "INFO"})
    assert first.returncode == 0, first.stderr
    head = first.stdout.splitlines()[0]
    assert head.startswith("se_darwin: served: the first model, nothing to beat (AUC 0."), head
    assert "(requested auto)" in first.stdout and "requested auto:" not in first.stdout
    assert "trained se_darwin in" in first.stderr and "requested auto: " in first.stderr  # the log
    second = _cli(tmp_path, *common, "--resume")
    assert second.returncode == 0, second.stderr
    head = second.stdout.splitlines()[0]
    number = r"\d\.\d{3}"
    shape = (rf"se_darwin: ((served|rejected|held by the pin): log_loss {number} vs {number} "
             r"on \d+ \w+ records(; the (served|pinned) model stays)?"
             r"|inconclusive: kept, .*)")  # fmt: skip
    assert re.fullmatch(shape, head), head
    assert len(head) < 100


def test_an_unchanged_pool_is_up_to_date_in_json_and_in_text(tmp_path: Path) -> None:
    """A plain train on the pool the model was trained on (no flag) takes no step and
    says so: outcome up_to_date in --json, a line of its own in the text summary; so does
    --resume with no budget to force."""
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps(generate_pool(300, seed=4)))
    common = ("train", "se_darwin", "--precision", "fp32", "--data", str(pool),
              "--checkpoint-dir", str(tmp_path / "ck"))  # fmt: skip
    first = _last_json(_cli(tmp_path, *common, "--json"))
    assert first["outcome"] == "success" and first["data"]["change"] == "first"  # type: ignore[index]
    again = _last_json(_cli(tmp_path, *common, "--json"))
    assert again["outcome"] == "up_to_date" and again["steps"] == 0
    assert again["checkpoint"] == first["checkpoint"] and again["eval"] == first["eval"]
    text = _cli(tmp_path, *common, "--resume")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("se_darwin: up to date"), text.stdout


def test_the_final_train_loss_is_the_same_on_a_terminal_and_off_it(tmp_path: Path) -> None:
    """The same 30-step run reports the same final_train_loss whether stderr is a terminal
    (a progress bar, logged every 10 steps) or not (it differed: 10 steps against 30)."""
    import pty

    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps(generate_pool(300, seed=4)))

    def run(name: str, stderr: int | None) -> float:
        proc = _cli(
            tmp_path, "train", "se_darwin", "--steps", "30", "--precision", "fp32", "--json",
            "--data", str(pool), "--checkpoint-dir", str(tmp_path / name), stderr=stderr,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        loss: float = json.loads(proc.stdout.strip().splitlines()[-1])["final_train_loss"]
        return loss

    leader, follower = pty.openpty()
    try:
        on_terminal = run("tty", follower)
    finally:
        os.close(follower)
        os.close(leader)
    assert on_terminal == run("pipe", None)


def test_a_pool_over_the_size_setting_is_one_line_naming_size_limit_and_setting(
    tmp_path: Path, data: Path
) -> None:
    """A pool larger than GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_POOL_BYTES is refused
    before it is read: exit 2, one line with its size, the limit and the setting."""
    setting = "GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_POOL_BYTES"
    env = {setting: "1000"}
    proc = _cli(tmp_path, "train", "se_darwin", "--data", str(data), "--steps", "2", env=env)
    size = f"({data.stat().st_size:,} bytes)"
    _one_line_error(proc, size, "over the limit of 0.0 MiB (1,000 bytes)", setting)
    assert not list(tmp_path.rglob("quarantine/*.jsonl"))  # not a record was read


def test_resume_on_an_empty_folder_says_it_trains_from_scratch(tmp_path: Path) -> None:
    """--resume with no checkpoint: one warning naming the folder, then the run."""
    empty = tmp_path / "empty"
    proc = _cli(
        tmp_path,
        "train",
        "rlhf_ppo",
        "--steps",
        "4",
        "--resume",
        "--checkpoint-dir",
        str(empty),
        "--option",
        "batch_size=16",
        "--precision",
        "fp32",
    )
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "--resume" in line]
    assert len(warned) == 1 and str(empty) in warned[0] and "from scratch" in warned[0]
    again = _cli(
        tmp_path,
        "train",
        "rlhf_ppo",
        "--steps",
        "4",
        "--resume",
        "--checkpoint-dir",
        str(empty),
        "--option",
        "batch_size=16",
        "--precision",
        "fp32",
    )
    assert again.returncode == 0 and "from scratch" not in again.stderr, again.stderr


def test_bad_data_is_one_line_naming_the_cause_and_this_runs_quarantine_file(
    tmp_path: Path,
) -> None:
    """A pool that is not JSON: exit 2, one line with the cause and a quarantine file of
    this run's own, which holds the reason; a second run writes a second file."""
    bad = tmp_path / "pool.json"
    bad.write_text("not json")
    env = {"GENESIS_FP16_LOG_LEVEL": "ERROR"}
    for run in (1, 2):
        proc = _cli(tmp_path, "train", "se_darwin", "--data", str(bad), "--steps", "2", env=env)
        _one_line_error(proc, "invalid JSON at line 1 column 1: Expecting value")
        files = sorted((tmp_path / "state" / "agents" / "se_darwin" / "quarantine").iterdir())
        assert len(files) == run and proc.stderr.rstrip().endswith(str(files[-1]))
        assert "invalid JSON at line 1" in json.loads(files[-1].read_text())["reason"]


def test_train_bounds_the_model_history_and_names_the_gates_figures(tmp_path: Path) -> None:
    """Four `train --resume` runs, each on a grown pool, with a history of 1 and rejected
    candidates kept 0 days: at most the served model and one earlier are left (the
    daemon's bounds, issue 51), and the text summary gives the gate's verdict with both
    models' loss, never a bare δ."""
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "se_darwin.json").write_text(json.dumps(generate_pool(200, seed=4)))
    env = {"GENESIS_FP16_SERVED_HISTORY_KEEP": "1", "GENESIS_FP16_REJECTED_KEEP_DAYS": "0"}
    common = ("train", "se_darwin", "--precision", "fp32", "--data", str(pool),
              "--checkpoint-dir", str(tmp_path / "ck"), "--resume",
              "--option", "max_epochs=1")  # fmt: skip
    for n in range(4):
        (pool / f"grow{n}.json").write_text(
            json.dumps(generate_pool(60, seed=40 + n, agent=f"qa{n}"))
        )
        text = _cli(tmp_path, *common, env=env)
        assert text.returncode == 0, text.stderr
    assert "loss " in text.stdout, text.stdout
    assert "δ" not in text.stdout
    kept = list((tmp_path / "ck" / "candidates").iterdir())
    # and the newest inconclusive ones, judged again as records arrive (issue 62)
    waiting = [p for p in kept if _outcome(p) == "inconclusive"]
    assert len(waiting) <= INCONCLUSIVE_KEEP, [p.name for p in waiting]
    assert len(kept) - len(waiting) <= 2, [(p.name, _outcome(p)) for p in kept]


def _outcome(candidate: Path) -> object:
    """A kept candidate's verdict outcome (None: no verdict)."""
    verdict = VERDICT.at(candidate)
    return json.loads(verdict.read_text()).get("outcome") if verdict.exists() else None


def test_a_plugins_bug_in_a_foreground_train_leaves_its_one_line_record(tmp_path: Path) -> None:
    """A plugin that raises in train() (a bug, not a refusal): the state folder's last run
    says failed with the exception in one line, which `status` shows; before, it kept
    the run before it (here: none)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")},
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests/fixtures/plugins"), str(ROOT)]),
        "GENESIS_FP16_STATE_DIR": str(tmp_path / "state"),
        "GENESIS_FP16_PLUGIN_ALLOWLIST": "fixture_raising",
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "genesis_fp16", *args]
        return subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )

    trained = cli("train", "fixture_raising")
    assert trained.returncode == 1 and "fixture_raising always fails" in trained.stderr
    (agent,) = json.loads(cli("status", "--json").stdout)["agents"]
    last = agent["last_run"]
    assert last["outcome"] == "failed" and last["source"] == "train"
    assert last["reason"] == "RuntimeError: fixture_raising always fails its training job"
