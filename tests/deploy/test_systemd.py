"""deploy/systemd/genesis-fp16.service, checked by systemd-analyze itself.

The security threshold: overall exposure <= 2.0 on systemd-analyze's 0-10 scale (lower is
safer; systemd calls anything below 2.0 or so "OK"). The unit scores 1.2 on systemd 252:
what remains is network access (the metrics port), device access (the GPU) and writable
executable memory (torch's JIT kernels), each explained in the unit.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "genesis-fp16.service"
MAX_EXPOSURE = 2.0
OVERALL = re.compile(r"Overall exposure level for \S+: (\d+(?:\.\d+)?) (\S+)")


def _settings(text: str) -> dict[str, list[str]]:
    """Every Key=value of the unit, keys mapped to all their values in order."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def _installable_copy(tmp_path: Path, text: str | None = None) -> Path:
    """A copy of the unit whose ExecStart binary exists: a real executable made here."""
    binary = tmp_path / "bin" / "genesis-fp16"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    source = UNIT.read_text() if text is None else text
    installed = "ExecStart=/opt/genesis-fp16/bin/genesis-fp16 "
    assert installed in source
    rewritten = source.replace(installed, f"ExecStart={binary} ")
    copy = tmp_path / UNIT.name
    copy.write_text(rewritten)
    return copy


def _verify(tool: str, unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool, "verify", "--recursive-errors=yes", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unit_verifies_without_errors_or_warnings(systemd_analyze: str, tmp_path: Path) -> None:
    """systemd-analyze verify accepts the unit and prints nothing (no warning either)."""
    result = _verify(systemd_analyze, _installable_copy(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (result.stdout + result.stderr).strip() == ""


def test_verify_catches_a_broken_unit(systemd_analyze: str, tmp_path: Path) -> None:
    """The same check rejects a copy with a misspelt Type=, so it can fail."""
    broken = UNIT.read_text().replace("Type=notify", "Type=notfy")
    result = _verify(systemd_analyze, _installable_copy(tmp_path, broken))
    assert result.returncode != 0
    assert "notfy" in result.stderr


def test_security_exposure_is_within_threshold(systemd_analyze: str, tmp_path: Path) -> None:
    """systemd-analyze security --offline rates the unit at or below the stated threshold."""
    result = subprocess.run(
        [
            systemd_analyze,
            "security",
            "--offline=true",
            f"--threshold={int(MAX_EXPOSURE * 10)}",
            "--no-pager",
            str(_installable_copy(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = OVERALL.search(result.stdout)
    assert match, result.stdout + result.stderr
    exposure = float(match.group(1))
    assert exposure <= MAX_EXPOSURE, result.stdout
    assert result.returncode == 0, result.stdout + result.stderr


def test_unit_has_the_service_contract() -> None:
    """Type=notify + watchdog, restart, SIGHUP reload, state dir, stop > 30 s, open files."""
    settings = _settings(UNIT.read_text())
    assert settings["Type"] == ["notify"]
    assert int(settings["WatchdogSec"][0]) > 0
    assert settings["Restart"] == ["on-failure"]
    assert settings["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert settings["StateDirectory"] == ["genesis-fp16"]
    assert "GENESIS_FP16_STATE_DIR=%S/genesis-fp16" in settings["Environment"]
    # The daemon's own shutdown bound defaults to 30 s; systemd must wait longer.
    assert int(settings["TimeoutStopSec"][0]) > 30
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "DynamicUser": "yes",
    }.items():
        assert settings[key] == [value], key
    assert "AF_UNIX" in settings["RestrictAddressFamilies"][0].split()
    # systemd's default soft limit (1,024) let idle scrapers starve training of files.
    assert int(settings["LimitNOFILE"][0]) >= 16384


def test_reloadable_env_file_is_not_exported_by_systemd() -> None:
    """The .env the daemon re-reads on reload is not also an EnvironmentFile=.

    The daemon's settings let environment variables win over the file, so a file that
    systemd exported at start would shadow later edits and `systemctl reload` would keep
    the old ENABLE_FP16_TRAINING.
    """
    settings = _settings(UNIT.read_text())
    env_file = next(
        value.split("=", 1)[1]
        for value in settings["Environment"]
        if value.startswith("GENESIS_FP16_ENV_FILE=")
    )
    exported = [value.lstrip("-") for value in settings.get("EnvironmentFile", [])]
    assert exported, "an EnvironmentFile= for start-up-only variables is expected"
    assert env_file not in exported


@pytest.mark.parametrize("key", ["DevicePolicy", "DeviceAllow"])
def test_gpu_device_access_is_an_explicit_allow_list(key: str) -> None:
    """GPU access is granted by name (char-nvidia*), with every other device closed."""
    settings = _settings(UNIT.read_text())
    expected = {"DevicePolicy": "closed", "DeviceAllow": "char-nvidia* rw"}[key]
    assert expected in settings[key]


def test_daemon_settings_let_the_environment_win_over_the_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The precedence that makes EnvironmentFile= unfit for the reloadable .env is real."""
    from genesis_fp16.config.settings import load_settings

    env_file = tmp_path / "genesis-fp16.env"
    env_file.write_text("ENABLE_FP16_TRAINING=false\n")
    monkeypatch.setenv("ENABLE_FP16_TRAINING", "true")
    assert load_settings(env_file).enable_fp16_training is True
    monkeypatch.delenv("ENABLE_FP16_TRAINING")
    assert load_settings(env_file).enable_fp16_training is False


def _documented_drop_in() -> tuple[str, str]:
    """The scraper drop-in that the unit's comment documents: its file name and text."""
    lines = UNIT.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith(".service.d/scraper.conf"))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("#     "):
            break
        body.append(line.removeprefix("#     "))
    return Path(lines[start].split()[-1]).name, "\n".join(body) + "\n"


def _drop_in_problems(tool: str, tmp_path: Path, drop_in: str) -> list[str]:
    """Install the unit with ``drop_in`` beside it: verify, and keep deny-all plus localhost."""
    unit = _installable_copy(tmp_path)
    name, _ = _documented_drop_in()
    folder = unit.parent / f"{unit.name}.d"
    folder.mkdir()
    (folder / name).write_text(drop_in)
    problems = []
    result = _verify(tool, unit)  # verify reads <unit>.d/ beside the unit: drop-ins count
    if result.returncode != 0 or (result.stdout + result.stderr).strip():
        problems.append(f"verify: {result.stdout}{result.stderr}")
    merged = _settings(UNIT.read_text() + "\n" + drop_in)
    allowed = merged.get("IPAddressAllow", [])
    if merged.get("IPAddressDeny") != ["any"]:
        problems.append("the drop-in changes IPAddressDeny=any")
    if "" in allowed or allowed[:1] != ["localhost"] or len(allowed) < 2:
        problems.append("the drop-in does not add a scraper to localhost")
    return problems


def test_the_documented_scraper_drop_in_admits_it_and_keeps_the_rest_denied(
    systemd_analyze: str, tmp_path: Path
) -> None:
    """The unit says how to admit a remote scraper; that drop-in verifies and only adds it."""
    _, drop_in = _documented_drop_in()
    assert drop_in.startswith("[Service]\nIPAddressAllow=")
    assert "GENESIS_FP16_METRICS_ADDR=0.0.0.0" in UNIT.read_text()  # the bind, beside it
    assert _drop_in_problems(systemd_analyze, tmp_path, drop_in) == []


@pytest.mark.parametrize(
    ("drop_in", "problem"),
    [
        ("[Service]\nIPAddressAllow=prometheus.example\n", "verify"),
        ("[Service]\nIPAddressAllow=\nIPAddressAllow=192.0.2.10/32\n", "localhost"),
        ("[Service]\nIPAddressDeny=\n", "IPAddressDeny"),
    ],
)
def test_the_drop_in_check_catches_a_bad_one(
    systemd_analyze: str, tmp_path: Path, drop_in: str, problem: str
) -> None:
    """A misspelt address, a reset allow list or a lifted deny is caught, so the check can fail."""
    problems = _drop_in_problems(systemd_analyze, tmp_path, drop_in)
    assert any(problem in p for p in problems), problems
