"""The retrain loop as a library call: an agent other than SE-Darwin hands its request to
the judged run with the recipe's train and scores (the se_darwin plugin's) and gets its
own model, named for it, served by the same gate."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from genesis_fp16_agents.se_darwin import plugin
from genesis_fp16_infrastructure.agent_folder.pointer import served_checkpoint
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.judging.run import run_plugin
from genesis_fp16_infrastructure.world_model.predict import read_world_model_state


def _request(data: Path, folder: Path, **fields: object) -> TrainRequest:
    return TrainRequest(
        agent="builder",
        precision="fp32",
        precision_reason="test",
        state_dir=folder.parent,
        checkpoint_dir=folder,
        data_path=data,
        **{"steps": 6, "seed": 5, "options": {"cross_validation": False}, **fields},  # type: ignore[arg-type]
    )


def test_another_agent_trains_serves_and_is_named_in_its_model_and_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One call trains a first model for agent ``builder`` and serves it; the checkpoint's
    world-model state and the loop's log lines name ``builder``, never se_darwin; the same
    data again is up to date, with no step."""
    data = write_pool(tmp_path / "data", 400, 5, agent="builder")
    folder = tmp_path / "state" / "builder"
    with caplog.at_level(logging.INFO, logger="genesis_fp16_infrastructure"):
        first = run_plugin(plugin, _request(data, folder))
    assert first.agent == "builder" and first.steps == 6 and not first.up_to_date
    served = served_checkpoint(folder)
    assert served is not None and first.checkpoint is not None
    assert served.resolve() == Path(first.checkpoint).resolve()
    state = read_world_model_state(torch.load(served, weights_only=True))
    assert state["agent"] == "builder"
    loop_lines = [r.getMessage() for r in caplog.records if ".retrain." in r.name]
    assert any(line.startswith("builder task:") for line in loop_lines), loop_lines
    assert not [line for line in loop_lines if "se_darwin" in line], loop_lines

    again = run_plugin(plugin, _request(data, folder, steps=None))
    assert again.up_to_date and again.steps == 0


def test_the_result_is_typed_once_with_no_copy_in_extra(tmp_path: Path) -> None:
    """A first model's run reports its data, gate and phases in their typed fields and
    nowhere else (issue 53: extra held copies of data, phases and gate); its JSON reads
    back to the same records."""
    data = write_pool(tmp_path / "data", 400, 5, agent="builder")
    result = run_plugin(plugin, _request(data, tmp_path / "state" / "builder"))
    assert result.data is not None and result.data.change == "first"
    assert result.gate is not None and result.gate.outcome == "promoted"
    assert result.gate.served_id is None and result.gate.candidate_id is not None
    assert result.phases is not None and "train" in result.phases
    typed = {"data", "gate", "drift", "phases", "early_stop", "precision_calibration", "live"}
    typed |= {"up_to_date_against"}  # issue 58: typed fields, no longer in extra
    assert not typed & set(result.extra), sorted(result.extra)
    back = TrainResult.from_json(json.loads(json.dumps(result.to_json())))
    assert back.data == result.data and result.gate is not None and back.gate is not None
    assert back.gate.to_json() == result.gate.to_json()  # its NaN fields read back as NaN


def test_a_pool_over_its_limit_is_refused_naming_the_agents_own_setting(tmp_path: Path) -> None:
    """The memory guard's one line names the setting of the agent that ran the loop."""
    data = write_pool(tmp_path / "data", 50, 5, agent="builder")
    options = {"cross_validation": False, "max_pool_bytes": 1000}
    with pytest.raises(TrainRequestError) as refused:
        run_plugin(plugin, _request(data, tmp_path / "state" / "builder", options=options))
    assert "GENESIS_FP16_AGENTS__BUILDER__OPTIONS__MAX_POOL_BYTES" in str(refused.value)
    assert "se_darwin" not in str(refused.value).lower()
