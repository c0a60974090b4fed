"""The execution modes a run may request, importable without torch (like precision_names).

- ``auto``: a captured CUDA-graph step where it can be captured *and* verified; eager
  otherwise. While the graph step has not passed its GPU tests, ``auto`` stays eager
  and says so (``CUDA_GRAPH_VERIFIED``).
- ``on``: the captured step, or a clear error before the first step where it cannot be.
- ``off``: eager steps.
"""

from __future__ import annotations

CUDA_GRAPH_REQUESTS: tuple[str, ...] = ("auto", "on", "off")
EXECUTION_MODES: tuple[str, ...] = ("eager", "cuda_graph")

# Flip to True once the GPU tests of the captured step (tests/infrastructure/training/
# test_cuda_graph.py) have passed on a GPU and the result is committed; until then
# ``auto`` does not choose a path that has never replayed on a GPU.
CUDA_GRAPH_VERIFIED = False
