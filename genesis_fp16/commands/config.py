"""`genesis-fp16 config check`: print the resolved settings (secrets redacted) or the errors."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from genesis_fp16.settings import SettingsError, load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("config", help="inspect the configuration", description=__doc__)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="validate and print the resolved settings")
    check.add_argument("--env-file", type=Path, default=None, help="settings file to read")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.env_file)
    except SettingsError as exc:
        for error in exc.errors:
            print(f"genesis-fp16: error: {error}", file=sys.stderr)
        return 2
    resolved = settings.redacted()
    if args.json:
        print(json.dumps(resolved, indent=2))
        return 0
    for name, value in resolved.items():
        variable = (
            "ENABLE_FP16_TRAINING"
            if name == "enable_fp16_training"
            else f"GENESIS_FP16_{name.upper()}"
        )
        shown = "(not set)" if value is None else value
        print(f"{variable}={json.dumps(value) if isinstance(value, dict | list) else shown}")
    return 0
