"""The execution vocabulary: how a run's step executes, torch-free.

What a run requests beside its precision, and what a measured ``auto`` chooses with it,
is how its step executes (``cuda_graph``, :data:`CUDA_GRAPH_REQUESTS`); its names are
here, torch-free for the same reasons as the precisions'
(:mod:`genesis_fp16_infrastructure.precision_names`):

- ``auto``: a captured CUDA-graph step where the run can be captured, eager otherwise,
  with the reason; a measured ``auto``
  (``genesis_fp16_infrastructure.training.run.calibration``) times both on CUDA and keeps
  the faster.
- ``on``: the captured step, or a clear error before the first step where it cannot be.
- ``off``: eager steps.

``compile`` is a second, separate request: ``on`` compiles the model's forward and
backward with ``torch.compile(mode=COMPILE_MODE)`` (Inductor kernels, CUDA graphs left to
us) and captures the whole step around them, reported as ``cuda_graph_compiled``; it
needs a step that can be captured and is an error before the first step where it cannot.
``off`` (the default until it is measured on a GPU) compiles nothing. With the log
interval, the two are the fields every step shares
(:class:`~genesis_fp16_infrastructure.training.step_spec.StepSpec`).
"""

from __future__ import annotations

CUDA_GRAPH_REQUESTS: tuple[str, ...] = ("auto", "on", "off")
COMPILE_REQUESTS: tuple[str, ...] = ("off", "on")
# Inductor's kernels without its own CUDA graphs: the captured step is the graph.
COMPILE_MODE = "max-autotune-no-cudagraphs"
EXECUTION_MODES: tuple[str, ...] = ("eager", "cuda_graph", "cuda_graph_compiled")
# Why a run resolved to a captured step ran eagerly after all (ResolvedExecution.fallback,
# the daemon's genesis_fp16_execution_fallbacks_total{reason}): its first captured steps
# differed from eager ones from the same state (run/verify_capture.py), or a capture raised.
FALLBACK_REASONS: tuple[str, ...] = ("verification_mismatch", "capture_failed")
