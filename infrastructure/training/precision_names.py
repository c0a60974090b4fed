"""The precision names a run may request, importable without torch.

Configuration (the guard's ladder, the daemon's settings) checks names against these
tuples at start-up; keeping them apart from :mod:`infrastructure.training.precision`
lets it do so without paying for the torch import.
"""

from __future__ import annotations

PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")
REQUESTABLE: tuple[str, ...] = (*PRECISIONS, "auto")
