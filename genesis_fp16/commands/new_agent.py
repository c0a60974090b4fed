"""`genesis-fp16 new-agent NAME [--out DIR]`: write a new agent plugin package.

Writes DIR/NAME-with-dashes: pyproject.toml (the entry point in ``genesis_fp16.agents``),
NAME/__init__.py (a working toy agent), tests and a README. Then::

    pip install ./my-agent && genesis-fp16 check-agent my_agent
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from genesis_fp16.cli import UsageError
from genesis_fp16.scaffold import ScaffoldError, write_agent


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "new-agent", help="write a new agent plugin package", description=__doc__
    )
    parser.add_argument("name", metavar="NAME", help="the agent's name, e.g. my_agent")
    parser.add_argument(
        "--out", type=Path, default=Path("."), help="folder to write it in (default: .)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        root = write_agent(args.name, args.out)
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    print(root)
    return 0
