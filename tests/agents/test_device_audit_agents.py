"""Both built-in agents train, resume and probe under the device audit, on a CPU.

The audit (genesis_fp16.testing.device_audit) treats the run's device as
separate from the host, so a tensor factory, generator or torch.load that ignores ``request.device``
fails here as it would on a GPU. This caught rlhf_ppo's CPU sampling generator and the
host ``torch.arange`` in its sequence-error diagnostic before either reached a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16.testing.device_audit import DeviceAudit, DeviceAuditError
from genesis_fp16_agents.rlhf_ppo import plugin as rlhf_ppo
from genesis_fp16_agents.rlhf_ppo.task import PPOTask
from genesis_fp16_agents.se_darwin import plugin as se_darwin
from genesis_fp16_infrastructure.api import run_plugin
from genesis_fp16_infrastructure.probe import run_probe

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the audit stands in for a GPU; this host has one"
)


def _train(plugin: Any, tmp: Path, **fields: Any) -> TrainResult:
    request = TrainRequest(
        agent=plugin.name,
        precision_reason="test",
        state_dir=tmp,
        checkpoint_dir=tmp / "checkpoints",
        device="cpu",
        seed=1,
        **{"precision": "bf16", **fields},
    )
    with DeviceAudit():  # se_darwin: the product's path, the judged run around its train
        return run_plugin(plugin, request) if plugin is se_darwin else plugin.train(request)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_rlhf_ppo_trains_and_resumes_under_the_audit(tmp_path: Path, precision: str) -> None:
    """Rollouts, updates, diagnostics, evaluation and a resume touch only the run's device
    (or the host on purpose); the resumed run goes on from the checkpoint."""
    options = {"batch_size": 16, "preset": "fp16_all" if precision == "fp16" else "fp32_baseline"}
    first = _train(rlhf_ppo, tmp_path, precision=precision, steps=4, options=options)
    again = _train(rlhf_ppo, tmp_path, precision=precision, steps=4, options=options)
    assert (first.steps, again.steps) == (4, 4)
    assert again.extra["resumed_from"] == str(first.checkpoint)


@pytest.mark.parametrize("cross_validation", [True, False])
def test_se_darwin_trains_and_resumes_under_the_audit(
    tmp_path: Path, cross_validation: bool
) -> None:
    """The world model's data, the ensemble or one network, evaluation, the judged run's
    scoring and gate, and a forced resume."""
    data = se_darwin.generate_sample_data(tmp_path / "data", 200, seed=0)
    options = {"cross_validation": cross_validation}
    first = _train(se_darwin, tmp_path, data_path=data, steps=6, options=options)
    again = _train(
        se_darwin, tmp_path, data_path=data, steps=12, resume=True, forced=True, options=options
    )
    assert first.steps > 0 and first.checkpoint is not None
    # The served model's own data and request, forced: the new candidate continues a copy
    # of the served checkpoint in its own folder (issue 35), from the same step.
    resumed = Path(str(again.extra["resumed_from"]))
    assert resumed.name == first.checkpoint.name and resumed != first.checkpoint
    assert again.extra["total_steps"] == first.extra["total_steps"] + again.steps


@pytest.mark.parametrize("plugin", [rlhf_ppo, se_darwin], ids=lambda p: p.name)
def test_the_precision_probe_runs_under_the_audit(tmp_path: Path, plugin: Any) -> None:
    """The probe's model, frozen batch and variants are moved to the probed device."""
    data = plugin.generate_sample_data(tmp_path / "data", 64, seed=0)
    setup = plugin.probe_setup(data, seed=0)
    with DeviceAudit():
        report = run_probe(setup, "cpu", steps=2, seed=0)
    assert report.device == "cpu" and report.variants


def test_the_audit_refuses_rlhf_ppos_old_cpu_sampling_generator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect that failed every rlhf_ppo run on an H100, put back (rollouts sampled
    from the engine's one CPU generator): the audit stops it at the multinomial."""

    def with_one_cpu_generator(
        self: PPOTask, epoch: int, seed: int
    ) -> tuple[torch.Generator, torch.Generator]:
        host = torch.Generator().manual_seed(seed * 100_003 + epoch)
        return host, host  # as before the fix: sampling from the host stream

    monkeypatch.setattr(PPOTask, "generators", with_one_cpu_generator)
    with pytest.raises(DeviceAuditError, match=r"torch\.multinomial draws from a host gen"):
        _train(rlhf_ppo, tmp_path, precision="fp32", steps=4, options={"batch_size": 16})
