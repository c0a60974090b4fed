"""`genesis-fp16 serve`: run the training daemon until SIGTERM or SIGINT.

With no configuration at all it uses ./state, generates sample data for agents without
configured data, trains each agent once at start-up and then on its schedule, and serves
metrics on 127.0.0.1:9464. See docs/daemon.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from genesis_fp16.config.settings import SettingsError, load_settings_with_sources, resolve_env_file


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the training daemon (scheduler, metrics, reload on SIGHUP)",
        description=__doc__,
    )
    parser.add_argument(
        "--env-file",
        type=Path,
        default=None,
        help="settings file, re-read on SIGHUP (default: $GENESIS_FP16_ENV_FILE or .env)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so that `genesis-fp16 --help` does not pay for torch and APScheduler.
    from genesis_fp16.service.daemon import Daemon, StartupError
    from genesis_fp16.service.logsetup import configure_logging

    env_file = args.env_file or resolve_env_file()
    try:
        settings, sources = load_settings_with_sources(args.env_file)
    except SettingsError as exc:
        print(f"genesis-fp16: error: invalid configuration: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format, settings.log_level)
    try:
        code = Daemon(settings, env_file=Path(env_file), sources=sources).run()
    except SettingsError as exc:  # an agent option its plugin does not declare, or a bad value
        print(f"genesis-fp16: error: invalid configuration: {exc}", file=sys.stderr)
        code = 2
    except (StartupError, OSError) as exc:  # a state folder not ours, a metrics port taken
        print(f"genesis-fp16: error: {exc}", file=sys.stderr)
        code = 1
    if code != 0:
        sys.stderr.flush()
        os._exit(code)  # now, even if worker threads still run (they are not daemon threads)
    return code
