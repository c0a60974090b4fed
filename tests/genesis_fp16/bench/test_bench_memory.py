"""The memory formula, the count of saved activations it needs, and the table that sets
measured peaks beside it (the CUDA table itself is measured by make gpu-check)."""

from __future__ import annotations

import torch
from torch import nn

from genesis_fp16.bench.memory import (
    memory_table,
    predicted_bytes,
    predicted_saving,
    saved_activation_elements,
)


def test_the_formula_saves_nothing_until_ba_passes_p_and_40_percent_at_21p() -> None:
    """(2BA - 2P) / (16P + 4BA): negative below BA = P, zero at it, 40% at BA = 21P, and
    it is what the two byte totals say."""
    p, a = 1_000_000, 1_000
    assert predicted_saving(p, 100, a) < 0
    assert predicted_saving(p, 1_000, a) == 0.0
    assert abs(predicted_saving(p, 21_000, a) - 0.4) < 1e-12
    for batch in (64, 4096):
        fp32, mixed = predicted_bytes(p, batch, a, False), predicted_bytes(p, batch, a, True)
        assert abs((fp32 - mixed) / fp32 - predicted_saving(p, batch, a)) < 1e-12


def test_saved_activations_are_counted_per_sample_without_the_weights() -> None:
    """Linear(8, 16) -> ReLU -> Linear(16, 1): autograd saves the input (8), the first
    output or the ReLU's (16) and the second Linear's input (16), per sample; the weights
    it saves are parameters and do not count."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    batch = torch.randn(4, 8)
    count = saved_activation_elements(model, lambda m, x: m(x).sum(), batch, 4)
    assert 8 + 16 <= count <= 8 + 16 + 16
    assert all(p.grad is None for p in model.parameters())  # it leaves no gradient behind


def test_the_table_sets_each_rows_saving_beside_the_prediction() -> None:
    """A bf16 row at 60 MiB against fp32's 100 is a 40% saving, printed beside the
    formula's; rows of other runners and rows without memory are left out."""
    rows = [
        {"runner": "ours", "batch_size": "64", "precision_requested": "fp32", "peak_mem_mb": "100"},
        {"runner": "ours", "batch_size": "64", "precision_requested": "bf16", "peak_mem_mb": "60"},
        {"runner": "hand", "batch_size": "64", "precision_requested": "bf16", "peak_mem_mb": "1"},
        {
            "runner": "ours-graph",
            "batch_size": "64",
            "precision_requested": "fp16",
            "peak_mem_mb": "",
        },
    ]
    table = memory_table(rows, params=1_000_000, activations=1_000)
    lines = [line for line in table.splitlines() if line.startswith("| eager")]
    assert len(lines) == 2 and "| fp32 | 100 | - | - |" in lines[0]
    predicted = f"{predicted_saving(1_000_000, 64, 1_000):+.1%}"
    assert f"| bf16 | 60 | +40.0% | {predicted} |" in lines[1]
    assert "captured" not in table and "| 1 |" not in table
