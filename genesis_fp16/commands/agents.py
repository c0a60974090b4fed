"""`genesis-fp16 agents [--json]`: the agent plugins found and the state of each.

Exits 1 when an allowed plugin failed to load, or its import is stuck (it has not returned
after `GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS`, 30 s by default: listed ``stuck``, and
the command does not wait longer), so that a deployment check (`genesis-fp16 agents &&
...`) notices; 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from genesis_fp16.commands.reading import command_settings
from genesis_fp16.config.plugins import PluginRecord, discover_plugins
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.guard_state import describe, load_memory
from genesis_fp16_infrastructure.api import shown_name


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "agents", help="list agent plugins and whether they load", description=__doc__
    )
    parser.add_argument("--json", action="store_true", help="print one JSON array")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = command_settings("agents")  # a refused .env: its other lines, said on stderr
    records = discover_plugins(settings.plugin_allowlist, settings.plugin_import_deadline_seconds)
    # A refused name quoted: it may hold a newline.
    names = [shown_name(r.name) if r.state == "refused" else r.name for r in records]
    if args.json:
        listed = []
        for record in records:
            memory = load_memory(settings, record.name) if record.state != "refused" else None
            guard = memory.to_json() if memory is not None else None
            declared = record.capabilities  # the loader's: none for a plugin not loaded
            listed.append(
                {
                    **record.to_json(),
                    "options": [option.to_json() for option in declared.options],
                    "ignored_request_fields": dict(declared.ignored_request_fields),
                    "precision_guard": guard,
                }
            )
        print(json.dumps(listed, indent=2))
    elif not records:
        print("no agent plugins found in the entry-point group genesis_fp16.agents")
    else:
        _print_table(settings, records, names)
    failed = ("failed", "wrong_api", "stuck", "refused")
    broken = [name for name, r in zip(names, records, strict=True) if r.state in failed]
    if broken:
        sys.stdout.flush()
        print(
            f"genesis-fp16: error: plugin(s) failed to load: {', '.join(broken)}", file=sys.stderr
        )
        return 1
    return 0


def _print_table(settings: Settings, records: list[PluginRecord], names: list[str]) -> None:
    """One line per plugin, under its shown name; a shadowed one saying which
    registration is used."""
    width = max(len(name) for name in names)
    for name, record in zip(names, records, strict=True):
        detail = record.error or (record.plugin.description if record.plugin else "")
        line = f"{name:<{width}}  {record.state:<11}  {record.value}  {detail}"
        if record.state != "refused":
            demoted = describe(load_memory(settings, record.name))
            line = f"{line}  {demoted}" if demoted else line
        if record.shadowed:
            line = f"{line}  (shadowed: {record.shadowed})"
        print(line)
