"""The read-only commands' settings when the .env file is refused: its other lines, said."""

from __future__ import annotations

from pathlib import Path

import pytest

from genesis_fp16.config.settings import SettingsError
from genesis_fp16.config.settings_reading import load_settings_for_reading

pytestmark = pytest.mark.usefixtures("clean_env")  # conftest.py: an empty working folder


def test_a_good_file_is_read_as_it_is() -> None:
    """A file that loads: its settings, nothing refused, no note to print."""
    Path(".env").write_text("GENESIS_FP16_SEED=7\n")
    read = load_settings_for_reading()
    assert read.settings.seed == 7
    assert (read.refused, read.note, read.left_out) == (None, None, ())


def test_a_typo_and_a_bad_value_leave_out_those_lines_only() -> None:
    """The misspelt switch and the bad schedule are left out; the state folder and the
    port written beside them are kept, and the note names the file, the errors and both."""
    Path(".env").write_text(
        "GENESIS_FP16_STATE_DIR=elsewhere\n"
        "ENABLE_FP16_TRAINIG=false\n"
        "GENESIS_FP16_SCHEDULE=every hour\n"
        'GENESIS_FP16_METRICS_PORT="9999"  # quoted, with a comment\n'
    )
    read = load_settings_for_reading()
    assert read.settings.state_dir == Path("elsewhere")
    assert read.settings.metrics_port == 9999
    assert read.settings.schedule == "3600"  # the default: the file's value is refused
    assert read.left_out == ("ENABLE_FP16_TRAINIG", "GENESIS_FP16_SCHEDULE")
    assert read.note is not None and "\n" not in read.note
    assert read.note.startswith(f"{Path('.env').resolve()} is refused (")
    assert "did you mean ENABLE_FP16_TRAINING?" in read.note
    assert "left out: ENABLE_FP16_TRAINIG, GENESIS_FP16_SCHEDULE" in read.note
    assert read.sources.env_file == Path(".env").resolve()  # not the copy it loaded
    assert read.sources.source("GENESIS_FP16_STATE_DIR") == ".env"


def test_an_unparsable_line_costs_only_itself() -> None:
    """A line that is not NAME=value refuses the whole file for the daemon; here the
    file's other lines still count."""
    Path(".env").write_text("GENESIS_FP16_SEED=5\nthis is not a setting line\n")
    read = load_settings_for_reading()
    assert read.settings.seed == 5
    assert read.refused is not None and "expected NAME=value" in read.refused
    assert not read.whole_file


def test_a_bad_agent_inside_a_json_object_leaves_out_the_object() -> None:
    """An error inside GENESIS_FP16_AGENTS's JSON names a nested variable; the object
    that holds it is the line left out."""
    Path(".env").write_text(
        'GENESIS_FP16_AGENTS={"se_darwin": {"steps": 0}}\nGENESIS_FP16_SEED=2\n'
    )
    read = load_settings_for_reading()
    assert read.left_out == ("GENESIS_FP16_AGENTS",)
    assert read.settings.agents == {} and read.settings.seed == 2


def test_a_pair_refused_together_is_left_out_in_rounds(tmp_path: Path) -> None:
    """A TLS key without its certificate: the errors name one then the other; both go."""
    key = tmp_path / "key.pem"
    key.write_text("not used")
    Path(".env").write_text(f"GENESIS_FP16_TLS_KEY_FILE={key}\nGENESIS_FP16_SEED=4\n")
    read = load_settings_for_reading()
    assert "GENESIS_FP16_TLS_KEY_FILE" in read.left_out
    assert read.settings.tls_key_file is None and read.settings.seed == 4


def test_a_file_that_is_not_utf8_is_left_out_whole() -> None:
    """No line of a file that is not UTF-8 can be trusted: the environment and defaults."""
    Path(".env").write_bytes(b"GENESIS_FP16_SEED=\xff\n")
    read = load_settings_for_reading()
    assert read.whole_file and read.settings.seed == 0
    assert read.note is not None and "using the environment and the defaults only" in read.note


def test_a_bad_environment_is_still_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """GENESIS_FP16_LOG_INTERVAL=0 in the environment is not the file's fault: the first
    error is raised, whatever the file holds."""
    Path(".env").write_text("GENESIS_FP16_SEED=1\n")
    monkeypatch.setenv("GENESIS_FP16_LOG_INTERVAL", "0")
    with pytest.raises(SettingsError, match="GENESIS_FP16_LOG_INTERVAL"):
        load_settings_for_reading()


def test_a_named_file_that_is_missing_is_still_an_error() -> None:
    """--env-file naming no file: the error it always was, no settings made up."""
    with pytest.raises(SettingsError, match=r"--env-file: env file 'nope\.env' does not exist"):
        load_settings_for_reading("nope.env")


def test_a_refused_allowlist_keeps_only_its_valid_names() -> None:
    """A bad name in the allowlist leaves its line out, yet the plugins allowed are that
    line's valid names, not every installed plugin; the note says so."""
    Path(".env").write_text("GENESIS_FP16_PLUGIN_ALLOWLIST=se_darwin,../evil\n")
    read = load_settings_for_reading()
    assert read.left_out == ("GENESIS_FP16_PLUGIN_ALLOWLIST",)
    assert read.settings.plugin_allowlist == ["se_darwin"]
    assert read.allowed_only == ("se_darwin",)
    assert read.note is not None and read.note.endswith("valid names only (se_darwin)")


def test_an_allowlist_that_cannot_be_read_allows_no_plugin() -> None:
    """An allowlist on a line that is not NAME=value, or in a file that is not UTF-8:
    no plugin is allowed, rather than all of them."""
    Path(".env").write_text("GENESIS_FP16_PLUGIN_ALLOWLIST se_darwin\nGENESIS_FP16_SEED=2\n")
    assert load_settings_for_reading().settings.plugin_allowlist == []
    Path(".env").write_bytes(b"GENESIS_FP16_PLUGIN_ALLOWLIST=se_darwin\nGENESIS_FP16_SEED=\xff\n")
    read = load_settings_for_reading()
    assert read.whole_file and read.settings.plugin_allowlist == []
    assert read.note is not None and read.note.endswith("valid names only (none)")


def test_an_allowlist_is_narrowed_only_when_the_file_had_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refused file without an allowlist keeps the default (all allowed), as does one
    whose allowlist line is used; the environment's allowlist wins over a refused line."""
    Path(".env").write_text("ENABLE_FP16_TRAINIG=false\n")
    assert load_settings_for_reading().settings.plugin_allowlist is None
    Path(".env").write_text("GENESIS_FP16_PLUGIN_ALLOWLIST=rlhf_ppo\nENABLE_FP16_TRAINIG=false\n")
    read = load_settings_for_reading()
    assert read.settings.plugin_allowlist == ["rlhf_ppo"] and read.allowed_only is None
    Path(".env").write_bytes(b"GENESIS_FP16_PLUGIN_ALLOWLIST=rlhf_ppo\nGENESIS_FP16_SEED=\xff\n")
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_ALLOWLIST", "se_darwin")
    read = load_settings_for_reading()
    assert read.whole_file and read.allowed_only is None
    assert read.settings.plugin_allowlist == ["se_darwin"]
