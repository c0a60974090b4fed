"""`genesis-fp16 config check`: the resolved settings (secrets redacted), or the errors.

The first line names the ``.env`` file read; every value says where it came from
(``default``, ``.env`` or ``environment``), and a ``.env`` value that the process
environment replaces is reported as shadowed. The output is itself valid ``.env``
syntax (the notes are comments).

A refused file still exits 2 (this is the checker), and after its errors it prints the
settings that the commands that only read (``status``, ``agents``, ``model list``...:
``SETTINGS_USE`` in genesis_fp16/commands/reading.py) use meanwhile: the file's other
lines (``--json``: under ``used_instead``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from genesis_fp16.cli import error_object
from genesis_fp16.commands.reading import ACTS, READS, commands_that
from genesis_fp16.config.plugins import known_agent_names
from genesis_fp16.config.settings import (
    Settings,
    SettingsError,
    _env_name,
    load_settings_with_sources,
)
from genesis_fp16.config.settings_reading import load_settings_for_reading
from genesis_fp16.config.settings_sources import SettingsSources, shown_url
from genesis_fp16.jobs.run_request import check_configured_options
from genesis_fp16.launch.devices import check_devices


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("config", help="inspect the configuration", description=__doc__)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="validate and print the resolved settings")
    check.add_argument("--env-file", type=Path, default=None, help="settings file to read")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    try:
        settings, sources = load_settings_with_sources(args.env_file)
        # Agents not installed, as the daemon refuses them (entry-point metadata only: the
        # options themselves need the plugins imported, which `serve` does).
        check_configured_options(settings, {}, known_agent_names())
        # A device this torch cannot run (cuda on a CPU build, cuda:3 on a 1-GPU host), as
        # `serve` refuses it; torch is imported only when a device other than cpu/auto is set.
        check_devices(settings)
    except SettingsError as exc:
        return _refused(args, exc)
    if args.json:
        print(json.dumps(_json_answer(settings, sources), indent=2))
        return 0
    state = "read" if sources.env_file_read else "not found: defaults and environment only"
    print(f"# env file: {sources.env_file} ({state})")
    _print_values(settings, sources)
    return 0


def _refused(args: argparse.Namespace, exc: SettingsError) -> int:
    """Exit 2 with every error; then, when the file is what is refused, the settings the
    read-only commands use instead (genesis_fp16/config/settings_reading.py)."""
    for error in exc.errors:
        print(f"genesis-fp16: error: {error}", file=sys.stderr)
    try:
        read = load_settings_for_reading(args.env_file)
    except SettingsError:
        read = None
    if read is not None and read.refused is None:
        read = None  # the file loads; an agent option or a device is what is refused
    if args.json:  # every error, the first as the usual error object's
        found = [str(e) for e in exc.errors]
        answer = {**error_object(found[0], "refused", 2), "errors": found}
        if read is not None:
            answer["used_instead"] = {
                **_json_answer(read.settings, read.sources),
                "note": read.note,
                "left_out": list(read.left_out),
                "read_by": commands_that(READS),
                "refused_by": commands_that(ACTS),
            }
        print(json.dumps(answer))
    elif read is not None:
        print(f"# env file: {read.sources.env_file} (refused)")
        print(f"# the read-only commands use instead: {read.note}")
        print(f"# read by: {', '.join(commands_that(READS))}")
        print(f"# refused by: {', '.join(commands_that(ACTS))}")
        _print_values(read.settings, read.sources)
    return 2


def _resolved(settings: Settings) -> dict[str, Any]:
    """The settings as shown: secrets (SecretStr) as **********, a receiver URL's password
    and query secrets replaced (shown_url)."""
    resolved = settings.model_dump(mode="json")
    if resolved.get("events_urls"):
        resolved["events_urls"] = [shown_url(url) for url in resolved["events_urls"]]
    return resolved


def _json_answer(settings: Settings, sources: SettingsSources) -> dict[str, Any]:
    resolved = _resolved(settings)
    values = resolved_values(settings, sources, resolved)
    return {
        "env_file": str(sources.env_file),
        "env_file_read": sources.env_file_read,
        "settings": resolved,
        "sources": {name: source for name, (_, source) in values.items()},
        "shadowed": sources.describe_shadowed(),
        "ignored": sources.describe_removed(),
    }


def _print_values(settings: Settings, sources: SettingsSources) -> None:
    resolved = _resolved(settings)
    for name, (value, source) in resolved_values(settings, sources, resolved).items():
        print(f"{name}={value}  # {source}" if value else f"{name}=  # {source} (not set)")
    for line in sources.describe_shadowed():
        print(f"# shadowed: {line}")
    for line in sources.describe_removed():
        print(f"# ignored: {line}")


def resolved_values(
    settings: Settings, sources: SettingsSources, resolved: Mapping[str, Any]
) -> dict[str, tuple[str, str]]:
    """``{variable: (value as text, source)}`` of ``resolved`` (``settings`` dumped, read
    and left as it is)."""
    out: dict[str, tuple[str, str]] = {}
    agents = resolved["agents"]
    for name, value in resolved.items():
        if name == "agents":
            continue  # each agent's own variables, below
        variable = _env_name((name,))
        out[variable] = (_text(value), sources.source(variable))
    for agent, spec in sorted(settings.agents.items()):
        values = dict(agents[agent])
        # Each option is a variable of its own: ..._OPTIONS__<KEY>.
        options = values.pop("options") if "options" in spec.model_fields_set else {}
        flat = {name.upper(): values[name] for name in spec.model_fields_set if name in values}
        flat |= {f"OPTIONS__{key.upper()}": value for key, value in options.items()}
        for name, value in sorted(flat.items()):
            variable = _env_name(("agents", agent, name))
            source = sources.source(variable)
            if source == "default":  # set through a JSON object
                source = _json_source(sources, variable)
            out[variable] = (_text(value), source)
    return out


def _json_source(sources: SettingsSources, variable: str) -> str:
    """Where a value set inside a JSON object came from: the nearest enclosing variable."""
    parts = variable.split("__")
    for end in range(len(parts) - 1, 0, -1):
        enclosing = "__".join(parts[:end])
        if sources.source(enclosing) != "default":
            return f"{sources.source(enclosing)} ({enclosing})"
    return "default"


def _text(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, dict | list) else str(value)
