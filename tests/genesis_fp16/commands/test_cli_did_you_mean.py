"""A mistyped flag or command gets "did you mean", in the usage of the command it was given to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import daemon_env


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=cwd,
        env=daemon_env({"GENESIS_FP16_STATE_DIR": str(cwd)}, fixtures=False),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "usage", "error"),
    [
        (
            ("train", "se_darwin", "--stepz", "5"),
            "usage: genesis-fp16 train ",
            "genesis-fp16 train: error: unrecognized arguments: --stepz 5 (did you mean --steps?)",
        ),
        (
            ("config", "check", "--jsn"),
            "usage: genesis-fp16 config check ",
            "genesis-fp16 config check: error: unrecognized arguments: --jsn "
            "(did you mean --json?)",
        ),
        (
            ("probe", "se_darwin", "--optimiser=adam"),
            "usage: genesis-fp16 probe ",
            "unrecognized arguments: --optimiser=adam (did you mean --optimizer?)",
        ),
        (("trian", "se_darwin"), "usage: genesis-fp16 ", "'events') (did you mean train?)"),
    ],
    ids=["train", "config-check", "probe", "command"],
)
def test_a_mistyped_word_gets_the_closest_one_of_its_command(
    tmp_path: Path, args: tuple[str, ...], usage: str, error: str
) -> None:
    """Exit 2, the usage of the command given (not the top level's), and the suggestion."""
    proc = _cli(tmp_path, *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(usage), proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(error), proc.stderr


def test_a_word_close_to_nothing_gets_no_guess(tmp_path: Path) -> None:
    """`--zzzzzz` is unrecognized, with no suggestion made up for it."""
    proc = _cli(tmp_path, "train", "se_darwin", "--zzzzzz")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and last.endswith("unrecognized arguments: --zzzzzz"), last


def test_with_json_a_usage_error_is_also_an_error_object(tmp_path: Path) -> None:
    """`train --stepz 5 --json`: the error object on stdout, kind "usage", exit 2."""
    proc = _cli(tmp_path, "train", "se_darwin", "--stepz", "5", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout) == {
        "error": "unrecognized arguments: --stepz 5 (did you mean --steps?)",
        "kind": "usage",
        "exit_code": 2,
    }
