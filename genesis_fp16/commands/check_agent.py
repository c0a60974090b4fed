"""`genesis-fp16 check-agent NAME [--option KEY=VALUE ...]`: the plugin contract, rule by rule.

Runs every rule of ``genesis_fp16.testing.check_agent`` on the installed plugin NAME (a
few steps each, on the CPU, in a temporary folder) and prints one line a rule, ``PASS`` or
``FAIL`` with why, then one ``HAS`` line for each optional capability the plugin declares
(``genesis_fp16.plugin_api``'s protocol; ``--json``: one object). Exit 0 when every rule
passes, 1 when one fails, 2 for bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from genesis_fp16.cli import UsageError
from genesis_fp16.commands.reading import command_plugin, command_settings
from genesis_fp16.config.agent_names import agent_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check-agent", help="check an agent plugin against the contract", description=__doc__
    )
    parser.add_argument(
        "agent", metavar="NAME", type=agent_argument, help="agent plugin name (see `agents`)"
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option the agent declares, for every rule's run (repeatable)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: each rule's verdict and why, and whether all passed",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from genesis_fp16.jobs.run_request import parse_option_flags
    from genesis_fp16.testing import check_agent

    # Only the allowlist is read (a refused .env: its other lines, said on stderr).
    plugin, _ = command_plugin(args.agent, command_settings("check-agent"))
    try:
        options = parse_option_flags(args.option)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    report = check_agent(plugin, options)
    if args.json:
        rules = [dataclasses.asdict(r) for r in report.results]  # its rule, ok and detail
        shown = {"agent": report.agent, "ok": report.ok, "rules": rules}
        print(json.dumps({**shown, "capabilities": list(report.capabilities)}))
    else:
        print(report.summary())
        for line in report.capability_lines():
            print(line)
    return 0 if report.ok else 1
