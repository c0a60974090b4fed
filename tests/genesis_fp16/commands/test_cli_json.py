"""`--json` on every command: an object on stdout when it works, an error object when it fails."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest
from cli_fork import run_cli
from daemon_harness import daemon_env

from genesis_fp16.cli import build_parser, main

# Commands with no --json, and why: serve is the daemon (its log is JSON with
# GENESIS_FP16_LOG_FORMAT=json).
WITHOUT_JSON = {"serve"}


def _leaves(parser: argparse.ArgumentParser, path: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every runnable command's parser by its words (``config check``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {path: parser}
    found: dict[str, argparse.ArgumentParser] = {}
    for name, sub in subs[0].choices.items():
        found.update(_leaves(sub, f"{path} {name}".strip()))
    return found


def test_every_command_takes_json_but_the_ones_named() -> None:
    """Each command's parser has --json, except the listed ones (a new command without
    it fails here)."""
    leaves = _leaves(build_parser())
    missing = {words for words, p in leaves.items() if "--json" not in p._option_string_actions}
    assert missing == WITHOUT_JSON & set(leaves)


def _cli(cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = daemon_env({"GENESIS_FP16_STATE_DIR": str(cwd / "state"), **extra}, fixtures=False)
    return run_cli(
        [*args],
        cwd=cwd,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("train", "se_darwin", "--data", "nope.json", "--steps", "2"), "nope.json"),
        (("train", "no_such_agent"), "no_such_agent"),
        (("check-agent", "no_such_agent"), "no_such_agent"),
        (("probe", "no_such_agent"), "no_such_agent"),
        (("precision", "show", "no_such_agent"), "unknown agent 'no_such_agent'"),
        (("precision", "reset", "no_such_agent"), "unknown agent 'no_such_agent'"),
        (("data", "generate", "no_such_agent", "--out", "x.json"), "no_such_agent"),
        (("bench", "--device", "cpu", "--precisions", "fp8"), "fp8"),
    ],
    ids=lambda value: value[0] if isinstance(value, tuple) else None,
)
def test_a_failed_command_with_json_ends_stdout_with_an_error_object(
    tmp_path: Path, args: tuple[str, ...], fragment: str
) -> None:
    """Bad input with --json: exit 2, its one line on stderr, and stdout's last line the
    object {"error": that line, "kind": ..., "exit_code": 2}."""
    proc = _cli(tmp_path, *args, "--json")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    error = json.loads(proc.stdout.strip().splitlines()[-1])
    assert error["kind"] == "refused" and error["exit_code"] == 2
    assert fragment in error["error"] and line == f"genesis-fp16: error: {error['error']}"


@pytest.mark.parametrize(
    "args",
    [
        ("agents",),
        ("config", "check"),
        ("status",),
        ("train", "se_darwin"),
        ("probe", "se_darwin"),
        ("check-agent", "se_darwin"),
        ("data", "generate", "se_darwin", "--out", "x.json"),
    ],
    ids=lambda args: "-".join(args[:2]),
)
def test_an_invalid_setting_with_json_is_an_error_object_naming_it(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """GENESIS_FP16_LOG_INTERVAL=0 refuses every command that reads the settings: exit 2
    and, with --json, stdout's last line an error object naming the variable."""
    proc = _cli(tmp_path, *args, "--json", GENESIS_FP16_LOG_INTERVAL="0")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    error = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "GENESIS_FP16_LOG_INTERVAL" in error["error"] and error["exit_code"] == 2
    assert error["error"] in proc.stderr


def test_without_json_a_failure_leaves_stdout_empty(tmp_path: Path) -> None:
    """The error object is for --json only: a plain failed train prints nothing on stdout."""
    proc = _cli(tmp_path, "train", "se_darwin", "--data", "nope.json", "--steps", "2")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout


def test_check_agent_json_lists_every_rule(tmp_path: Path) -> None:
    """`check-agent fixture_good --json`: one object, a verdict and a reason per rule."""
    env = daemon_env({"GENESIS_FP16_STATE_DIR": str(tmp_path)}, fixtures=True)
    proc = run_cli(
        ["check-agent", "fixture_good", "--json"],
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    from genesis_fp16.testing import RULES

    report = json.loads(proc.stdout)
    assert report["agent"] == "fixture_good" and [r["rule"] for r in report["rules"]] == list(RULES)
    assert all(r["detail"] for r in report["rules"])
    assert proc.returncode == (0 if report["ok"] else 1)
    assert report["ok"] == all(r["ok"] for r in report["rules"])


def test_bench_json_is_one_object_of_rows_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench --json`: stdout is the object alone (progress on stderr): the rows as
    strict JSON and the CSV, PNG and table it wrote."""
    monkeypatch.chdir(tmp_path)
    tiny = ["bench", "--device", "cpu", "--tiny", "--sizes", "default", "--runners", "hand",
            "--precisions", "fp32", "--batch-size", "16", "--warmup", "0", "--steps", "1",
            "--in-process", "--out-dir", str(tmp_path / "out"), "--json"]  # fmt: skip
    assert main(tiny) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert "results will go to" in err
    (row,) = result["rows"]
    assert row["runner"] == "hand" and row["precision_requested"] == "fp32"
    assert {Path(f).suffix for f in result["files"].values()} == {".csv", ".png", ".md"}
    assert all(Path(f).is_file() for f in result["files"].values())


def test_a_run_that_learned_nothing_exits_1_with_its_result(tmp_path: Path) -> None:
    """A run whose every step was skipped finished but learned nothing: exit 1 (a finished
    run exits 0), its --json result saying outcome "failed"."""
    env = daemon_env(
        {"GENESIS_FP16_STATE_DIR": str(tmp_path), "FIXTURE_SKIPPED_STEPS": "4"}, fixtures=True
    )
    proc = run_cli(
        ["train", "fixture_good", "--steps", "4", "--json"],
        cwd=tmp_path,
        env={**env, "FIXTURE_STEP_SECONDS": "0"},
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["outcome"] == "failed" and result["skipped_steps"] == 4
