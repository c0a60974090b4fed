"""The `genesis-fp16` command line: one subcommand per module under `genesis_fp16.commands`.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed namespace and returning an exit code.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from genesis_fp16 import __version__
from genesis_fp16.config.settings_sources import LOG_VALUE_BOUND, bounded
from genesis_fp16.config.storage import storage_error
from genesis_fp16.service.startup_signals import release_sigterm
from genesis_fp16.service.std_streams import whole_lines

# Subcommand modules, in the order `--help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "serve",
    "status",
    "run",
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
    "events",
)


class UsageError(Exception):
    """Bad input from the user: printed as one line (cut at ``LOG_VALUE_BOUND``
    characters), exit code 2."""

    # How a daemon's child run reports it (genesis_fp16_run_failures_total's reason).
    kind = "refused"


class DeviceUnavailable(UsageError):
    """A device this torch cannot run (no CUDA, fewer GPUs): one line, exit code 2."""

    kind = "device_unavailable"


class Parser(argparse.ArgumentParser):
    """argparse's parser, which answers a mistyped flag or command with the closest one of
    the command it was given to (``--stepz``: "did you mean --steps?"), in that command's
    usage, and with ``--json`` an error object on stdout too."""

    json_errors = False  # set by main() when the words hold --json

    def parse_args(  # type: ignore[override]  # only the forms main() uses
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:  # argparse would blame the top-level parser; blame the command given
            command = _given_command(self, parsed)
            command.error(f"unrecognized arguments: {' '.join(extras)}{_closest(command, extras)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        message += _closest_choice(message)
        self.print_usage(sys.stderr)
        if self.json_errors:
            print(json.dumps(error_object(message, "usage", 2)), flush=True)
        self.exit(2, f"{self.prog}: error: {bounded(message, LOG_VALUE_BOUND)}\n")


def _given_command(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> Parser:
    """The parser of the (sub)command ``parsed`` names: ``config check``'s for those words."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
            if chosen is not None:
                return _given_command(chosen, parsed)
    assert isinstance(parser, Parser)
    return parser


def _closest(parser: argparse.ArgumentParser, words: Sequence[str]) -> str:
    """`` (did you mean --steps?)`` for the flags among ``words`` close to one of
    ``parser``'s, else ''."""
    flags = [f for f in parser._option_string_actions if f.startswith("--")]
    near = []
    for word in words:
        if word.startswith("-"):
            near += difflib.get_close_matches(word.split("=", 1)[0], flags, n=1, cutoff=0.6)
    return f" (did you mean {' or '.join(near)}?)" if near else ""


def _closest_choice(message: str) -> str:
    """`` (did you mean train?)`` for argparse's "invalid choice: 'trian' (choose from
    ...)", else ''."""
    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if found is None:
        return ""
    choices = re.findall(r"'([^']*)'", found.group(2))
    near = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.6)
    return f" (did you mean {near[0]}?)" if near else ""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` the one command it names.

    A daemon's child run (``train --request``) and every torchrun rank start a fresh
    interpreter; importing the other seven command modules would cost each of them tens
    of milliseconds (benchmarks/results/child_start_cpu-amd-epyc-2-cores.md).
    """
    parser = Parser(
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
    whole_lines()  # before anything writes or keeps a stream (the log's handler)
    words = list(sys.argv[1:] if argv is None else argv)
    # `genesis-fp16 train ...` needs the train command alone; --help and errors list all.
    module = words[0].replace("-", "_") if words else None
    parser = build_parser(module if module in COMMAND_MODULES else None)
    Parser.json_errors = "--json" in words
    args = parser.parse_args(words)
    if not getattr(args, "func", None):  # no command, or `data` without its action
        _given_command(parser, args).print_help()
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
        _report(args, exc.kind, str(exc), 2)
        # One line of at most LOG_VALUE_BOUND characters: a value echoed is cut.
        print(f"genesis-fp16: error: {bounded(str(exc), LOG_VALUE_BOUND)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if getattr(args, "json", False):  # not a daemon's child: its daemon stops it
            _report(args, "interrupted", "interrupted: quit at once, nothing checkpointed", 130)
        return 130
    except OSError as exc:
        why = storage_error(exc)
        if why is None:
            _report(args, "error", f"{type(exc).__name__}: {exc}", 1)
            raise
        _report(args, "storage", why, 1)
        print(f"genesis-fp16: error: {bounded(why, LOG_VALUE_BOUND)}", file=sys.stderr)
        return 1
    except Exception as exc:
        from genesis_fp16.launch.devices import device_lost

        # A GPU lost mid-run is the host's fault, not the plugin's: the daemon says degraded.
        kind = "device_unavailable" if device_lost(exc) else "error"
        _report(args, kind, f"{type(exc).__name__}: {exc}", 1)
        raise


def _report(args: argparse.Namespace, kind: str, message: str, code: int) -> None:
    """A failed command asked for ``--json`` ends stdout with one error object,
    ``{"error": "...", "kind": ..., "exit_code": ...}``, beside its line on stderr; so
    does a run the daemon started in a child (``train --request``), which the daemon
    counts by ``kind``."""
    if getattr(args, "request", None) is not None or getattr(args, "json", False):
        print(json.dumps(error_object(message, kind, code)), flush=True)


def error_object(message: str, kind: str, code: int) -> dict[str, object]:
    """The ``--json`` error object: the first line of ``message`` (at most 500
    characters), what kind of failure (``refused``, ``storage``, ``usage``, ``error``...)
    and the exit code."""
    first = message.splitlines()[0] if message else ""
    return {"error": first[:500], "kind": kind, "exit_code": code}


def strict_json(value: Any) -> Any:
    """``value`` with NaN and infinities as null, at any depth: a ``--json`` object stays
    standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


if __name__ == "__main__":
    raise SystemExit(main())
