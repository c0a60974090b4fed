"""Capture and restore every random number generator a training run draws from.

The state is plain data (tensors, ints, lists) so that it survives
``torch.load(weights_only=True)``::

    state = capture_rng_state()
    ...  # draw random numbers
    restore_rng_state(state)  # the same numbers come again

Covered: torch's CPU generator, every CUDA device's generator (when CUDA is initialised),
Python's ``random`` and, when numpy has been imported by someone, numpy's global generator.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import torch

TORCH_CPU = "torch_cpu"
TORCH_CUDA = "torch_cuda"
PYTHON = "python"
NUMPY = "numpy"


def capture_rng_state() -> dict[str, Any]:
    """Return the current state of all generators as a ``weights_only``-safe dict."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        TORCH_CPU: torch.get_rng_state(),
        PYTHON: [version, list(internal), gauss],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state[TORCH_CUDA] = list(torch.cuda.get_rng_state_all())
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kind, keys, pos, has_gauss, cached = numpy.random.get_state()
        state[NUMPY] = [kind, torch.from_numpy(keys.copy()), int(pos), int(has_gauss), cached]
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put every generator back to a state from :func:`capture_rng_state`.

    A part the state lacks (numpy was not imported when it was captured, or it came from
    a machine without CUDA) leaves that generator as it is.
    """
    torch.set_rng_state(state[TORCH_CPU])
    version, internal, gauss = state[PYTHON]
    random.setstate((version, tuple(internal), gauss))
    cuda_states = state.get(TORCH_CUDA)
    if cuda_states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda_states[: torch.cuda.device_count()])
    numpy = sys.modules.get("numpy")
    if numpy is not None and NUMPY in state:
        kind, keys, pos, has_gauss, cached = state[NUMPY]
        numpy.random.set_state((kind, keys.numpy(), pos, has_gauss, cached))


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), Python's ``random`` and numpy, if it is imported."""
    random.seed(seed)
    torch.manual_seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
