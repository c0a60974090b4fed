"""Where a run's time went: wall seconds per named phase, measured with one clock.

clock = PhaseClock()
with clock.phase("read"):
    data = read(...)
clock.move("train", "eval", seconds_spent_evaluating)  # a phase nested in another
result["phases"], result["wall_seconds"] = clock.to_json(), clock.elapsed()
clock.peaks()  # the process's peak resident memory (MiB) as each phase ended
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from genesis_fp16_infrastructure.machine_memory import peak_rss_mib


class PhaseClock:
    """Seconds per phase, in the order phases were first timed, and the run's real time
    since the clock was made (phases need not cover all of it)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.peak_mib: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)
            self.peak_mib[name] = peak_rss_mib()

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def move(self, source: str, target: str, seconds: float) -> None:
        """Count ``seconds`` of ``source`` as ``target``'s (time measured inside it)."""
        seconds = min(seconds, self.seconds.get(source, 0.0))
        self.add(source, -seconds)
        self.add(target, seconds)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def to_json(self) -> dict[str, float]:
        return {name: round(value, 6) for name, value in self.seconds.items()}

    def peaks(self) -> dict[str, float]:
        """The process's peak resident memory in MiB as each phase last ended: the phase
        where it first reaches the run's peak is where the memory went."""
        return {name: round(value, 1) for name, value in self.peak_mib.items()}
