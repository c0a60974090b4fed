"""Settings: defaults, .env and environment, precedence of the precision, clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from genesis_fp16.config import settings as settings_module
from genesis_fp16.config.agent_settings import COMPILE_CHOICES, CUDA_GRAPH_CHOICES
from genesis_fp16.config.settings import (
    SettingsError,
    default_keep_mib,
    default_read_workers,
    default_run_memory_limit,
    load_settings,
    parse_schedule,
    precision_switched,
    requested_precision,
)
from genesis_fp16_infrastructure.machine_memory import machine_memory_bytes
from genesis_fp16_infrastructure.training.precision.execution_names import (
    COMPILE_REQUESTS,
    CUDA_GRAPH_REQUESTS,
)

pytestmark = pytest.mark.usefixtures("clean_env")  # conftest.py


def test_defaults_without_any_configuration() -> None:
    """No env, no .env: ./state, 127.0.0.1:9464, auto log format, 30 s shutdown."""
    settings = load_settings()
    assert settings.state_dir == Path("state")
    assert (settings.metrics_addr, settings.metrics_port) == ("127.0.0.1", 9464)
    assert settings.log_format == "auto"
    assert settings.shutdown_timeout_seconds == 30
    assert settings.enable_fp16_training is None
    assert settings.plugin_allowlist is None


def test_env_file_is_read_and_environment_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The .env in the cwd is read; an environment variable overrides the same key."""
    (tmp_path / ".env").write_text(
        "GENESIS_FP16_STATE_DIR=/var/lib/x\nGENESIS_FP16_METRICS_PORT=9000\nENABLE_FP16_TRAINING=true\n"
    )
    monkeypatch.setenv("GENESIS_FP16_METRICS_PORT", "9100")
    settings = load_settings()
    assert settings.state_dir == Path("/var/lib/x")
    assert settings.metrics_port == 9100
    assert settings.enable_fp16_training is True


def test_env_file_variable_and_missing_named_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GENESIS_FP16_ENV_FILE selects the file; a named file that is missing is an error."""
    other = tmp_path / "other.env"
    other.write_text("GENESIS_FP16_LOG_FORMAT=console\n")
    monkeypatch.setenv("GENESIS_FP16_ENV_FILE", str(other))
    assert load_settings().log_format == "console"
    monkeypatch.setenv("GENESIS_FP16_ENV_FILE", str(tmp_path / "nope.env"))
    with pytest.raises(SettingsError, match="GENESIS_FP16_ENV_FILE"):
        load_settings()


def test_per_agent_settings_nested_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nested GENESIS_FP16_AGENTS__NAME__FIELD variables and a JSON object both work."""
    monkeypatch.setenv("GENESIS_FP16_AGENTS__SE_DARWIN__SCHEDULE", "*/15 * * * *")
    monkeypatch.setenv("GENESIS_FP16_AGENTS__SE_DARWIN__STEPS", "25")
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_ALLOWLIST", "se_darwin, rlhf_ppo")
    settings = load_settings()
    assert settings.agent("se_darwin").schedule == "*/15 * * * *"
    assert settings.agent("se_darwin").own.steps == 25
    assert settings.agent("rlhf_ppo").schedule == "3600"
    assert settings.plugin_allowlist == ["se_darwin", "rlhf_ppo"]
    monkeypatch.delenv("GENESIS_FP16_AGENTS__SE_DARWIN__SCHEDULE")
    monkeypatch.delenv("GENESIS_FP16_AGENTS__SE_DARWIN__STEPS")
    monkeypatch.setenv(
        "GENESIS_FP16_AGENTS", '{"se_darwin": {"enabled": false, "precision": "bf16"}}'
    )
    settings = load_settings()
    assert not settings.agent("se_darwin").own.enabled
    assert settings.agent("se_darwin").own.precision == "bf16"


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("GENESIS_FP16_METRICS_PORT", "70000", "less than or equal to 65535"),
        ("GENESIS_FP16_LOG_FORMAT", "xml", "'auto', 'json' or 'console'"),
        ("ENABLE_FP16_TRAINING", "maybe", "valid boolean"),
        ("GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS", "0", "greater than 0"),
        ("GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS", "0", "greater than 0"),
        ("GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS", "241", "less than or equal to 240"),
        ("GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS", "soon", "valid number"),
        ("GENESIS_FP16_DEVICE", "tpu", "not one of auto, cpu"),
        ("GENESIS_FP16_CUDA_GRAPH", "yes", "'auto', 'on' or 'off'"),
        ("GENESIS_FP16_AGENTS__SE_DARWIN__CUDA_GRAPH", "always", "'auto', 'on' or 'off'"),
        ("GENESIS_FP16_COMPILE", "auto", "'off' or 'on'"),
        ("GENESIS_FP16_AGENTS__SE_DARWIN__COMPILE", "yes", "'off' or 'on'"),
        ("GENESIS_FP16_SCHEDULE", "every day", "neither an interval"),
        ("GENESIS_FP16_AGENTS__SE_DARWIN__SCHEDULE", "-5", "must be > 0"),
        ("GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION", "fp8", "'fp16'"),
        ("GENESIS_FP16_AGENTS", "{not json", "not valid JSON"),
        ("GENESIS_FP16_TLS_CERT_FILE", "/nonexistent.pem", "must be set together"),
        ("GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES", "4096", "0 (no limit) or at least"),
    ],
)
def test_invalid_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    """Each bad value gives one line that names its variable and the problem."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message
    assert expected in message
    named = "GENESIS_FP16_TLS_CERT_FILE" if "TLS" in variable else variable
    assert named in message


def test_steps_and_epochs_are_exclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent with both steps and epochs per run is refused."""
    monkeypatch.setenv("GENESIS_FP16_AGENTS__A__STEPS", "5")
    monkeypatch.setenv("GENESIS_FP16_AGENTS__A__EPOCHS", "1")
    with pytest.raises(SettingsError, match=r"GENESIS_FP16_AGENTS__A.*not both"):
        load_settings()


@pytest.mark.parametrize(
    ("env", "cli", "expected"),
    [
        ({}, None, "auto"),
        ({"ENABLE_FP16_TRAINING": "true"}, None, "fp16"),
        ({"ENABLE_FP16_TRAINING": "false"}, None, "fp32"),
        ({"GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "bf16"}, None, "bf16"),
        (
            {"ENABLE_FP16_TRAINING": "true", "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "bf16"},
            None,
            "bf16",
        ),
        (
            {"ENABLE_FP16_TRAINING": "false", "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "bf16"},
            None,
            "fp32",
        ),
        ({"ENABLE_FP16_TRAINING": "false"}, "fp16", "fp16"),
        ({"GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "bf16"}, "fp32", "fp32"),
    ],
)
def test_precision_precedence(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], cli: str | None, expected: str
) -> None:
    """CLI > ENABLE_FP16_TRAINING=false > per-agent override > ENABLE_FP16_TRAINING=true > auto;
    the guard's remembered floor applies to all but the flag and the off switch."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    precision, reason, floored = requested_precision(load_settings(), "se_darwin", cli)
    assert precision == expected
    assert reason
    assert floored == (cli is None and env.get("ENABLE_FP16_TRAINING") != "false")


def test_a_reload_switches_an_agent_only_when_its_planned_request_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another agent's override, or ENABLE_FP16_TRAINING=true under an override, leaves
    the agent's request as it was; the off switch or the guard turned off changes it."""
    monkeypatch.setenv("GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION", "bf16")
    before = load_settings()
    monkeypatch.setenv("GENESIS_FP16_AGENTS__RLHF_PPO__PRECISION", "fp32")
    monkeypatch.setenv("ENABLE_FP16_TRAINING", "true")
    assert not precision_switched(before, load_settings(), "se_darwin")
    monkeypatch.setenv("GENESIS_FP16_GUARD_ENABLED", "false")
    assert precision_switched(before, load_settings(), "se_darwin")  # no floor any more
    monkeypatch.setenv("GENESIS_FP16_GUARD_ENABLED", "true")
    monkeypatch.setenv("ENABLE_FP16_TRAINING", "false")
    assert precision_switched(before, load_settings(), "se_darwin")


def test_override_is_per_agent_and_reason_names_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """One agent's override leaves the others on auto; the reason names the variable."""
    monkeypatch.setenv("GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION", "bf16")
    settings = load_settings()
    assert requested_precision(settings, "se_darwin", None)[:2] == (
        "bf16",
        "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION=bf16",
    )
    assert requested_precision(settings, "rlhf_ppo", None)[0] == "auto"


def test_train_refuses_a_precision_flag_that_is_not_a_choice() -> None:
    """The one check of ``--precision``: train's arguments, before any setting is read."""
    from genesis_fp16.cli import UsageError, build_parser
    from genesis_fp16.commands.train_checks import check_arguments

    args = build_parser("train").parse_args(["train", "se_darwin", "--precision", "fp64"])
    with pytest.raises(UsageError, match="--precision 'fp64': choose one of auto, "):
        check_arguments(args)


def test_parse_schedule_interval_and_cron() -> None:
    """Seconds become an interval, five fields a cron line, anything else an error."""
    assert parse_schedule("90") == ("interval", 90.0)
    assert parse_schedule("0 3 * * mon") == ("cron", "0 3 * * mon")
    with pytest.raises(ValueError, match="5-field cron"):
        parse_schedule("0 3 * *")


def test_secrets_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TLS key password never appears in the resolved settings."""
    monkeypatch.setenv("GENESIS_FP16_TLS_KEY_PASSWORD", "hunter2")
    dumped = load_settings().model_dump(mode="json")
    assert dumped["tls_key_password"] == "**********"
    assert "hunter2" not in str(dumped)


def test_env_example_lists_every_setting_with_its_default(tmp_path: Path) -> None:
    """Uncommenting .env.example gives the defaults; no global or per-agent setting is missing."""
    from genesis_fp16.config.settings import AgentSettings, Settings

    example = Path(__file__).resolve().parents[3] / ".env.example"
    lines = [
        line.removeprefix("# ")
        for line in example.read_text().splitlines()
        if line.startswith(("# GENESIS_FP16_", "# ENABLE_FP16_TRAINING="))
    ]
    names = {line.split("=", 1)[0] for line in lines}
    for field in Settings.model_fields:
        variable = (
            "ENABLE_FP16_TRAINING"
            if field == "enable_fp16_training"
            else f"GENESIS_FP16_{field.upper()}"
        )
        assert variable in names, f"{variable} is missing from .env.example"
    for field in AgentSettings.model_fields:
        variable = f"GENESIS_FP16_AGENTS__SE_DARWIN__{field.upper()}"
        assert variable in names, f"{variable} is missing from .env.example"
    kept = [
        line
        for line in lines
        if not line.startswith(("GENESIS_FP16_ENV_FILE=", "GENESIS_FP16_AGENTS="))
    ]
    (tmp_path / ".env").write_text("\n".join(kept) + "\n")
    settings = load_settings()
    defaults = Settings()
    for field in Settings.model_fields:
        if field != "agents":
            assert getattr(settings, field) == getattr(defaults, field), field
    assert settings.agent("se_darwin") == defaults.agent("se_darwin")


def test_cuda_graph_setting_per_agent_and_its_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon-wide value, an agent's own, and the same choices as the library's."""
    monkeypatch.setenv("GENESIS_FP16_CUDA_GRAPH", "off")
    monkeypatch.setenv("GENESIS_FP16_AGENTS__SE_DARWIN__CUDA_GRAPH", "on")
    settings = load_settings()
    assert settings.agent("se_darwin").cuda_graph == "on"
    assert settings.agent("rlhf_ppo").cuda_graph == "off"
    assert CUDA_GRAPH_CHOICES == CUDA_GRAPH_REQUESTS


def test_compile_setting_is_off_by_default_per_agent_and_the_librarys_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """compile defaults to off; an agent's own value wins over the daemon-wide one."""
    assert load_settings().agent("se_darwin").compile == "off"
    monkeypatch.setenv("GENESIS_FP16_COMPILE", "on")
    monkeypatch.setenv("GENESIS_FP16_AGENTS__RLHF_PPO__COMPILE", "off")
    settings = load_settings()
    assert settings.agent("se_darwin").compile == "on"
    assert settings.agent("rlhf_ppo").compile == "off"
    assert COMPILE_CHOICES == COMPILE_REQUESTS


@pytest.mark.parametrize(
    ("where", "line", "suggested"),
    [
        ("env", "ENABLE_FP16_TRAINIG=false", "ENABLE_FP16_TRAINING"),
        ("file", "ENABLE_FP16_TRAINIG=false", "ENABLE_FP16_TRAINING"),
        ("env", "GENESIS_FP16_SCHEDUL=60", "GENESIS_FP16_SCHEDULE"),
        ("file", "genesis_fp16_schedul=60", "GENESIS_FP16_SCHEDULE"),
        ("file", "GENESIS_FP16_AGENTS__SE_DARWIN__SCHEDUL=60", "__SE_DARWIN__SCHEDULE"),
    ],
)
def test_unknown_names_fail_with_the_nearest_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str, line: str, suggested: str
) -> None:
    """A misspelt name, in the environment or .env, is one line: where, and 'did you mean'."""
    name, value = line.split("=")
    if where == "env":
        monkeypatch.setenv(name, value)
    else:
        (tmp_path / ".env").write_text(f"GENESIS_FP16_SEED=1\n{line}\n")
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message and len(info.value.errors) == 1, message
    assert f"{name.upper()} is not a setting; did you mean " in message
    assert suggested in message
    assert ("in the environment" if where == "env" else ".env, line 2") in message


def test_unparsable_env_file_line_is_an_error(tmp_path: Path) -> None:
    """A line that is not NAME=value (or has no '=') names the file and the line."""
    (tmp_path / ".env").write_text("GENESIS_FP16_SEED=1\nthis is not a setting\nNO_EQUALS\n")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "line 2: cannot parse 'this is not a setting'" in str(info.value)
    assert "line 3: 'NO_EQUALS' has no '='" in str(info.value)


def test_a_env_file_that_is_not_utf8_names_the_line_and_the_byte(tmp_path: Path) -> None:
    """A Latin-1 byte in .env is one error naming the file, the line and the byte (it was
    reported as "not valid JSON")."""
    (tmp_path / ".env").write_bytes(b"GENESIS_FP16_SEED=1\nENABLE_FP16_TRAINING=f\xe9lse\n")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "line 2: byte 0xe9 is not UTF-8" in str(info.value)
    assert "JSON" not in str(info.value)


def test_other_names_and_agent_options_are_not_flagged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Names without our prefixes, GENESIS_FP16_ENV_FILE and per-agent options pass."""
    (tmp_path / ".env").write_text("CUDA_VISIBLE_DEVICES=0\nENABLE_FP16_TRAINING=\n")
    monkeypatch.setenv("GENESIS_FP16_ENV_FILE", str(tmp_path / ".env"))
    monkeypatch.setenv("GENESIS_FP16_AGENTS__SE_DARWIN__STEPS", "5")
    assert load_settings().agent("se_darwin").own.steps == 5


def test_sources_and_shadowed_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each value's source is named; a .env value the environment replaces is shadowed."""
    from genesis_fp16.config.settings import load_settings_with_sources

    (tmp_path / ".env").write_text("ENABLE_FP16_TRAINING=false\nGENESIS_FP16_SEED=3\n")
    monkeypatch.setenv("ENABLE_FP16_TRAINING", "true")
    settings, sources = load_settings_with_sources()
    assert settings.enable_fp16_training is True
    assert sources.env_file == (tmp_path / ".env").resolve() and sources.env_file_read
    assert sources.source("ENABLE_FP16_TRAINING") == "environment"
    assert sources.source("GENESIS_FP16_SEED") == ".env"
    assert sources.source("GENESIS_FP16_LOG_LEVEL") == "default"
    (line,) = sources.describe_shadowed()  # the one shadowed variable
    assert "ENABLE_FP16_TRAINING=false" in line and "ENABLE_FP16_TRAINING=true" in line


def test_a_removed_isolation_setting_is_ignored_with_one_line_each(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An existing .env naming RUN_ISOLATION, RUN_WORKER, RUN_RESIDENT or an agent's
    ISOLATION (removed: one isolation model, issue 91) still loads, its other values kept;
    each removed name is one line saying it is ignored and why."""
    from genesis_fp16.config.settings import load_settings_with_sources

    (tmp_path / ".env").write_text(
        "GENESIS_FP16_RUN_ISOLATION=thread\nGENESIS_FP16_RUN_WORKER=false\n"
        "GENESIS_FP16_SEED=3\nGENESIS_FP16_AGENTS__SE_DARWIN__ISOLATION=thread\n"
        "GENESIS_FP16_AGENTS__SE_DARWIN__STEPS=5\n"
    )
    monkeypatch.setenv("GENESIS_FP16_RUN_RESIDENT", "false")
    settings, sources = load_settings_with_sources()
    assert settings.seed == 3 and settings.agent("se_darwin").own.steps == 5
    lines = sources.describe_removed()
    assert len(lines) == 4, lines
    named = ["RUN_ISOLATION", "RUN_WORKER", "RUN_RESIDENT", "AGENTS__SE_DARWIN__ISOLATION"]
    for name in named:
        (line,) = [line for line in lines if line.startswith(f"GENESIS_FP16_{name} (in ")]
        assert "\n" not in line and "is ignored: it was removed; " in line
        assert "resident run process" in line
    assert "(in the environment)" in next(x for x in lines if "RUN_RESIDENT" in x)
    assert not hasattr(settings, "run_isolation") and "isolation" not in settings.agent("x")._fields


def test_the_run_memory_limit_defaults_to_the_machine_shared_by_the_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unset, each run may use the machine's memory (or its cgroup limit) divided by the
    agents that may train at once; 0 turns the limit off; a number is kept."""
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_ALLOWLIST", "se_darwin,rlhf_ppo")
    assert load_settings().run_memory_limit_bytes == machine_memory_bytes() // 2
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_ALLOWLIST", "se_darwin")
    assert load_settings().run_memory_limit_bytes == machine_memory_bytes()
    assert default_run_memory_limit(["a", "b", "c", "d"], 16 * 2**30) == 4 * 2**30
    monkeypatch.setenv("GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES", "0")
    assert load_settings().run_memory_limit_bytes is None
    monkeypatch.setenv("GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES", str(2**30))
    assert load_settings().run_memory_limit_bytes == 2**30


def test_the_resident_keep_budget_defaults_to_a_quarter_of_a_run_s_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unset, a resident run process keeps up to a quarter of a run's memory limit (the
    run's share of the machine where the limit is unset or off), at most half of
    RUN_RESIDENT_MAX_MIB; a number, 0 included, is kept as given."""
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_ALLOWLIST", "se_darwin,rlhf_ppo")
    monkeypatch.setenv("GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES", str(8 * 2**30))
    assert load_settings().run_resident_keep_mib == 2048
    monkeypatch.setenv("GENESIS_FP16_RUN_RESIDENT_MAX_MIB", "1000")
    assert load_settings().run_resident_keep_mib == 500
    monkeypatch.delenv("GENESIS_FP16_RUN_RESIDENT_MAX_MIB")
    monkeypatch.setenv("GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES", "0")  # no limit: the share
    share_mib = machine_memory_bytes() // 2 // 2**20
    assert load_settings().run_resident_keep_mib == min(4096, share_mib // 4)
    monkeypatch.setenv("GENESIS_FP16_RUN_RESIDENT_KEEP_MIB", "0")
    assert load_settings().run_resident_keep_mib == 0
    monkeypatch.setenv("GENESIS_FP16_RUN_RESIDENT_KEEP_MIB", "1536")
    assert load_settings().run_resident_keep_mib == 1536
    assert default_keep_mib(12 * 2**30, 8192) == 3072 and default_keep_mib(2 * 2**30, 8192) == 512


def test_read_helpers_default_to_the_cpus_a_run_may_use_less_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unset, a run's read helpers are the CPUs this process may use less one, at most
    four (none on one CPU, or a pod's quota under two), and one per GiB of a run's
    memory; a number, 0 included, is kept."""
    cpus = min(len(os.sched_getaffinity(0)), settings_module._cgroup_cpus())
    monkeypatch.setenv("GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES", str(64 * 2**30))
    assert load_settings().read_workers == max(0, min(4, int(cpus) - 1))
    monkeypatch.setenv("GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES", str(2**30 - 1))
    assert load_settings().read_workers == 0  # under a GiB a run: none
    monkeypatch.setenv("GENESIS_FP16_READ_WORKERS", "0")
    assert load_settings().read_workers == 0
    monkeypatch.setenv("GENESIS_FP16_READ_WORKERS", "3")
    assert load_settings().read_workers == 3
    assert [default_read_workers(n) for n in (1, 1.5, 2, 3, 16)] == [0, 0, 1, 2, 4]
    assert [default_read_workers(16, m * 2**30) for m in (1, 2, 3, 8)] == [1, 2, 3, 4]


def test_tracking_dir_is_off_when_empty_and_refused_in_one_line_without_tensorboard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An empty GENESIS_FP16_TRACKING_DIR is off; a set one without tensorboard importable is
    a settings error naming the variable and the extra to install, not a failure mid-run."""
    import sys

    monkeypatch.setenv("GENESIS_FP16_TRACKING_DIR", "")
    assert load_settings().tracking_dir is None
    monkeypatch.setenv("GENESIS_FP16_TRACKING_DIR", "runs")
    assert load_settings().tracking_dir == Path("runs")
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # what `import tensorboard` fails on
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        "GENESIS_FP16_TRACKING_DIR: tensorboard is not installed: "
        "pip install 'genesis-fp16[tensorboard]'"
    )


def test_a_misspelt_device_is_refused_naming_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's device and an agent's are both refused in one line naming the variable
    and the choices, and an agent's alongside another bad setting, not after it."""
    monkeypatch.setenv("GENESIS_FP16_DEVICE", "gpu")
    monkeypatch.setenv("GENESIS_FP16_AGENTS__SE_DARWIN__DEVICE", "cuda0:1")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    choices = "is not one of auto, cpu, cuda[:N], mps, xpu"
    assert raised.value.errors == [
        f"GENESIS_FP16_DEVICE: device 'gpu' {choices}",
        f"GENESIS_FP16_AGENTS__SE_DARWIN__DEVICE: device 'cuda0:1' {choices}",
    ]
