"""A refused reload on the real daemon: visible (page, /status.json, `status`, /healthz)
and harmless (the read-only commands go on with the file's other lines)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import (
    MODULE_COMMAND,
    DaemonFactory,
    DaemonProcess,
    daemon_env,
    start_daemon,
)

from genesis_fp16.config.settings_sources import LOG_VALUE_BOUND

RELOADS = "genesis_fp16_config_reloads_total"
TYPO = "ENABLE_FP16_TRAINIG=false"  # the rollback switch, misspelt


def cli(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """A command beside the daemon: its folder (.env, ./state) and its port."""
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=daemon.workdir,
        env=daemon_env({"GENESIS_FP16_METRICS_PORT": str(daemon.port)}, fixtures=False),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _reload(daemon: DaemonProcess, text: str, outcome: str, count: int) -> None:
    (daemon.workdir / ".env").write_text(text)
    daemon.signal(signal.SIGHUP)
    daemon.wait_for(lambda: daemon.sample(RELOADS, outcome=outcome) == count, f"{outcome} reload")


def _daemon_part(daemon: DaemonProcess) -> dict[str, object]:
    status, body = daemon.get("/status.json")
    assert status == 200, body
    part: dict[str, object] = json.loads(body)["daemon"]
    return part


def test_a_refused_env_file_is_shown_until_a_reload_succeeds(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A typo in .env: /healthz stays 200 and says since when and why, as do the page,
    /status.json and `status`; a second bad edit keeps the time and shows the new
    error; a good file clears it everywhere."""
    (tmp_path / ".env").write_text("GENESIS_FP16_SEED=3\n")
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin,rlhf_ppo",
            "GENESIS_FP16_RUN_AT_START": "false",
            "GENESIS_FP16_WATCH_ENV_FILE": "false",  # SIGHUP alone reloads: no race
        },
        fixtures=False,
    )
    _reload(daemon, f"GENESIS_FP16_SEED=3\n{TYPO}\n", "failure", 1)
    code, health = daemon.get("/healthz")
    assert code == 200 and health.startswith("ok: scheduler heartbeat is fresh; reload refused ")
    assert "did you mean ENABLE_FP16_TRAINING?" in health
    first = _daemon_part(daemon)
    assert isinstance(first["reload_refused_at"], float)
    assert "ENABLE_FP16_TRAINIG" in str(first["reload_error"])
    page = daemon.get("/")[1]
    assert '<th scope="row">reload</th><td>refused since ' in page
    shown = cli(daemon, "status")
    assert shown.returncode == 0, shown.stderr
    assert "  reload:" in shown.stdout and "refused since" in shown.stdout

    _reload(daemon, "GENESIS_FP16_SEED=many\n", "failure", 2)
    second = _daemon_part(daemon)
    assert second["reload_refused_at"] == first["reload_refused_at"]
    assert "GENESIS_FP16_SEED" in str(second["reload_error"])

    _reload(daemon, "GENESIS_FP16_SEED=4\n", "success", 1)
    assert daemon.get("/healthz") == (200, "ok: scheduler heartbeat is fresh\n")
    assert _daemon_part(daemon)["reload_refused_at"] is None
    assert "refused since" not in daemon.get("/")[1]


def test_the_read_only_commands_work_on_a_refused_env_file(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """`status`, `agents` and `model list` exit 0 on a .env the daemon refuses, each with
    one line on stderr naming the file, the error and what they left out; `config check`
    exits 2 with the errors, then the settings those commands used."""
    (tmp_path / ".env").write_text("GENESIS_FP16_SEED=3\n")
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin,rlhf_ppo",
            "GENESIS_FP16_RUN_AT_START": "false",
            "GENESIS_FP16_WATCH_ENV_FILE": "false",
        },
        fixtures=False,
    )
    _reload(daemon, f"GENESIS_FP16_SEED=3\n{TYPO}\n", "failure", 1)
    warning = f"genesis-fp16: warning: {(tmp_path / '.env').resolve()} is refused ("
    for words in (("status", "--json"), ("agents",), ("model", "list", "se_darwin")):
        done = cli(daemon, *words)
        assert done.returncode == 0, (words, done.stderr)
        (line,) = done.stderr.splitlines()
        assert line.startswith(warning) and line.endswith("(left out: ENABLE_FP16_TRAINIG)")
    report = json.loads(cli(daemon, "status", "--json").stdout)
    assert report["daemon"]["pid"] == daemon.process.pid  # the daemon answered, not the folder
    assert report["daemon"]["reload_error"] is not None
    checked = cli(daemon, "config", "check")
    assert checked.returncode == 2
    assert "did you mean ENABLE_FP16_TRAINING?" in checked.stderr.splitlines()[0]
    assert "(refused)" in checked.stdout.splitlines()[0]
    assert "GENESIS_FP16_SEED=3  # .env" in checked.stdout.splitlines()


FP32 = {"agent": "se_darwin", "precision": "fp32"}
ROLLBACK = "ENABLE_FP16_TRAINING=false\nGENESIS_FP16_SEED=3\n"


def _trick(daemon: DaemonProcess, count: int, why: str) -> None:
    """After one file trick and a SIGHUP: refused like a typo, and said where a typo is."""
    daemon.signal(signal.SIGHUP)
    daemon.wait_for(lambda: daemon.sample(RELOADS, outcome="failure") == count, why)
    code, health = daemon.get("/healthz")
    assert code == 200 and "reload refused since" in health and why in health, health
    assert why in str(_daemon_part(daemon)["reload_error"])
    assert "refused since" in daemon.get("/")[1]
    assert daemon.sample("genesis_fp16_precision", **FP32) == 1  # the rollback holds
    assert not daemon.sample(RELOADS, outcome="success")
    failed = daemon.events("config reload failed, keeping the running configuration")
    assert len(failed) == count and why in failed[-1]["error"]


@pytest.mark.parametrize("named", [False, True], ids=[".env", "--env-file"])
def test_no_file_trick_drops_the_rollback_switch(tmp_path: Path, named: bool) -> None:
    """With ENABLE_FP16_TRAINING=false in force, the env file turned into a link to
    /dev/zero, deleted, made a folder or grown to 1 MB is refused like a typo: fp32
    stays, /healthz, /status.json, the page and the log say why (no line echoes a
    huge value); an empty file (the defaults) reloads, and a valid file changes them."""
    folder = tmp_path / "etc"
    folder.mkdir()
    env_file = folder / "genesis.env" if named else tmp_path / ".env"
    env_file.write_text(ROLLBACK)
    command = (*MODULE_COMMAND, "--env-file", str(env_file)) if named else MODULE_COMMAND
    settings = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin",
        "GENESIS_FP16_RUN_AT_START": "false",
        "GENESIS_FP16_WATCH_ENV_FILE": "false",  # SIGHUP alone reloads: no race
    }
    daemon = start_daemon(tmp_path, settings, fixtures=False, command=command)
    try:
        daemon.wait_for(lambda: daemon.sample("genesis_fp16_precision", **FP32) == 1, "fp32")
        env_file.unlink()
        env_file.symlink_to("/dev/zero")
        _trick(daemon, 1, "is not a regular file")
        env_file.unlink()
        _trick(daemon, 2, "was deleted")
        env_file.mkdir()
        _trick(daemon, 3, "is not a regular file")
        env_file.rmdir()
        env_file.write_text(ROLLBACK + "GENESIS_FP16_LOG_LEVEL=" + "x" * 1_048_576 + "\n")
        _trick(daemon, 4, "bytes; at most")
        env_file.write_text("GENESIS_FP16_LOG_LEVEL=" + "x" * 200_000 + "\n")  # under the bound
        _trick(daemon, 5, "GENESIS_FP16_LOG_LEVEL")
        assert max(map(len, daemon.log_path.read_text().splitlines())) < 5_000
        env_file.write_text("")  # the operator asks for the defaults in so many words
        daemon.signal(signal.SIGHUP)
        daemon.wait_for(lambda: daemon.sample(RELOADS, outcome="success") == 1, "the defaults")
        assert daemon.get("/healthz") == (200, "ok: scheduler heartbeat is fresh\n")
        env_file.write_text("ENABLE_FP16_TRAINING=true\n")  # a valid file changes settings
        daemon.signal(signal.SIGHUP)
        daemon.wait_for(lambda: daemon.sample("genesis_fp16_precision", **FP32) == 0, "fp16")
    finally:
        daemon.stop()


def test_a_huge_value_is_cut_in_a_command_error(tmp_path: Path) -> None:
    """`precision reset` on a .env with a 200,000-character bad value exits 2 with one
    short line, not the value whole; on a .env that links to /dev/zero it exits 2 at once."""
    env_file = tmp_path / ".env"
    env_file.write_text("GENESIS_FP16_SEED=" + "x" * 200_000 + "\n")

    def reset() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "genesis_fp16", "precision", "reset", "se_darwin"],
            cwd=tmp_path,
            env=daemon_env({}, fixtures=False),
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = reset()
    assert done.returncode == 2 and len(done.stderr) < 1_000, done.stderr[:2_000]
    assert "GENESIS_FP16_SEED" in done.stderr and "more characters)" in done.stderr
    env_file.unlink()
    env_file.symlink_to("/dev/zero")
    done = reset()
    assert done.returncode == 2 and "is not a regular file" in done.stderr, done.stderr


def test_a_file_of_a_thousand_bad_lines_is_cut_everywhere(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A .env of 1,000 bad lines, 220 KB (under the size refused at once): the daemon's
    refusal line, `precision reset`'s error and `status`'s warning each stay within
    LOG_VALUE_BOUND and say how much was cut, where each echoed all 290 KB; /healthz too."""
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin",
            "GENESIS_FP16_RUN_AT_START": "false",
            "GENESIS_FP16_WATCH_ENV_FILE": "false",
        },
        fixtures=False,
    )
    bad = "".join(f"GENESIS_FP16_BAD{n}{'X' * 200}=1\n" for n in range(1_000))
    _reload(daemon, bad, "failure", 1)
    (failed,) = daemon.events("config reload failed, keeping the running configuration")
    assert len(json.dumps(failed)) < 2 * LOG_VALUE_BOUND and "more characters)" in failed["error"]
    assert max(map(len, daemon.log_path.read_text().splitlines())) < 2 * LOG_VALUE_BOUND
    code, health = daemon.get("/healthz")
    assert code == 200 and len(health) < LOG_VALUE_BOUND and "GENESIS_FP16…" in health
    reset = cli(daemon, "precision", "reset", "se_darwin")
    assert reset.returncode == 2 and "GENESIS_FP16_BAD0" in reset.stderr
    assert len(reset.stderr) < LOG_VALUE_BOUND and "more characters)" in reset.stderr
    status = cli(daemon, "status")
    assert status.returncode == 0 and "is refused (GENESIS_FP16_BAD0" in status.stderr
    assert len(status.stderr) < LOG_VALUE_BOUND + len(str(tmp_path)) + 100, status.stderr[:2_000]
    assert "more characters)" in status.stderr


def test_the_fp32_rollback_switch_is_exported_and_follows_each_reload(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """genesis_fp16_fp32_rollback is 0 without the switch, 1 once ENABLE_FP16_TRAINING=false
    is reloaded, stays 1 through a refused reload, and is 0 again when the line goes."""
    (tmp_path / ".env").write_text("GENESIS_FP16_SEED=3\n")
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin",
            "GENESIS_FP16_RUN_AT_START": "false",
            "GENESIS_FP16_WATCH_ENV_FILE": "false",
        },
        fixtures=False,
    )
    assert daemon.sample("genesis_fp16_fp32_rollback") == 0
    _reload(daemon, ROLLBACK, "success", 1)
    assert daemon.sample("genesis_fp16_fp32_rollback") == 1
    assert daemon.sample("genesis_fp16_precision", **FP32) == 1
    _reload(daemon, f"{ROLLBACK}{TYPO}\n", "failure", 1)
    assert daemon.sample("genesis_fp16_fp32_rollback") == 1  # the running settings' switch
    _reload(daemon, "GENESIS_FP16_SEED=3\n", "success", 2)
    assert daemon.sample("genesis_fp16_fp32_rollback") == 0
