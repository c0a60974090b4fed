"""`genesis-fp16 data generate AGENT --out PATH [--count N] [--seed S]`: synthetic data.

``--count`` and ``--seed`` default to what the daemon and `train` generate
(``GENESIS_FP16_SAMPLE_COUNT``, ``GENESIS_FP16_SEED``); ``--agent AGENT`` is accepted as
well as the positional name. Writes the agent's own sample dataset (for ``se_darwin``, a
trajectory pool at ``PATH/trajectory_pools/se_darwin/trajectory_pool.json``) and prints
its path. The same seed writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from genesis_fp16.cli import UsageError
from genesis_fp16.commands.reading import command_plugin, command_settings
from genesis_fp16.config.agent_names import agent_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("data", help="generate sample data", description=__doc__)
    actions = parser.add_subparsers(dest="data_command", metavar="ACTION")
    generate = actions.add_parser(
        "generate", help="write a synthetic dataset for an agent", description=__doc__
    )
    generate.add_argument(
        "agent",
        metavar="AGENT",
        nargs="?",
        type=agent_argument,
        help="agent plugin name (see `agents`)",
    )
    generate.add_argument(
        "--agent",
        dest="agent_flag",
        metavar="AGENT",
        type=agent_argument,
        help=argparse.SUPPRESS,
    )
    generate.add_argument("--out", type=Path, required=True, help="output folder")
    generate.add_argument(
        "--count", type=int, help="records (default: GENESIS_FP16_SAMPLE_COUNT, 2000)"
    )
    generate.add_argument("--seed", type=int, help="seed (default: GENESIS_FP16_SEED, 0)")
    generate.add_argument("--json", action="store_true", help="print one JSON object")
    generate.set_defaults(func=run_generate)  # `data` alone: its help (cli.main), exit 2


def run_generate(args: argparse.Namespace) -> int:
    if args.agent and args.agent_flag and args.agent != args.agent_flag:
        raise UsageError(f"two agents named: {args.agent!r} and --agent {args.agent_flag!r}")
    args.agent = args.agent or args.agent_flag
    if not args.agent:
        raise UsageError("name the agent: genesis-fp16 data generate AGENT --out PATH")
    if args.count is not None and args.count < 1:
        raise UsageError(f"--count {args.count}: must be at least 1")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a folder")
    from genesis_fp16.service.state_lock import owning_holder

    owned = owning_holder(args.out)
    if owned is not None:  # it would replace what that daemon (or train) trains on
        folder, holder = owned
        raise UsageError(
            f"--out {args.out} is inside the state folder {folder}, owned by "
            f"{holder.describe()}: stop it first, or write elsewhere"
        )
    settings = command_settings("data generate")
    plugin, _ = command_plugin(args.agent, settings)
    # The daemon's and train's defaults: the same data unless asked otherwise.
    args.count = settings.sample_count if args.count is None else args.count
    args.seed = settings.seed if args.seed is None else args.seed
    try:
        path = plugin.generate_sample_data(args.out, args.count, args.seed)
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write ({exc.strerror or exc})") from None
    if args.json:
        print(json.dumps({"agent": args.agent, "path": str(path), "count": args.count}))
    else:
        print(path)
    return 0
