"""`genesis-fp16 run AGENT [--json]`: ask the daemon on the state folder to run an agent now.

The request goes through the state folder (genesis_fp16/service/run_now.py), never an
HTTP write: the command leaves a request file, the daemon's main loop takes it within a
tick and answers, and the command prints the answer. Refused in one line (exit 2) when
no daemon runs on the state folder, when it is shutting down (also while waiting), when
the agent is unknown or not scheduled there, and when it is running now. Exit 1 when
the daemon does not answer within ``ANSWER_WAIT_SECONDS``: the request is withdrawn,
and nothing runs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genesis_fp16.cli import UsageError
from genesis_fp16.config.agent_names import agent_argument

if TYPE_CHECKING:  # imported where used: the parser alone stays light
    from genesis_fp16.service.run_now import Answer

# The daemon looks every 0.5 s; a loaded host, or a daemon busy with a reload, is slower.
ANSWER_WAIT_SECONDS = 20.0
POLL_SECONDS = 0.05
OWNER_LOOK_SECONDS = 0.5  # how often the wait asks whether the daemon began to stop


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="ask the running daemon to run an agent now", description=__doc__
    )
    parser.add_argument("agent", metavar="AGENT", type=agent_argument)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from genesis_fp16.commands.reading import command_settings
    from genesis_fp16.service.run_now import new_request

    agent = str(args.agent)
    # A refused .env: its other lines name the state folder (said on stderr); the daemon
    # runs the agent with its own running settings whatever this process reads.
    state_dir = Path(command_settings("run").state_dir)
    pid = _daemon_pid(state_dir, agent)
    try:
        ident = new_request(state_dir, agent)
    except OSError as exc:
        raise UsageError(f"cannot leave a request in {state_dir} ({exc.strerror or exc})") from None
    answer = _wait_for_answer(state_dir, agent, ident)
    if answer is None:
        why = (
            f"the daemon (pid {pid}) did not take the request within {ANSWER_WAIT_SECONDS:g} s "
            "(busy or stuck: see /healthz); withdrawn, nothing runs"
        )
        _print(args, {"agent": agent, "outcome": "no_answer", "detail": why, "daemon_pid": pid})
        return 1
    if answer.outcome == "refused":
        raise UsageError(answer.detail)
    shown = {"agent": agent, "outcome": answer.outcome, "detail": answer.detail, "daemon_pid": pid}
    _print(args, shown)
    return 0


def _daemon_pid(state_dir: Path, agent: str) -> int | None:
    """The pid of the daemon on ``state_dir``; refused in one line when none runs there,
    or when its lock file says it does not schedule ``agent``."""
    from genesis_fp16.config.plugins import known_agent_names
    from genesis_fp16.service.run_now import not_scheduled
    from genesis_fp16.service.state_lock import folder_owner

    owned = folder_owner(state_dir)
    if owned is None or owned[0].command != "serve":
        held = f"; genesis-fp16 {owned[0].command} owns it" if owned is not None else ""
        raise UsageError(
            f"no daemon runs on the state folder {state_dir}{held}: start one with "
            f"`genesis-fp16 serve`, or train once with `genesis-fp16 train {agent}`"
        )
    holder = owned[0]
    if holder.stopping:
        raise UsageError(f"the daemon (pid {holder.pid}) is shutting down; it starts no run")
    if holder.agents is not None and agent not in holder.agents:
        raise UsageError(not_scheduled(agent, list(holder.agents), known_agent_names()))
    return holder.pid


def _wait_for_answer(state_dir: Path, agent: str, ident: str) -> Answer | None:
    """The daemon's answer; None when it gave none in time (the request withdrawn). A
    request it took just as the wait ended is waited for once more."""
    from genesis_fp16.service.run_now import read_answer, withdraw

    for _ in range(2):
        deadline = time.monotonic() + ANSWER_WAIT_SECONDS
        next_look = time.monotonic() + OWNER_LOOK_SECONDS
        while time.monotonic() < deadline:
            answer = read_answer(state_dir, ident)
            if answer is not None:
                return answer
            if time.monotonic() >= next_look:  # a daemon that began to stop answers no more
                next_look = time.monotonic() + OWNER_LOOK_SECONDS
                stopped = _stopped(state_dir)
                if stopped is not None and withdraw(state_dir, agent, ident):
                    raise UsageError(stopped)
            time.sleep(POLL_SECONDS)
        if withdraw(state_dir, agent, ident):
            return None
    return read_answer(state_dir, ident)


def _stopped(state_dir: Path) -> str | None:
    """Why the daemon will not answer (it shuts down, or is gone), or None."""
    from genesis_fp16.service.state_lock import folder_owner

    owned = folder_owner(state_dir)
    if owned is None or owned[0].command != "serve":
        return f"the daemon on {state_dir} stopped; withdrawn, nothing runs"
    if owned[0].stopping:
        return f"the daemon (pid {owned[0].pid}) is shutting down; withdrawn, nothing runs"
    return None


def _print(args: argparse.Namespace, answer: dict[str, Any]) -> None:
    print(json.dumps(answer, indent=2) if args.json else answer["detail"])
