"""`genesis-fp16 new-agent NAME [--out DIR]`: write a new agent plugin package.

Writes DIR/NAME-with-dashes: pyproject.toml (the entry point in ``genesis_fp16.agents``,
and ruff settings of its own, so the package lints clean inside a checkout too),
NAME/__init__.py (a working toy agent), a test (``python -m unittest``) and a README, then
prints the folder and the next three steps: install it, check it, and how the daemon
picks it up. A name an installed agent or an importable module has already is refused.
``--json`` prints one object instead: ``{"agent", "folder", "next": [...]}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from genesis_fp16.cli import UsageError
from genesis_fp16.config.plugins import installed_entry_points
from genesis_fp16.scaffold import ScaffoldError, check_name, write_agent


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "new-agent", help="write a new agent plugin package", description=__doc__
    )
    parser.add_argument("name", metavar="NAME", help="the agent's name, e.g. my_agent")
    parser.add_argument(
        "--out", type=Path, default=Path("."), help="folder to write it in (default: .)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:  # one line: the name's pattern, a keyword, a module's name
        check_name(args.name)
        _refuse_taken(args.name)
        root = write_agent(args.name, args.out)
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    steps = next_steps(args.name, root)
    if args.json:
        print(json.dumps({"agent": args.name, "folder": str(root), "next": steps[1:]}))
        return 0
    print(root)
    for line in steps:
        print(line)
    return 0


def _refuse_taken(name: str) -> None:
    """An installed agent's name (se_darwin) would be shadowed by, or shadow, the new one;
    an importable module's (json, torch) would clash with the package's module."""
    installed = installed_entry_points()
    if name in installed:
        ep = installed[name]
        dist = ep.dist.metadata["Name"] if ep.dist is not None else "a distribution"
        raise ScaffoldError(
            f"agent name {name!r}: an installed agent has it ({dist}: {ep.value}); pick another"
        )
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        where = spec.origin or (list(spec.submodule_search_locations or []) or ["?"])[0]
        raise ScaffoldError(
            f"agent name {name!r}: a module of that name is importable already ({where}); "
            "pick another"
        )


def next_steps(name: str, root: Path) -> list[str]:
    """What to do next, as commands for this very interpreter: install, check, serve."""
    python = shlex.quote(sys.executable)
    command = Path(sys.executable).with_name("genesis-fp16")
    cli = shlex.quote(str(command)) if command.exists() else f"{python} -m genesis_fp16"
    return [
        "next:",
        f"  1. install it (editable): {python} -m pip install -e {shlex.quote(str(root))}",
        f"  2. check the contract:    {cli} check-agent {name}",
        "  3. serve it: a running daemon loads it within GENESIS_FP16_HEARTBEAT_SECONDS, or at "
        "once on SIGHUP, and trains it on schedule (`genesis-fp16 status` says when)",
    ]
