"""The optional extras a setting needs, looked up without importing them.

A setting that needs an extra is checked when the settings load, so that a daemon
configured for it refuses to start in one line instead of failing in the middle of a run.
"""

from __future__ import annotations

import importlib.util

TENSORBOARD_EXTRA = "pip install 'genesis-fp16[tensorboard]'"
BENCH_EXTRA = (
    "pip install 'genesis-fp16[bench]' (in a checkout: .venv/bin/pip install -e '.[bench]')"
)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a package blocked in sys.modules, a broken one
        return False


def bench_missing() -> str | None:
    """None when `bench` can write its report (matplotlib draws the plot), else one line
    naming the extra to install: checked before the first measurement, not after."""
    return None if _importable("matplotlib") else f"matplotlib is not installed: {BENCH_EXTRA}"


def tensorboard_missing() -> str | None:
    """None when tensorboard can be imported, else one line naming the extra to install.

    Looks the package up without importing it (settings are checked at every start-up).
    """
    return (
        None if _importable("tensorboard") else f"tensorboard is not installed: {TENSORBOARD_EXTRA}"
    )
