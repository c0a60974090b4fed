"""The probe's known answers on small models built for one precision failure each."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from probe_toys import overflowing_model, setup_for, small_init_model

from genesis_fp16_infrastructure.errors import ProbeError
from genesis_fp16_infrastructure.probe import run_probe


def test_activation_past_fp16_max_makes_fp16_red_and_names_the_module() -> None:
    """An output of 1e5 overflows fp16: headroom red, the amplifier named; bf16 unaffected."""
    setup = setup_for(overflowing_model, features=4, components={"amp": ["amplifier"]})
    report = run_probe(
        setup,
        steps=1,
        only=["fp16_autocast", "bf16_autocast", "fp16_autocast+fp32[amp]", "fp16_pure"],
    )
    for name in ("fp16_autocast", "fp16_pure"):
        fp16 = report.variant(name)
        assert fp16.verdicts["headroom"] == "red"
        assert fp16.overall == "red"
        assert fp16.measures.activation_module == "amplifier"
        assert fp16.measures.activation_max > 65504
        assert any("'amplifier'" in p for p in fp16.problems)
    bf16 = report.variant("bf16_autocast")
    assert bf16.verdicts["headroom"] == "n/a"
    assert bf16.verdicts["loss"] == "green"
    # An FP32 island around the amplifier only moves the overflow into the next fp16 op.
    island = report.variant("fp16_autocast+fp32[amp]")
    assert island.fp32_modules == ("amplifier",)
    assert island.measures.activation_module == "head"
    assert island.verdicts["headroom"] == "red"


def test_pure_bf16_with_small_lr_leaves_most_parameters_unchanged_and_is_red() -> None:
    """lr 1e-5 on weights of 0.02 is below half a bf16 ulp: no FP32 master, no learning."""
    setup = setup_for(small_init_model, features=16, learning_rate=1e-5)
    report = run_probe(setup, steps=3, only=["bf16_pure", "bf16_autocast"])
    pure = report.variant("bf16_pure")
    assert pure.measures.unchanged_fraction > 0.5
    assert pure.verdicts["unchanged"] == "red"
    assert pure.overall == "red"
    assert any("unchanged per step" in p for p in pure.problems)
    # The same bf16 compute with FP32 master weights moves every parameter.
    master = report.variant("bf16_autocast")
    assert master.measures.unchanged_fraction < 0.01
    assert master.verdicts["unchanged"] == "green"
    assert report.variant("fp32").measures.unchanged_fraction < 0.01
    # The cheapest variant was passed over, and the layers that stopped it are named.
    assert report.recommended != "bf16_pure"
    assert "bf16_pure" in report.reasons
    assert set(report.blocking_modules["bf16_pure"]) <= {"0", "2"}
    assert report.blocking_modules["bf16_pure"]


def test_fp32_repeat_is_bit_identical_and_the_deterministic_setting_is_restored() -> None:
    """Deterministic algorithms make FP32 its own exact reference; the old setting returns."""
    assert not torch.are_deterministic_algorithms_enabled()
    report = run_probe(setup_for(small_init_model, features=16), steps=2, only=[])
    repeat = report.variant("fp32_repeat").measures
    assert repeat.loss_rel_err == 0.0
    assert repeat.grad_err == 0.0
    assert repeat.param_drift == 0.0
    assert not torch.are_deterministic_algorithms_enabled()
    assert [v.name for v in report.variants] == ["fp32", "fp32_repeat"]
    assert report.recommended == "fp32"  # nothing else ran


def test_a_setup_without_split_batch_gets_the_default_halves() -> None:
    """No split_batch: the probe cuts each tensor in two along its first dimension, the
    noise floor of a splitter that does the same by hand."""
    setup = setup_for(small_init_model, features=16)
    own = run_probe(setup, steps=1, only=[])
    default = run_probe(dataclasses.replace(setup, split_batch=None), steps=1, only=[])
    assert default.noise_floor == own.noise_floor > 0
    assert default.sign_noise == own.sign_noise


def test_report_json_is_one_serialisable_object_with_verdicts() -> None:
    """to_json survives json.dumps (inf as a string) and carries verdict and recommended."""
    setup = setup_for(overflowing_model, features=4)
    report = run_probe(setup, steps=1, only=["fp16_autocast"])
    out = json.loads(json.dumps(report.to_json()))
    assert out["verdict"]["fp16_autocast"] == "red"
    assert out["recommended"] == report.recommended
    fp16 = next(v for v in out["variants"] if v["name"] == "fp16_autocast")
    assert fp16["measures"]["loss_rel_err"] == "inf"
    assert math.isinf(report.variant("fp16_autocast").measures.loss_rel_err)


def test_unknown_component_module_and_unknown_variant_are_clear_errors() -> None:
    """A component naming a missing module, or an unknown variant, fails with the choices."""
    setup = setup_for(small_init_model, features=16, components={"heads": ["nope"]})
    report = run_probe(setup, steps=1, only=["bf16_autocast+fp32[heads]"])
    island = report.variant("bf16_autocast+fp32[heads]")
    assert island.overall == "red"
    assert island.error is not None and "'nope'" in island.error and "0" in island.error
    with pytest.raises(ProbeError, match=r"unknown variant\(s\) fp8.*bf16_autocast"):
        run_probe(setup, steps=1, only=["fp8"])
    with pytest.raises(ProbeError, match="optimizer 'lion'"):
        run_probe(setup, steps=1, optimizer="lion")


def test_table_lists_every_variant_marks_red_and_explains_the_recommendation() -> None:
    """The terminal table has one row per variant, '!' on red cells, and the reasons."""
    setup = setup_for(overflowing_model, features=4)
    report = run_probe(setup, steps=1, only=["fp16_autocast"])
    table = report.table()
    rows = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert {"fp32", "fp32_repeat", "fp16_autocast"} <= set(rows)
    assert rows["fp16_autocast"].rstrip().endswith("red")
    assert "!" in rows["fp16_autocast"]
    assert f"recommended: {report.recommended}" in table
    assert "module 'amplifier'" in table
