"""A gpu test that leaves the default CUDA generator stuck in capture state is named.

A capture invalidated mid-way (a host sync inside it) throws before torch's capture
epilogue: the default CUDA generator stays marked as capturing and the current stream
stays the capture's side stream, so every later eager draw, dropout or capture in the
process raises "Offset increment outside graph capture encountered unexpectedly"
(PyTorch #171263; forensics-2026-11-26.md, section 5). tests/conftest.py probes one draw
after each gpu test; a stuck generator is healed, so the next test starts clean, and the
test that left it so fails by name instead of every test after it.
"""

from __future__ import annotations

from types import ModuleType

STUCK = "Offset increment"


def stuck_generator(torch: ModuleType) -> str | None:
    """The error of one eager CUDA draw when the generator is stuck in capture state, else
    None; any other error is raised."""
    try:
        torch.empty(1, device="cuda").uniform_()
    except RuntimeError as exc:
        if STUCK not in str(exc):
            raise
        return " ".join(str(exc).split())
    return None


def heal_generator(torch: ModuleType) -> None:
    """The default stream made current again, and each default CUDA generator given a clean
    copy of its own state (measured on the H200 to heal draws, dropout and captures)."""
    torch.cuda.set_stream(torch.cuda.default_stream())
    for generator in torch.cuda.default_generators:
        generator.graphsafe_set_state(generator.clone_state())


def left_stuck(torch: ModuleType, test: str) -> str | None:
    """None when ``test`` left the generator usable; else heal it and say what ``test`` did
    (and whether the heal worked) in one line."""
    error = stuck_generator(torch)
    if error is None:
        return None
    heal_generator(torch)
    after = stuck_generator(torch)
    healed = "healed for the next test" if after is None else f"still stuck after a heal: {after}"
    return f"{test} left the CUDA generator in capture state ({error}); {healed}"
