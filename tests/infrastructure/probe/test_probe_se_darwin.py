"""The probe on the default SE-Darwin world model, through the plugin's own ProbeSetup."""

from __future__ import annotations

import pytest

from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.probe import run_probe


@pytest.mark.slow
def test_bf16_and_fp16_autocast_on_the_default_world_model_are_within_tolerance() -> None:
    """Both autocast variants are green on every measure; pure bf16 is not, at this lr."""
    setup = plugin.probe_setup(None, seed=0)
    report = run_probe(setup, steps=4, only=["bf16_autocast", "fp16_autocast", "bf16_pure"])
    for name in ("bf16_autocast", "fp16_autocast"):
        variant = report.variant(name)
        assert variant.error is None
        assert variant.overall == "green", variant.problems
        assert variant.measures.loss_rel_err > 0  # really ran in 16-bit: not FP32 again
    assert report.variant("bf16_pure").overall != "green"
