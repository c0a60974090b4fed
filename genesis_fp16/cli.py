"""The `genesis-fp16` command line: one subcommand per module under `genesis_fp16.commands`.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed namespace and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from genesis_fp16 import __version__
from genesis_fp16.storage import storage_error

# Subcommand modules, in the order `--help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "serve",
    "train",
    "data",
    "agents",
    "config",
    "probe",
    "bench",
    "precision",
)


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="genesis-fp16",
        description="Mixed-precision training daemon for Genesis agents' world models.",
    )
    parser.add_argument("--version", action="version", version=f"genesis-fp16 {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"genesis_fp16.commands.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"genesis-fp16: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        why = storage_error(exc)
        if why is None:
            raise
        print(f"genesis-fp16: error: {why}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
