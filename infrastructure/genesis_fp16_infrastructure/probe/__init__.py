"""The precision probe: what FP16 or BF16 does to an agent's model, against FP32.

>>> from genesis_fp16_infrastructure.probe import run_probe
>>> report = run_probe(plugin.probe_setup(None, seed=0), "cpu", steps=10)  # doctest: +SKIP
>>> print(report.table())                                                  # doctest: +SKIP

See docs/precision-probe.md for the variants, the measures and the thresholds.
"""

from genesis_fp16_infrastructure.errors import ProbeError
from genesis_fp16_infrastructure.probe.report import (
    Measures,
    ProbeReport,
    VariantResult,
)
from genesis_fp16_infrastructure.probe.runner import OPTIMIZERS, run_probe
from genesis_fp16_infrastructure.probe.scale_search import ScaleSearch, search_loss_scale
from genesis_fp16_infrastructure.probe.variants import Variant, build_variants
from genesis_fp16_infrastructure.probe.verdict import Thresholds

__all__ = [
    "OPTIMIZERS",
    "Measures",
    "ProbeError",
    "ProbeReport",
    "ScaleSearch",
    "Thresholds",
    "Variant",
    "VariantResult",
    "build_variants",
    "run_probe",
    "search_loss_scale",
]
