"""What `genesis-fp16 train` refuses before it starts, in one line each (exit 2): arguments
that do not fit together, a state folder another process owns, a device this torch
cannot run. Each runs before any data is generated or a process group formed::

    check_arguments(args)                            # raises UsageError
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from genesis_fp16.cli import DeviceUnavailable, UsageError
from genesis_fp16.config.extras import tensorboard_missing
from genesis_fp16.config.settings import (
    AGENT_VARIABLE_PREFIX,
    PRECISION_CHOICES,
    AgentConfig,
    Settings,
    check_device_name,
)
from genesis_fp16.launch.devices import device_problem

_REQUEST_ONLY = (
    *("precision", "steps", "epochs", "data", "checkpoint_dir", "seed", "device"),
    *("checkpoint_steps", "checkpoint_seconds", "tracking_dir"),
)


def check_arguments(args: argparse.Namespace) -> None:
    """The flags alone, before any setting is read: a --request run takes no other run
    flag, and the rest must name values that exist."""
    if args.tracking_dir is not None:
        missing = tensorboard_missing()
        if missing is not None:
            raise UsageError(f"--tracking-dir: {missing}")
    if args.request is not None:
        given = [f"--{name.replace('_', '-')}" for name in _REQUEST_ONLY if getattr(args, name)]
        given += ["--option"] if args.option else []
        given += [f for f, on in (("--resume", args.resume), ("--fsdp", args.fsdp)) if on]
        if given:
            raise UsageError(f"--request carries the whole run; drop {', '.join(given)}")
        return
    if args.precision is not None and args.precision not in PRECISION_CHOICES:
        raise UsageError(
            f"--precision {args.precision!r}: choose one of {', '.join(PRECISION_CHOICES)}"
        )
    for name in ("steps", "epochs"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} {value}: must be at least 1")
    check_data_and_device(args)


def check_data_and_device(args: argparse.Namespace) -> None:
    """``--data`` and ``--device``, as train and probe take them: a file or folder that
    exists, a device spelt as one (whether this torch can run it is asked later)."""
    if args.data is not None and not args.data.exists():
        raise UsageError(f"--data {args.data}: no such file or folder")
    if args.device is not None:
        try:
            check_device_name(args.device)
        except ValueError as exc:
            raise UsageError(f"--device: {exc}") from None


def integer_from(low: int) -> Callable[[str], int]:
    """argparse's ``type`` of train's and probe's counts: an integer >= ``low``, else exit 2."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value}: must be at least {low}")
        return value

    return parse


def own_state_folder(args: argparse.Namespace, settings: Settings) -> int | None:
    """Take the state folder's lock for this run (genesis_fp16/service/state_lock.py); a daemon or
    another ``train`` that owns it refuses this run in one line, exit 2.

    Returns the lock's descriptor, or None for a folder this user cannot write (no daemon
    of ours writes there either, and the run fails on its own if it must write).
    """
    from genesis_fp16.service.state_lock import StateFolderBusy, acquire_state_folder, owning_holder

    # A checkpoint folder inside another process's state folder is that process's to
    # write, between its runs too (its child locks the folder only while it trains).
    owned = owning_holder(args.checkpoint_dir) if args.checkpoint_dir is not None else None
    if owned is not None:
        folder, holder = owned
        raise UsageError(
            f"--checkpoint-dir {args.checkpoint_dir} is inside the state folder {folder}, "
            f"owned by {holder.describe()}: it writes there; train into another folder"
        )
    try:  # the lock makes the folder (AgentFolder.take_owner)
        return acquire_state_folder(settings.state_dir, f"train {args.agent}")
    except StateFolderBusy as exc:
        if exc.holder.command == "serve":
            how = f"{_what_the_daemon_trains(args.agent, exc.holder.agents)}; to train by hand, "
            how += (
                "stop the daemon first (systemctl stop genesis-fp16), or train in another "
                "state folder (GENESIS_FP16_STATE_DIR=DIR)"
            )
        else:
            how = "wait for it to end, or train in another folder (GENESIS_FP16_STATE_DIR=DIR)"
        raise UsageError(f"{exc}: {how}") from None
    except OSError:
        return None


def _what_the_daemon_trains(agent: str, scheduled: tuple[str, ...] | None) -> str:
    """The refusal's reason: what the daemon's lock file says it schedules (None: a daemon
    that does not say)."""
    if scheduled is not None and agent not in scheduled:
        return (
            f"the daemon does not train {agent} (it schedules {', '.join(scheduled) or 'none'}; "
            "`genesis-fp16 status` says why), but it owns the whole folder"
        )
    return f"the daemon trains {agent} itself on its schedule"


def refuse_unusable_device(
    args: argparse.Namespace, config: AgentConfig | None, device: str
) -> None:
    """One line, exit 2, before any data or process group: a device this torch cannot run
    (``--device cuda`` on a CPU build), naming the flag or the ``config`` setting it came from."""
    problem = device_problem(device)
    if problem is None:
        return
    if config is None:  # the daemon's child: the GPU was there when the daemon started
        where = f"the run request's device {device}"
    elif args.device:
        where = f"--device {args.device}"
    else:  # the agent's own device, else the daemon's (config.device)
        own = config.own.device
        variable = f"{AGENT_VARIABLE_PREFIX}{args.agent.upper()}__DEVICE"
        where = f"{variable}={own}" if own else f"GENESIS_FP16_DEVICE={config.device}"
    raise DeviceUnavailable(f"{where}: {problem}")
