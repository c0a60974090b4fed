"""A SIGTERM that reaches ``python -m genesis_fp16`` while it is still starting is held,
not fatal, until the command takes the signal over.

The daemon's child runs and torchrun's ranks are ``python -m genesis_fp16 train``; their
start-up (the interpreter, torch, the plugin) takes seconds, and longer on a loaded host.
Before this, a stop request or a run's timeout that landed in that window killed the
process mid-import, so what the daemon saw depended on how fast the host imported torch.
Now the signal is remembered: ``train`` takes it over (its run stops at the first step
boundary, as for a SIGTERM during training) and every other command gets the default
behaviour back, the held signal re-sent, before it does anything.

Torch-free and import-free on purpose: it runs before anything heavy is imported.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

_held = threading.Event()
_holding = False
# Whether a SIGTERM reached this process since hold_sigterm(), held or taken by a command:
# a resident run process (genesis_fp16/commands/resident.py) ends after a run stopped by one.
_received = threading.Event()


def _hold(signum: int, frame: FrameType | None) -> None:
    _held.set()
    _received.set()


def note_sigterm() -> None:
    """For a command's own SIGTERM handler: say that one came (:func:`sigterm_received`)."""
    _received.set()


def sigterm_received() -> bool:
    """Whether a SIGTERM came since :func:`hold_sigterm`, held or taken over."""
    return _received.is_set()


def hold_sigterm() -> None:
    """Remember a SIGTERM from now on instead of dying of it (main thread only)."""
    global _holding
    _held.clear()  # a resident run process holds it afresh for each run
    _received.clear()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _hold)
        _holding = True


def take_over_sigterm() -> bool:
    """For a command that installs its own SIGTERM handler next: stop holding, and say
    whether a SIGTERM came while the process was starting."""
    global _holding
    _holding = False
    return _held.is_set()


def release_sigterm() -> None:
    """For every other command: the default SIGTERM again; one that was held ends the
    process now, as it would have when it came."""
    global _holding
    if not _holding:
        return
    _holding = False
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _held.is_set():
        os.kill(os.getpid(), signal.SIGTERM)
