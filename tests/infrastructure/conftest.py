"""Fixtures for the library's tests in every subfolder: ``loads`` counts the checkpoints
unpickled (each ``torch.load``) while a test runs."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each torch.load while the test runs (a checkpoint unpickled), one entry per call."""
    import torch  # here, not at collection: a test that never asks loads no torch for it

    calls: list[int] = []
    real = torch.load

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    return calls
