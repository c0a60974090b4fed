"""`genesis-fp16 agents` and `genesis-fp16 config check` as real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from daemon_harness import daemon_env


def cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=tmp_path,
        env=daemon_env(env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_agents_json_lists_every_plugin_and_state(tmp_path: Path) -> None:
    """Every entry point is listed; the allowlist shows as not_allowed, failures with errors."""
    result = cli(
        tmp_path,
        "agents",
        "--json",
        GENESIS_FP16_PLUGIN_ALLOWLIST="fixture_good,fixture_broken,fixture_wrong_api",
    )
    assert result.returncode == 0, result.stderr
    states = {row["name"]: row for row in json.loads(result.stdout)}
    assert states["fixture_good"]["state"] == "loaded"
    assert states["fixture_broken"]["state"] == "failed"
    assert states["fixture_wrong_api"]["state"] == "wrong_api"
    assert states["fixture_raising"]["state"] == "not_allowed"
    assert states["se_darwin"]["state"] == "not_allowed"


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
