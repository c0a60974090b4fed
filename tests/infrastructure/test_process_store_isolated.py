"""The suite's isolation of this process's memory store (``tests/conftest.py``): a test
that makes the store (an in-process judged run does) leaves none for the next test of its
worker. A CI run failed without it: ``test_kept_encode``'s in-process runs left a store,
and ``test_calibration_clock``'s later calibration reused a winner untimed."""

from __future__ import annotations

from genesis_fp16_infrastructure import kept_in_memory


def test_a_test_that_makes_the_store() -> None:
    """Makes this process's store, as an in-process run with a keep budget does."""
    assert kept_in_memory.process_memory(2**20) is not None
    assert kept_in_memory.current() is not None


def test_the_next_test_starts_without_it() -> None:
    """Runs after the test above (one file runs in one worker, in order): no store."""
    assert kept_in_memory.current() is None
