"""The settings of the commands that only read (``status``, ``agents``, ``model list``):
with a refused ``.env`` file they go on with its other lines and say so in one line on
stderr (genesis_fp16/config/settings_reading.py), where a writing command stops."""

from __future__ import annotations

import sys

from genesis_fp16.cli import UsageError
from genesis_fp16.config.settings import Settings, SettingsError
from genesis_fp16.config.settings_reading import load_settings_for_reading


def settings_for_reading() -> Settings:
    """The settings to read the state folder with; a bad environment is one line (exit 2)."""
    try:
        read = load_settings_for_reading()
    except SettingsError as exc:
        raise UsageError(f"invalid configuration: {exc}") from None
    if read.note is not None:
        print(f"genesis-fp16: warning: {read.note}", file=sys.stderr, flush=True)
    return read.settings
