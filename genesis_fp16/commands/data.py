"""`genesis-fp16 data generate --agent AGENT --out PATH --count N --seed S`: synthetic data.

Writes the agent's own sample dataset (for ``se_darwin``, a trajectory pool at
``PATH/trajectory_pools/se_darwin/trajectory_pool.json``) and prints its path. The same
seed writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from genesis_fp16.cli import UsageError
from genesis_fp16.plugins import PluginError, load_plugin
from genesis_fp16.settings import SettingsError, load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("data", help="generate sample data", description=__doc__)
    actions = parser.add_subparsers(dest="data_command", metavar="ACTION")
    generate = actions.add_parser(
        "generate", help="write a synthetic dataset for an agent", description=__doc__
    )
    generate.add_argument("--agent", required=True, help="agent plugin name (see `agents`)")
    generate.add_argument("--out", type=Path, required=True, help="output folder")
    generate.add_argument("--count", type=int, default=20_000, help="records (default 20000)")
    generate.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    generate.add_argument("--json", action="store_true", help="print one JSON object")
    generate.set_defaults(func=run_generate)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_generate(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise UsageError(f"--count {args.count}: must be at least 1")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a folder")
    try:
        plugin = load_plugin(args.agent, load_settings().plugin_allowlist)
    except SettingsError as exc:
        raise UsageError(f"invalid configuration: {exc}") from None
    except PluginError as exc:
        raise UsageError(str(exc)) from None
    try:
        path = plugin.generate_sample_data(args.out, args.count, args.seed)
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write ({exc.strerror or exc})") from None
    if args.json:
        print(json.dumps({"agent": args.agent, "path": str(path), "count": args.count}))
    else:
        print(path)
    return 0
