"""`genesis-fp16 precision show|reset AGENT`: the precision guard's memory of an agent.

``reset`` deletes the remembered demotion, so the agent's next run (in a running daemon
too: the memory is read at the start of every run) asks for its configured precision.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from genesis_fp16.cli import UsageError
from genesis_fp16.guard_state import describe
from genesis_fp16.paths import AgentPaths
from genesis_fp16.settings import SettingsError, load_settings
from infrastructure.training.precision_memory import read_precision_memory, write_precision_memory

_AGENT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "precision",
        help="show or reset an agent's remembered precision demotion",
        description=__doc__,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in (("show", "print the remembered demotion"), ("reset", "forget it")):
        sub = actions.add_parser(action, help=text)
        sub.add_argument("agent", metavar="AGENT", help="the agent's name, e.g. se_darwin")
        if action == "show":
            sub.add_argument("--json", action="store_true", help="print the state file's JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    agent = str(args.agent)
    if not _AGENT_NAME.match(agent) or agent in (".", ".."):
        raise UsageError(f"agent name {agent!r} is not valid: use letters, digits, '_', '-', '.'")
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"genesis-fp16: error: invalid configuration: {exc}", file=sys.stderr)
        return 2
    path = AgentPaths.for_agent(settings.state_dir, agent).precision_state_path
    try:
        memory = read_precision_memory(path)
    except ValueError as exc:
        if args.action == "show":
            raise UsageError(str(exc)) from None
        memory = None  # a broken file is reset all the same
    if args.action == "show":
        if args.json:
            print(json.dumps(memory.to_json() if memory else None, indent=2))
        else:
            print(describe(memory) or f"{agent}: no precision demotion remembered")
        return 0
    if not path.exists():
        print(f"{agent}: no precision demotion remembered ({path})")
        return 0
    write_precision_memory(path, None)
    was = f" (was {memory.demoted_from} -> {memory.demoted_to})" if memory else ""
    print(f"{agent}: precision demotion cleared{was}; the next run uses the configured precision")
    return 0
