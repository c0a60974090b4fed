"""The phase clock: seconds per phase, and the process's peak memory as each ended."""

from __future__ import annotations

import json
import subprocess
import sys

from genesis_fp16_infrastructure.machine_memory import PhaseClock, peak_rss_mib

# In a fresh process: a test process's own peak may already be past what one phase adds.
_GROW = """
import json
from genesis_fp16_infrastructure.machine_memory import PhaseClock
clock = PhaseClock()
with clock.phase("small"):
    pass
with clock.phase("large"):
    block = bytearray(256 * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touched: resident, not only reserved
print(json.dumps(clock.peaks()))
"""


def test_a_phase_that_grows_the_process_shows_the_new_peak() -> None:
    out = subprocess.run([sys.executable, "-c", _GROW], check=True, capture_output=True, text=True)
    peaks = json.loads(out.stdout)
    assert list(peaks) == ["small", "large"]
    assert peaks["large"] >= peaks["small"] + 200  # MiB


def test_peaks_never_fall_and_moving_seconds_keeps_them() -> None:
    clock = PhaseClock()
    with clock.phase("a"):
        pass
    with clock.phase("b"):
        pass
    peaks = clock.peaks()
    assert 0 < clock.peak_mib["a"] <= clock.peak_mib["b"] <= peak_rss_mib()
    clock.move("b", "c", 10.0)
    assert set(clock.to_json()) == {"a", "b", "c"} and clock.peaks() == peaks
