"""The `genesis-fp16` command line: one subcommand per module under `genesis_fp16.commands`.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed namespace and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
from collections.abc import Sequence

from genesis_fp16 import __version__
from genesis_fp16.config.storage import storage_error
from genesis_fp16.startup_signals import release_sigterm

# Subcommand modules, in the order `--help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "serve",
    "status",
    "train",
    "data",
    "agents",
    "config",
    "probe",
    "bench",
    "precision",
    "replay",
    "new_agent",
    "check_agent",
    "model",
)


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""

    # How a daemon's child run reports it (genesis_fp16_run_failures_total's reason).
    kind = "refused"


class DeviceUnavailable(UsageError):
    """A device this torch cannot run (no CUDA, fewer GPUs): one line, exit code 2."""

    kind = "device_unavailable"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` the one command it names.

    A daemon's child run (``train --request``) and every torchrun rank start a fresh
    interpreter; importing the other seven command modules would cost each of them tens
    of milliseconds (benchmarks/results/child_start_cpu-amd-epyc-2-cores.md).
    """
    parser = argparse.ArgumentParser(
        prog="genesis-fp16",
        description="Mixed-precision training daemon for Genesis agents' world models.",
    )
    parser.add_argument("--version", action="version", version=f"genesis-fp16 {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        if only is None or name == only:
            importlib.import_module(f"genesis_fp16.commands.{name}").register(subparsers)
    _plain_help(parser)
    return parser


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Docstrings serve as descriptions: show ``code`` and :role:`x` as `code` and `x`."""
    parser.description = _plain(parser.description)
    for action in parser._actions:
        action.help = _plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _plain_help(sub)


def _plain(text: str | None) -> str | None:
    if text is None:
        return None
    return re.sub(r"(?::\w+:)?``?([^`]+)``?", r"`\1`", text)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # `genesis-fp16 train ...` needs the train command alone; --help and errors list all.
    module = words[0].replace("-", "_") if words else None
    parser = build_parser(module if module in COMMAND_MODULES else None)
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if not getattr(args, "takes_sigterm", False):
        release_sigterm()  # a SIGTERM held during start-up ends this command now
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # here, so that a closed pipe is caught below, not at exit
        return code
    except BrokenPipeError:
        # The reader went away (`genesis-fp16 agents | head -1`): stop quietly, as a
        # SIGPIPE would, and keep the interpreter's last flush from failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except UsageError as exc:
        _tell_the_daemon(args, exc.kind, str(exc))
        print(f"genesis-fp16: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        why = storage_error(exc)
        if why is None:
            _tell_the_daemon(args, "error", f"{type(exc).__name__}: {exc}")
            raise
        _tell_the_daemon(args, "storage", why)
        print(f"genesis-fp16: error: {why}", file=sys.stderr)
        return 1
    except Exception as exc:
        from genesis_fp16.runs.devices import device_lost

        # A GPU lost mid-run is the host's fault, not the plugin's: the daemon says degraded.
        kind = "device_unavailable" if device_lost(exc) else "error"
        _tell_the_daemon(args, kind, f"{type(exc).__name__}: {exc}")
        raise


def _tell_the_daemon(args: argparse.Namespace, kind: str, message: str) -> None:
    """A run the daemon started in a child (``train --request``) ends with one JSON line
    on stdout saying why it failed, which the daemon counts by ``kind``."""
    if getattr(args, "request", None) is not None:
        print(json.dumps({"error": message.splitlines()[0][:500], "kind": kind}), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
