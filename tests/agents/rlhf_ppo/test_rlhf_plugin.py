"""The rlhf_ppo plugin end to end: training improves reward, checkpoints resume, probe setup."""

from __future__ import annotations

import json
import math
import shutil
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16.plugin_api import AgentPlugin, TrainRequest, TrainRequestError, TrainResult
from genesis_fp16_agents.rlhf_ppo import plugin
from genesis_fp16_infrastructure.probe.runner import halve_batch
from genesis_fp16_infrastructure.training import TrainingSummary

RANDOM_POLICY_REWARD = 0.25  # mean partial credit of a uniform next digit


def _train(tmp: Path, precision: str, steps: int, **kw: Any) -> TrainResult:
    fields: dict[str, Any] = {
        "agent": "rlhf_ppo",
        "precision": precision,
        "precision_reason": "test",
        "state_dir": tmp,
        "checkpoint_dir": tmp / "checkpoints",
        "steps": steps,
        "seed": 1,
        **kw,
    }
    return plugin.train(TrainRequest(**fields))


def test_plugin_is_registered_as_an_entry_point() -> None:
    """The genesis_fp16.agents group names rlhf_ppo, and it satisfies AgentPlugin."""
    (ep,) = [e for e in entry_points(group="genesis_fp16.agents") if e.name == "rlhf_ppo"]
    loaded = ep.load()
    assert loaded is plugin and isinstance(loaded, AgentPlugin)


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "preset"), [("fp32", None), ("auto", "mixed_recommended")])
def test_ppo_improves_reward(tmp_path: Path, precision: str, preset: str | None) -> None:
    """30 PPO iterations lift the exact reward well above the random policy's 0.25."""
    data = plugin.generate_sample_data(tmp_path / "data", 128, seed=0)
    options = {"preset": preset} if preset else {}
    result = _train(tmp_path, precision, steps=120, data_path=data, options=options)
    assert result.extra["preset"] == ("fp32_baseline" if precision == "fp32" else preset)
    first = result.eval["reward_first_iteration"]
    assert first == pytest.approx(RANDOM_POLICY_REWARD, abs=0.05)
    assert result.eval["reward"] > first + 0.25, result.eval
    diag = result.extra["diagnostics"]
    assert all(isinstance(v, float) for v in diag.values())
    if preset == "mixed_recommended":
        assert diag["mismatch_abs_dlogp_mean"] > 0  # bf16 rollout vs bf16-autocast trainer
        assert result.precision_used == "bf16"
    else:
        assert diag["mismatch_abs_dlogp_max"] < 1e-5


def test_fp32_rollback_reports_what_ran(tmp_path: Path) -> None:
    """precision fp32 with a bf16 preset runs fp32_baseline and says so in the result."""
    result = _train(tmp_path, "fp32", steps=4, options={"preset": "bf16_pure"})
    assert result.precision_used == "fp32"
    assert result.extra["preset"] == "fp32_baseline"
    assert result.extra["preset_requested"] == "bf16_pure"
    assert "overridden" in result.precision_reason
    assert result.extra["master_weights"] == "fp32"
    assert json.dumps(result.to_json())  # the train --json object serialises


def test_unknown_option_is_refused(tmp_path: Path) -> None:
    """A misspelt option fails before training, naming the valid ones."""
    with pytest.raises(ValueError, match="unknown option"):
        _train(tmp_path, "auto", steps=4, options={"kl_coeff": 0.1})


def test_a_preset_the_precision_cannot_run_is_refused_in_the_agents_name(tmp_path: Path) -> None:
    """The library's PresetError (raised at the first iteration, inside fit()) reaches the
    daemon as this agent's one-line TrainRequestError."""
    with pytest.raises(TrainRequestError) as info:
        _train(tmp_path, "fp16", steps=4, options={"preset": "bf16_pure"})
    assert str(info.value) == (
        "rlhf_ppo: preset 'bf16_pure' conflicts with precision 'fp16'; "
        "use preset 'fp16_all' or precision 'bf16'/'auto'"
    )


@pytest.mark.slow
def test_resume_continues_bit_for_bit(tmp_path: Path) -> None:
    """8 steps + resumed 8 steps end in the same weights as 16 straight steps (fp16 too)."""
    opts = {"preset": "fp16_all", "batch_size": 16}
    split_a = _train(tmp_path / "a", "fp16", steps=8, options=opts)
    split_b = _train(tmp_path / "a", "fp16", steps=8, options=opts)
    straight = _train(tmp_path / "b", "fp16", steps=16, options=opts)
    assert split_a.extra["resumed_from"] is None
    assert split_b.extra["resumed_from"] == str(split_a.checkpoint)
    assert split_b.steps == 8 and straight.steps == 16
    a = torch.load(split_b.checkpoint, weights_only=True)  # type: ignore[arg-type]
    b = torch.load(straight.checkpoint, weights_only=True)  # type: ignore[arg-type]
    assert a["step"] == b["step"] == 16
    for key, tensor in b["model"].items():
        assert torch.equal(a["model"][key], tensor), key
    assert a["scaler"]["scale"] == b["scaler"]["scale"]


@pytest.mark.slow
def test_a_stopped_run_is_finished_by_the_next_not_extended(tmp_path: Path) -> None:
    """A 16-step run stopped at step 8 (the daemon's stop, Ctrl-C), run again with the same
    budget (a daemon start, train, --resume): it trains the 8 left and ends where 16
    straight steps end, bit for bit; a run after that finished one trains 16 more."""
    opts = {"batch_size": 16}
    logs: list[TrainingSummary] = []
    stop = lambda: bool(logs) and logs[-1].step >= 8  # noqa: E731
    stopped = _train(tmp_path / "a", "fp32", steps=16, options=opts, log_interval=4,
                     on_log=logs.append, should_stop=stop)  # fmt: skip
    assert stopped.stopped_early and 0 < stopped.steps < 16
    finished = _train(tmp_path / "a", "fp32", steps=16, options=opts)
    straight = _train(tmp_path / "b", "fp32", steps=16, options=opts)
    assert finished.steps == 16 - stopped.steps and not finished.stopped_early
    a = torch.load(finished.checkpoint, weights_only=True)  # type: ignore[arg-type]
    b = torch.load(straight.checkpoint, weights_only=True)  # type: ignore[arg-type]
    assert a["step"] == b["step"] == 16 and a["run"]["complete"] is True
    assert all(torch.equal(a["model"][k], t) for k, t in b["model"].items())
    more = _train(tmp_path / "a", "fp32", steps=16, options=opts)
    assert more.steps == 16
    assert torch.load(more.checkpoint, weights_only=True)["step"] == 32  # type: ignore[arg-type]


def test_on_log_receives_core_training_summaries(tmp_path: Path) -> None:
    """on_log gets a TrainingSummary from the core Trainer every log_interval steps."""
    logs: list[TrainingSummary] = []
    _train(tmp_path, "bf16", steps=8, log_interval=4, on_log=logs.append,
           options={"batch_size": 16})  # fmt: skip
    assert [s.step for s in logs] == [4, 8]
    assert all(s.precision == "bf16" for s in logs)


def test_the_last_summary_is_the_runs_end_past_the_last_log_interval(tmp_path: Path) -> None:
    """A run of 10 steps logged every 4 reports a last summary at step 10 with the run's
    samples and final train loss: the metrics fed by on_log end at the run's totals."""
    logs: list[TrainingSummary] = []
    result = _train(tmp_path, "fp32", steps=10, log_interval=4, on_log=logs.append,
                    options={"batch_size": 16})  # fmt: skip
    assert [s.step for s in logs] == [4, 8, 10] and result.steps == 10
    assert logs[-1].optimizer_steps + logs[-1].skipped_steps == 10
    assert logs[-1].samples * 4 == logs[0].samples * 10  # every step's samples, the last two too
    assert logs[-1].train_loss == result.final_train_loss


def test_on_diagnostics_receives_every_iteration(tmp_path: Path) -> None:
    """on_diagnostics gets each iteration's diagnostics while training; the last is the result's."""
    seen: list[dict[str, float]] = []
    result = _train(tmp_path, "bf16", steps=8, on_diagnostics=seen.append,
                    options={"batch_size": 16})  # fmt: skip
    assert len(seen) == result.extra["iterations"] >= 2
    final = result.extra["diagnostics"]
    assert seen[-1].keys() == final.keys()
    assert all(
        v == final[k] or (math.isnan(v) and math.isnan(final[k])) for k, v in seen[-1].items()
    )
    assert "mismatch_k3" in seen[0]


def test_sample_data_and_probe_setup(tmp_path: Path) -> None:
    """The task file round-trips; the probe model is reproducible and its loss trains."""
    path = plugin.generate_sample_data(tmp_path, 16, seed=3)
    doc = json.loads(path.read_text())
    assert len(doc["eval_prompts"]) == 16 and doc["task"]["vocab"] == 10
    setup = plugin.probe_setup(path, seed=0)
    m1, m2 = setup.build_model(), setup.build_model()
    for (n, p1), p2 in zip(m1.state_dict().items(), m2.state_dict().values(), strict=True):
        assert torch.equal(p1, p2), n
    names = [n for n, _ in m1.named_modules()]
    for prefixes in setup.components.values():
        assert all(any(n.startswith(p) for n in names) for p in prefixes)
    assert setup.split_batch is None  # the probe's default halves every tensor
    half, other = halve_batch(setup.batches[0])
    assert half["seqs"].shape[0] + other["seqs"].shape[0] == setup.batches[0]["seqs"].shape[0]
    assert half["old_logp"].shape[0] == half["seqs"].shape[0]
    loss = setup.loss(m1, setup.batches[0])
    loss.backward()
    grads = [p.grad for n, p in m1.named_parameters() if n.startswith("policy.")]
    assert torch.isfinite(loss) and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_auto_runs_the_preset_of_the_decision_not_an_explicit_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under auto decide() picks bf16 (here a native-bf16 CPU) and the preset follows it:
    the log and the result say so, not "bf16 requested explicitly"."""
    from genesis_fp16_infrastructure.training.precision import decide
    from genesis_fp16_infrastructure.training.precision.decide import DeviceCapabilities

    caps = DeviceCapabilities("cpu", True, False, "test: bf16 taken as native")
    monkeypatch.setattr(decide, "detect_capabilities", lambda device: caps)
    with caplog.at_level("INFO"):
        result = _train(tmp_path, "auto", steps=4)
    text = caplog.text
    assert "requested explicitly" not in text
    assert "precision bf16 (auto -> bf16: CPU with native bf16" in text  # the one decision
    assert "rlhf_ppo preset mixed_recommended (auto -> bf16" in text
    assert result.extra["preset"] == "mixed_recommended" and result.precision_used == "bf16"
    assert "auto -> bf16: CPU with native bf16" in result.precision_reason


def test_the_preset_follows_fits_one_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fit() decides once; the task only follows: one decide() in the run, and what ran
    (fp32, so fp32_baseline over the named bf16 preset) is that decision. Counted where
    fit() decides: PrecisionPolicy.create for an explicit name or the rule, the
    calibration for a measured auto."""
    from genesis_fp16_infrastructure.training.precision import precision
    from genesis_fp16_infrastructure.training.run import calibration

    calls: list[object] = []
    decide = calibration.decide

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return decide(*args, **kwargs)

    monkeypatch.setattr(calibration, "decide", counted)
    monkeypatch.setattr(precision, "decide", counted)
    result = _train(tmp_path, "fp32", steps=4, options={"preset": "bf16_pure"})
    assert len(calls) == 1
    assert result.precision_used == "fp32" and result.extra["preset"] == "fp32_baseline"


def test_a_measured_auto_times_the_ppo_update_and_the_preset_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """precision.mode=measure (the daemon's default) is honoured: auto is decided by timing
    the update steps, cached in precision.cache, and the preset is the decision's."""
    from genesis_fp16.plugin_api import PrecisionRequest
    from genesis_fp16_infrastructure.training.precision import decide
    from genesis_fp16_infrastructure.training.precision.decide import DeviceCapabilities

    # Two candidates on any CPU (fp32 and bf16), so there is something to time.
    caps = DeviceCapabilities("cpu", True, False, "test: bf16 taken as native")
    monkeypatch.setattr(decide, "detect_capabilities", lambda device: caps)
    cache = tmp_path / "calibration.json"
    request = PrecisionRequest("auto", mode="measure", cache=cache)
    result = _train(tmp_path, request, steps=4, options={"batch_size": 16})  # type: ignore[arg-type]
    calibration = result.precision_calibration
    assert calibration is not None and cache.exists()
    assert {row.precision for row in calibration.rows} == {"fp32", "bf16"}
    expected = {"fp32": "fp32_baseline", "bf16": "mixed_recommended", "fp16": "fp16_all"}
    assert result.extra["preset"] == expected[result.precision_used]


def test_a_checkpoint_cadence_writes_one_at_each_iteration_end_it_falls_in(tmp_path: Path) -> None:
    """checkpoint_steps=6 with 4-step iterations: files at steps 8, 12 (the first
    iteration ends at or after 6, 12) and the end, 16; every one at an iteration start."""
    result = _train(tmp_path, "fp32", steps=16, checkpoint_steps=6, options={"batch_size": 16})
    files = sorted((tmp_path / "checkpoints").glob("ckpt-*.pt"))
    states = [torch.load(f, weights_only=True) for f in files]
    assert [(s["step"], s["epoch"], s["batch"]) for s in states] == [
        (8, 2, 0), (12, 3, 0), (16, 4, 0),
    ]  # fmt: skip
    assert result.checkpoint == files[-1]


def _policy(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The policy's weights in a checkpoint's model state, by the policy's own names."""
    return {
        k.removeprefix("policy."): v for k, v in state["model"].items() if k.startswith("policy.")
    }


@pytest.mark.slow
def test_a_continued_policy_is_its_own_kl_reference(tmp_path: Path) -> None:
    """A run continuing another run's checkpoint (the served policy, copied into a new
    candidate's folder) takes that policy as its KL reference, not the first run's initial
    policy; the reference then travels in its own checkpoints, so a resume keeps it."""
    opts = {"batch_size": 16}
    served_dir, candidate_dir = tmp_path / "cand-a", tmp_path / "cand-b"
    first = _train(tmp_path, "fp32", steps=8, options=opts, checkpoint_dir=served_dir)
    served = torch.load(first.checkpoint, weights_only=True)  # type: ignore[arg-type]
    initial = served["extra"]["reference"]
    assert served["extra"]["reference_of"] == "cand-a"
    assert any(not torch.equal(initial[k], v) for k, v in _policy(served).items())
    candidate_dir.mkdir()
    shutil.copy(first.checkpoint, candidate_dir)  # type: ignore[arg-type]
    continued = _train(tmp_path, "fp32", steps=8, options=opts, checkpoint_dir=candidate_dir)
    state = torch.load(continued.checkpoint, weights_only=True)  # type: ignore[arg-type]
    assert state["step"] == 16 and state["extra"]["reference_of"] == "cand-b"
    reference = state["extra"]["reference"]
    assert all(torch.equal(reference[k], v) for k, v in _policy(served).items())
    # Resumed from its own checkpoint, the same folder keeps the reference it saved.
    again = _train(tmp_path, "fp32", steps=8, options=opts, checkpoint_dir=candidate_dir)
    kept = torch.load(again.checkpoint, weights_only=True)["extra"]["reference"]  # type: ignore[arg-type]
    assert all(torch.equal(kept[k], v) for k, v in reference.items())
