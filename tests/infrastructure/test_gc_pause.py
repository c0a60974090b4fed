"""paused_gc: the collector is off inside the block and back as it was after, errors too."""

from __future__ import annotations

import gc

import pytest

from genesis_fp16_infrastructure.machine_memory import paused_gc


def test_the_collector_is_paused_in_the_block_and_restored_after() -> None:
    """Enabled before: off inside, on after, also when the block raises; disabled before:
    left disabled."""
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
