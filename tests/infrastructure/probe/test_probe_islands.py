"""FP32 islands when the agent's loss calls the model's submodules instead of model(...)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from probe_toys import Batch, halves, regression_batches
from torch import nn

from genesis_fp16_infrastructure.contract.plugin_api import ProbeSetup
from genesis_fp16_infrastructure.probe import run_probe

ISLANDS = [f"{p}_autocast+fp32[{c}]" for p in ("bf16", "fp16") for c in ("loss", "inner", "head")]


class TwoParts(nn.Module):
    """An encoder and a head with no forward of their own, as rlhf_ppo's probe model."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8))
        self.head = nn.Linear(8, 1)


def parts_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Mean squared error, calling the encoder and the head one after the other."""
    assert isinstance(model, TwoParts)
    x, y = batch
    return ((model.head(model.encoder(x)) - y) ** 2).mean()


def _setup(
    build: Callable[[], nn.Module], loss: Callable[[nn.Module, Batch], torch.Tensor]
) -> ProbeSetup:
    return ProbeSetup(
        build_model=build,
        loss=loss,
        batches=regression_batches(4),
        split_batch=halves,
        components={"inner": ["encoder.1"], "head": ["head"]},
        learning_rate=1e-2,
    )


def test_island_variants_run_when_the_loss_calls_submodules() -> None:
    """Every island variant runs, and its 16-bit loss really differs from FP32's."""
    torch.manual_seed(0)
    report = run_probe(_setup(TwoParts, parts_loss), steps=2, only=ISLANDS)
    for name in ISLANDS:
        variant = report.variant(name)
        assert variant.error is None, (name, variant.error)
        assert 0 < variant.measures.loss_rel_err < 0.1, name


def test_island_submodule_sees_and_returns_fp32_while_its_neighbour_runs_bf16() -> None:
    """Forward hooks see encoder.0 return bf16 and encoder.1 (the island) take and return fp32."""
    seen: dict[str, set[torch.dtype]] = {
        "encoder.0 out": set(),
        "island in": set(),
        "island out": set(),
    }

    def build() -> nn.Module:
        model = TwoParts()

        def neighbour(_m: nn.Module, _args: tuple[torch.Tensor], out: torch.Tensor) -> None:
            seen["encoder.0 out"].add(out.dtype)

        def island(_m: nn.Module, args: tuple[torch.Tensor], out: torch.Tensor) -> None:
            seen["island in"].add(args[0].dtype)
            seen["island out"].add(out.dtype)

        # The probe's deep copies of the model keep these hooks.
        model.encoder[0].register_forward_hook(neighbour)
        model.encoder[1].register_forward_hook(island)
        return model

    report = run_probe(_setup(build, parts_loss), steps=2, only=["bf16_autocast+fp32[inner]"])
    assert report.variant("bf16_autocast+fp32[inner]").error is None
    assert seen["encoder.0 out"] == {torch.float32, torch.bfloat16}  # bf16 only in the island run
    assert seen["island in"] == {torch.float32}
    assert seen["island out"] == {torch.float32}


def test_island_variants_that_cannot_keep_their_promise_are_reported_as_not_run() -> None:
    """A loss that calls no module, or never calls a component's module, did not run: red."""

    def weights_only(model: nn.Module, batch: Batch) -> torch.Tensor:
        assert isinstance(model, TwoParts)
        x, y = batch
        first = model.encoder[0]
        assert isinstance(first, nn.Linear)
        return ((x @ first.weight.T).sum(-1, keepdim=True) - y).pow(2).mean()

    report = run_probe(_setup(TwoParts, weights_only), steps=1, only=["bf16_autocast+fp32[loss]"])
    loss_island = report.variant("bf16_autocast+fp32[loss]")
    assert loss_island.overall == "red"
    assert loss_island.error is not None and "calls no module" in loss_island.error

    def encoder_only(model: nn.Module, batch: Batch) -> torch.Tensor:
        assert isinstance(model, TwoParts)
        x, y = batch
        return (model.encoder(x).sum(-1, keepdim=True) - y).pow(2).mean()

    report = run_probe(_setup(TwoParts, encoder_only), steps=1, only=["bf16_autocast+fp32[head]"])
    head_island = report.variant("bf16_autocast+fp32[head]")
    assert head_island.overall == "red"
    assert head_island.error is not None and "'head' never ran" in head_island.error


def test_an_island_naming_a_module_not_in_the_model_is_reported_as_not_run() -> None:
    """A component prefix the model does not have: the variant did not run, and says which."""
    setup = replace(_setup(TwoParts, parts_loss), components={"ghost": ["nope"]})
    report = run_probe(setup, steps=1, only=["bf16_autocast+fp32[ghost]"])
    ghost = report.variant("bf16_autocast+fp32[ghost]")
    assert ghost.overall == "red" and ghost.error is not None
    assert "component module 'nope' is not in the model" in ghost.error
