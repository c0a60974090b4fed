"""A refused reload on the real daemon: visible (page, /status.json, `status`, /healthz)
and harmless (the read-only commands go on with the file's other lines)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from daemon_harness import DaemonFactory, DaemonProcess, daemon_env

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
