"""The precision probe: what FP16 or BF16 does to an agent's model, against FP32.

>>> from genesis_fp16_infrastructure.probe import run_probe
>>> report = run_probe(plugin.probe_setup(None, seed=0), "cpu", steps=10)  # doctest: +SKIP
>>> print(report.table())                                                  # doctest: +SKIP

See docs/precision-probe.md for the variants, the measures and the thresholds.
"""

from genesis_fp16_infrastructure.probe.runner import run_probe, search_loss_scale
from genesis_fp16_infrastructure.probe.variants import build_variants

__all__ = ["build_variants", "run_probe", "search_loss_scale"]
