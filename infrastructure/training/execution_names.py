"""The execution modes a run may request, importable without torch (like precision_names).

- ``auto``: a captured CUDA-graph step where the run can be captured, eager otherwise,
  with the reason; a measured ``auto`` (``infrastructure.training.calibration``) times
  both on CUDA and keeps the faster.
- ``on``: the captured step, or a clear error before the first step where it cannot be.
- ``off``: eager steps.
"""

from __future__ import annotations

CUDA_GRAPH_REQUESTS: tuple[str, ...] = ("auto", "on", "off")
EXECUTION_MODES: tuple[str, ...] = ("eager", "cuda_graph")
