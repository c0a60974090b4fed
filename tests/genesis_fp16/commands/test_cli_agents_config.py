"""`genesis-fp16 agents` and `genesis-fp16 config check` as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_fork import run_cli
from daemon_harness import FIXTURE_PLUGINS, daemon_env


def cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        [*args],
        cwd=tmp_path,
        env=daemon_env(env),
        timeout=120,
    )


def test_agents_json_lists_every_plugin_and_state(tmp_path: Path) -> None:
    """Every entry point is listed; the allowlist shows as not_allowed, failures with errors.

    A plugin that failed to load makes the command exit 1, naming it on stderr.
    """
    result = cli(
        tmp_path,
        "agents",
        "--json",
        GENESIS_FP16_PLUGIN_ALLOWLIST="fixture_good,fixture_broken,fixture_wrong_api",
    )
    assert result.returncode == 1, result.stderr
    assert "failed to load: fixture_broken, fixture_wrong_api" in result.stderr
    states = {row["name"]: row for row in json.loads(result.stdout)}
    assert states["fixture_good"]["state"] == "loaded"
    assert states["fixture_broken"]["state"] == "failed"
    assert states["fixture_broken"]["location"].endswith("fixture_agents/broken.py:5")
    assert states["fixture_wrong_api"]["state"] == "wrong_api"
    assert states["fixture_raising"]["state"] == "not_allowed"
    assert states["se_darwin"]["state"] == "not_allowed"


def test_agents_names_the_file_and_line_a_plugin_import_failed_at(tmp_path: Path) -> None:
    """The listing's line for a plugin whose import raised names its file and line."""
    result = cli(tmp_path, "agents", GENESIS_FP16_PLUGIN_ALLOWLIST="fixture_broken")
    assert result.returncode == 1
    (line,) = [row for row in result.stdout.splitlines() if row.startswith("fixture_broken ")]
    assert "not_installed_anywhere" in line and "fixture_agents/broken.py:5)" in line


def test_config_check_redacts_secrets_and_reports_errors(tmp_path: Path) -> None:
    """Resolved settings print with the password redacted; a bad value exits 2 naming it."""
    (tmp_path / ".env").write_text(
        "GENESIS_FP16_TLS_KEY_PASSWORD=hunter2\nENABLE_FP16_TRAINING=false\n"
    )
    ok = cli(tmp_path, "config", "check")
    assert ok.returncode == 0, ok.stderr
    assert "hunter2" not in ok.stdout and "GENESIS_FP16_TLS_KEY_PASSWORD=**********" in ok.stdout
    assert "ENABLE_FP16_TRAINING=False" in ok.stdout
    bad = cli(tmp_path, "config", "check", GENESIS_FP16_DEVICE_CONCURRENCY="zero")
    assert bad.returncode == 2
    assert "GENESIS_FP16_DEVICE_CONCURRENCY" in bad.stderr and "zero" in bad.stderr


def test_config_check_names_the_file_each_source_and_shadowed_values(tmp_path: Path) -> None:
    """The .env read is named, every value says default/.env/environment, shadowing is said."""
    (tmp_path / ".env").write_text(
        "ENABLE_FP16_TRAINING=false\nGENESIS_FP16_SEED=3\n"
        "GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__PRESET=bf16_fp32_kl\n"
    )
    ok = cli(tmp_path, "config", "check", ENABLE_FP16_TRAINING="true")
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert lines[0] == f"# env file: {(tmp_path / '.env').resolve()} (read)"
    assert "ENABLE_FP16_TRAINING=True  # environment" in lines
    assert "GENESIS_FP16_SEED=3  # .env" in lines
    assert "GENESIS_FP16_LOG_LEVEL=INFO  # default" in lines
    assert "GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__PRESET=bf16_fp32_kl  # .env" in lines
    shadowed = [line for line in lines if line.startswith("# shadowed: ")]
    assert len(shadowed) == 1 and "ENABLE_FP16_TRAINING=false" in shadowed[0]
    as_json = json.loads(cli(tmp_path, "config", "check", "--json").stdout)
    assert as_json["sources"]["GENESIS_FP16_SEED"] == ".env"
    assert as_json["settings"]["seed"] == 3 and as_json["env_file_read"] is True


def test_config_check_fails_on_a_misspelt_rollback_switch(tmp_path: Path) -> None:
    """ENABLE_FP16_TRAINIG=false in .env: exit 2, 'did you mean ENABLE_FP16_TRAINING?'."""
    (tmp_path / ".env").write_text("ENABLE_FP16_TRAINIG=false\n")
    bad = cli(tmp_path, "config", "check")
    assert bad.returncode == 2
    assert "did you mean ENABLE_FP16_TRAINING?" in bad.stderr


def test_agents_exits_0_when_every_allowed_plugin_loads(tmp_path: Path) -> None:
    """Only allowed, loading plugins: exit 0 (not_allowed ones do not count as failures)."""
    result = cli(tmp_path, "agents", GENESIS_FP16_PLUGIN_ALLOWLIST="fixture_good")
    assert result.returncode == 0, result.stderr
    assert "fixture_good" in result.stdout and "not_allowed" in result.stdout


def test_agents_gives_up_on_an_import_after_the_configured_deadline(tmp_path: Path) -> None:
    """With GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS=1, a plugin whose import takes 20 s
    is listed stuck and the command exits 1 (the default 30 s would have seen it load)."""
    site = tmp_path / "site"
    info = site / "slow_agent-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: slow_agent\nVersion: 0.1\n")
    entry = "[genesis_fp16.agents]\nslow_agent = slow_agent:plugin\n"
    (info / "entry_points.txt").write_text(entry)
    (site / "slow_agent.py").write_text(
        "import time\n\ntime.sleep(20)\n\n"
        "from fixture_agents.good import FixtureAgent\n\nplugin = FixtureAgent('slow_agent')\n"
    )
    path = os.pathsep.join(
        [str(site), str(FIXTURE_PLUGINS), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    result = cli(
        tmp_path,
        "agents",
        PYTHONPATH=path,
        GENESIS_FP16_PLUGIN_ALLOWLIST="slow_agent",
        GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS="1",
    )
    assert result.returncode == 1, (result.stdout, result.stderr)
    (line,) = [row for row in result.stdout.splitlines() if row.startswith("slow_agent ")]
    assert " stuck " in line and "has not returned" in line, line


def test_agents_into_a_closed_pipe_ends_without_a_traceback(tmp_path: Path) -> None:
    """`genesis-fp16 agents | head -1`: the reader is gone; no BrokenPipeError traceback."""
    child = subprocess.Popen(
        [sys.executable, "-m", "genesis_fp16", "agents"],
        cwd=tmp_path,
        env=daemon_env({"GENESIS_FP16_PLUGIN_ALLOWLIST": "fixture_good"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # before the child prints anything: its first write meets EPIPE
    stderr = child.stderr.read()
    assert child.wait(timeout=120) == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_help_shows_no_raw_double_backticks(capsys: pytest.CaptureFixture[str]) -> None:
    """Docstrings as --help text: ``code`` shows as `code` in every command's help (the
    console script's main(), called here: each command's --help in a process of its own,
    exiting 0, is test_cli_startup.py's)."""
    from genesis_fp16.cli import COMMAND_MODULES, main

    def help_of(*words: str) -> str:
        with pytest.raises(SystemExit) as done:
            main([*words, "--help"])
        assert done.value.code == 0, words
        return capsys.readouterr().out

    # A module's command is its name with dashes (new_agent: `genesis-fp16 new-agent`).
    for command in ("", *(name.replace("_", "-") for name in COMMAND_MODULES)):
        assert "``" not in help_of(*([command] if command else [])), command
    assert "`--precision`" in help_of("train")


def test_config_check_refuses_settings_for_an_agent_that_is_not_installed(tmp_path: Path) -> None:
    """GENESIS_FP16_AGENTS__SE_DARVIN__STEPS: exit 2 with 'did you mean se_darwin?'."""
    bad = cli(tmp_path, "config", "check", GENESIS_FP16_AGENTS__SE_DARVIN__STEPS="5")
    assert bad.returncode == 2
    assert "no agent 'se_darvin' is installed; did you mean se_darwin?" in bad.stderr


def test_config_check_says_a_removed_setting_is_ignored(tmp_path: Path) -> None:
    """GENESIS_FP16_RUN_ISOLATION=thread in .env (removed by issue 91): config check exits
    0 and says, in one line, that it is ignored; --json lists it under "ignored"."""
    (tmp_path / ".env").write_text("GENESIS_FP16_RUN_ISOLATION=thread\nGENESIS_FP16_SEED=3\n")
    ok = cli(tmp_path, "config", "check")
    assert ok.returncode == 0, ok.stderr
    (ignored,) = [line for line in ok.stdout.splitlines() if line.startswith("# ignored: ")]
    assert ignored.startswith("# ignored: GENESIS_FP16_RUN_ISOLATION (in "), ignored
    assert "is ignored: it was removed; a run with NPROC=1 is always served" in ignored
    assert "GENESIS_FP16_SEED=3  # .env" in ok.stdout.splitlines()
    as_json = json.loads(cli(tmp_path, "config", "check", "--json").stdout)
    assert [line.split(" ")[0] for line in as_json["ignored"]] == ["GENESIS_FP16_RUN_ISOLATION"]


def test_a_key_given_twice_in_env_is_a_warning_naming_both_lines(tmp_path: Path) -> None:
    """GENESIS_FP16_SEED on lines 1 and 3: config check says so, with both lines."""
    (tmp_path / ".env").write_text(
        "GENESIS_FP16_SEED=3\nGENESIS_FP16_LOG_LEVEL=INFO\nGENESIS_FP16_SEED=4\n"
    )
    ok = cli(tmp_path, "config", "check")
    assert ok.returncode == 0, ok.stderr
    warned = [line for line in ok.stdout.splitlines() if "set twice" in line]
    assert len(warned) == 1 and "GENESIS_FP16_SEED" in warned[0], ok.stdout
    assert "lines 1 and 3: line 3 wins" in warned[0]
    assert "GENESIS_FP16_SEED=4  # .env" in ok.stdout.splitlines()


@pytest.mark.parametrize(
    "command",
    [("config", "check"), ("agents",), ("precision", "show", "se_darwin"), ("train", "se_darwin")],
)
def test_a_state_folder_that_is_a_file_is_one_line_for_every_command(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """GENESIS_FP16_STATE_DIR naming a file: exit 2 and one line naming it, no traceback."""
    (tmp_path / "state").write_text("not a folder")
    done = cli(tmp_path, *command, GENESIS_FP16_STATE_DIR=str(tmp_path / "state"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "GENESIS_FP16_STATE_DIR" in lines[0] and "not a folder" in lines[0]


@pytest.mark.parametrize("command", [("serve",), ("config", "check")])
def test_a_missing_env_file_blames_what_named_it(tmp_path: Path, command: tuple[str, ...]) -> None:
    """`--env-file nope.env` names the flag; GENESIS_FP16_ENV_FILE=nope.env names the
    variable (the flag was blamed on the variable nobody had set)."""
    flag = cli(tmp_path, *command, "--env-file", "nope.env")
    assert flag.returncode == 2
    (line,) = flag.stderr.strip().splitlines()
    assert line.startswith("genesis-fp16: error: ")
    assert line.endswith(": --env-file: env file 'nope.env' does not exist") or line.endswith(
        "error: --env-file: env file 'nope.env' does not exist"
    )
    variable = cli(tmp_path, *command, GENESIS_FP16_ENV_FILE="nope.env")
    assert variable.returncode == 2
    assert "GENESIS_FP16_ENV_FILE: env file 'nope.env' does not exist" in variable.stderr
    assert "--env-file" not in variable.stderr
