"""`genesis-fp16 events list|redeliver` and the events settings: docs/events.md's settings
load, bad ones are one line, a redelivery says who took it and refuses bad ids."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from cli_fork import run_cli
from daemon_harness import daemon_env
from webhook_receiver import Receiver

from genesis_fp16.config.settings import SettingsError, load_settings
from genesis_fp16_infrastructure.agent_folder import outbox

DOCS = Path(__file__).resolve().parents[3] / "docs" / "events.md"
SECRET = "redeliver-test-secret"


def _cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        [*args],
        cwd=cwd,
        env=daemon_env({"GENESIS_FP16_STATE_DIR": str(cwd / "state"), **env}, fixtures=False),
        timeout=120,
    )


def test_the_docs_settings_load_and_bad_ones_are_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/events.md's two lines give two receivers and a redacted secret; an ftp URL,
    or URLs without a secret, are refused naming the variable."""
    lines = re.findall(r"^(GENESIS_FP16_EVENTS_\w+)=(\S+)$", DOCS.read_text(), re.MULTILINE)
    assert [name for name, _ in lines] == ["GENESIS_FP16_EVENTS_URLS", "GENESIS_FP16_EVENTS_SECRET"]
    monkeypatch.chdir(tmp_path)
    for name, value in lines:
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.events_urls is not None and len(settings.events_urls) == 2
    assert settings.model_dump(mode="json")["events_secret"] == "**********"
    monkeypatch.setenv("GENESIS_FP16_EVENTS_URLS", "ftp://example.com/x")
    with pytest.raises(SettingsError, match=r"GENESIS_FP16_EVENTS_URLS: 'ftp://example\.com/x'"):
        load_settings()
    monkeypatch.setenv("GENESIS_FP16_EVENTS_URLS", "http://127.0.0.1:1/x")
    monkeypatch.delenv("GENESIS_FP16_EVENTS_SECRET")
    with pytest.raises(SettingsError, match="GENESIS_FP16_EVENTS_SECRET: required"):
        load_settings()


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        (
            "GENESIS_FP16_EVENTS_SECRET",
            "   ",
            "GENESIS_FP16_EVENTS_SECRET: is empty or all whitespace",
        ),
        ("GENESIS_FP16_EVENTS_SECRET", "s3cret-15-chars", "has 15 characters, fewer than 16"),
        (
            "GENESIS_FP16_EVENTS_URLS",
            "http://hooks:hunter2-password@127.0.0.1:1/x",
            "'http://***@127.0.0.1:1/x' carries credentials",
        ),
        ("GENESIS_FP16_EVENTS_URLS", "http://hooks@127.0.0.1:1/x", "carries credentials"),
    ],
    ids=["whitespace-secret", "short-secret", "password-url", "user-url"],
)
def test_a_weak_secret_or_a_url_with_credentials_is_refused_in_one_line(
    tmp_path: Path, name: str, value: str, said: str
) -> None:
    """`config check` (start-up's validation) refuses a secret shorter than 16 characters
    or all whitespace, and a receiver URL with credentials, in one line that shows
    neither the secret nor the password; exit 2."""
    env = {"GENESIS_FP16_EVENTS_URLS": "http://127.0.0.1:1/x", "GENESIS_FP16_EVENTS_SECRET": SECRET}
    refused = _cli(tmp_path, "config", "check", **{**env, name: value})
    assert refused.returncode == 2, refused.stdout
    (line,) = refused.stderr.strip().splitlines()
    assert said in line and name in line
    assert "hunter2" not in refused.stderr + refused.stdout
    if name.endswith("SECRET") and value.strip():
        assert value not in refused.stderr + refused.stdout


def test_redeliver_says_who_took_it_and_refuses_bad_ids(tmp_path: Path, receiver: Receiver) -> None:
    """A receiver down: exit 1 and the attempt logged as failed; up: exit 0, the body
    arrives under the event's id; `list --json` shows the log; a malformed id, an unknown
    one and no receiver configured are each one line, exit 2."""
    event_id = outbox.record(tmp_path / "state" / "agents" / "se_darwin", "reject", {"n": 1})
    urls = {"GENESIS_FP16_EVENTS_URLS": receiver.url, "GENESIS_FP16_EVENTS_SECRET": SECRET}
    receiver.down()
    failed = _cli(tmp_path, "events", "redeliver", event_id, **urls)
    assert failed.returncode == 1 and "delivered to 0 of 1" in failed.stdout
    receiver.up()
    done = _cli(tmp_path, "events", "redeliver", event_id, **urls)
    assert done.returncode == 0 and "delivered to 1 of 1" in done.stdout
    assert [r.event["id"] for r in receiver.received] == [event_id]
    (listed,) = json.loads(_cli(tmp_path, "events", "list", "--json").stdout)
    assert listed["status"] == "delivered"
    assert [a["status"] for a in listed["attempts"]] == ["failed", "delivered"]
    assert event_id in _cli(tmp_path, "events", "list").stdout
    for bad, env, said in (
        ("zz", urls, "not an event id"),
        ("0123456789abcdef", urls, "no event '0123456789abcdef'"),
        (event_id, {}, "no receiver configured"),
    ):
        refused = _cli(tmp_path, "events", "redeliver", bad, **env)
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr.count("\n") == 1 and said in refused.stderr


def test_a_token_in_a_receiver_url_is_shown_replaced_everywhere(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Issue 92: a receiver URL with ?token=... is delivered to with its token, and
    `config check` (text, --json, a shadowed .env line), `events redeliver --json`,
    `events list --json` and the event's file show it replaced, as a password is."""
    token = "tok-a8d3c0ffee"
    url = f"{receiver.url}?token={token}"
    event_id = outbox.record(tmp_path / "state" / "agents" / "se_darwin", "reject", {"n": 1})
    (tmp_path / ".env").write_text(f"GENESIS_FP16_EVENTS_URLS={receiver.url}?token=other-tok\n")
    env = {"GENESIS_FP16_EVENTS_URLS": url, "GENESIS_FP16_EVENTS_SECRET": SECRET}
    done = _cli(tmp_path, "events", "redeliver", event_id, "--json", **env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["receivers"] == [f"{receiver.url}?token=***"]
    assert [r.path for r in receiver.received] == [f"/hook?token={token}"]
    shown = [
        done.stdout,
        _cli(tmp_path, "events", "list", "--json", **env).stdout,
        _cli(tmp_path, "config", "check", **env).stdout,
        _cli(tmp_path, "config", "check", "--json", **env).stdout,
    ]
    assert f'GENESIS_FP16_EVENTS_URLS=["{receiver.url}?token=***"]' in shown[2]
    assert "token=***" in shown[1] and "shadowed" in shown[2]
    files = [f.read_text() for f in (tmp_path / "state").rglob("*") if f.is_file()]
    for text in [*shown, *files]:
        assert token not in text and "other-tok" not in text


def test_two_receivers_that_differ_only_in_a_token_are_refused(tmp_path: Path) -> None:
    """An event's file names receivers with their tokens replaced, so two URLs that differ
    only there are refused at start-up in one line that shows neither token."""
    urls = "http://127.0.0.1:1/x?token=first-tok,http://127.0.0.1:1/x?token=second-tok"
    env = {"GENESIS_FP16_EVENTS_URLS": urls, "GENESIS_FP16_EVENTS_SECRET": SECRET}
    refused = _cli(tmp_path, "config", "check", **env)
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert "differ only in a secret" in line and "GENESIS_FP16_EVENTS_URLS" in line
    assert "-tok" not in refused.stderr + refused.stdout
