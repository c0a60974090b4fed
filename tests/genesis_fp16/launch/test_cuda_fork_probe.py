"""The forked CUDA probe (genesis_fp16/launch/cuda_fork_probe.py) says whether a child of
this process could use CUDA: it passes where the child's CUDA works or there is no device,
and fails, saying why, where the child raises, exits with a code or hangs."""

from __future__ import annotations

import os
import time

import pytest

from genesis_fp16.launch import cuda_fork_probe


def _hang() -> str:
    """A probe child's CUDA that never answers (faked)."""
    time.sleep(600)
    return "never reached"


def test_the_probe_passes_on_a_host_without_a_cuda_device() -> None:
    """On the CPU test host the forked child finds no CUDA device and exits 0: the probe
    passes and says so."""
    assert cuda_fork_probe.probe_forked_cuda() == (True, "no CUDA device")


def test_what_the_probe_child_saw_comes_back_when_it_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child whose CUDA worked (faked) passes, with what it wrote about the device."""
    monkeypatch.setattr(cuda_fork_probe, "use_cuda", lambda: "used cuda:0 (a faked GPU)")
    assert cuda_fork_probe.probe_forked_cuda() == (True, "used cuda:0 (a faked GPU)")


def test_a_probe_child_that_raises_fails_with_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child whose CUDA raises (faked: the error a child of an initialised driver gets)
    fails the probe with that error and its exit code."""

    def broken() -> str:
        raise RuntimeError("CUDA error: initialization error")

    monkeypatch.setattr(cuda_fork_probe, "use_cuda", broken)
    usable, said = cuda_fork_probe.probe_forked_cuda()
    assert not usable
    assert said == "RuntimeError: CUDA error: initialization error (exit code 1)"


def test_a_probe_child_that_exits_with_a_code_fails_with_that_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child that ends with exit code 3 and says nothing (faked: ``os._exit(3)``) fails
    the probe, naming the code."""
    monkeypatch.setattr(cuda_fork_probe, "use_cuda", lambda: os._exit(3))
    assert cuda_fork_probe.probe_forked_cuda() == (False, "the probe ended with exit code 3")


def test_a_hung_probe_child_is_killed_at_its_time_and_fails_the_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child that hangs (faked: a 600 s sleep) is killed after the probe's time (1 s),
    not waited for, and the probe fails saying so."""
    monkeypatch.setattr(cuda_fork_probe, "use_cuda", _hang)
    started = time.monotonic()
    usable, said = cuda_fork_probe.probe_forked_cuda(seconds=1)
    assert (usable, said) == (False, "the probe did not finish in 1 s (killed)")
    assert time.monotonic() - started < 300  # killed, far short of the child's 600 s
