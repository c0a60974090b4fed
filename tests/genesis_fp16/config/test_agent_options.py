"""Agent options: declared by the plugins, listed, set from the CLI and .env, checked first."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from cli_fork import run_cli
from daemon_harness import DaemonFactory, daemon_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "commands"))  # test_cli_train
from test_cli_train import _cli, _last_json, _one_line_error

from genesis_fp16.jobs.run_request import parse_option_flags, resolve_options
from genesis_fp16.plugin_api import TrainRequestError, declared_options
from genesis_fp16_agents.rlhf_ppo import plugin as rlhf_ppo
from genesis_fp16_agents.se_darwin import plugin as se_darwin
from genesis_fp16_infrastructure.contract.split import HELD_OUT
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain.split import judged_ids
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor


def test_options_from_settings_then_flags_are_typed_and_checked() -> None:
    """Settings give the base, --option wins; values come typed; bad ones name the source."""
    options = resolve_options(
        "rlhf_ppo",
        declared_options(rlhf_ppo),
        {"preset": "bf16_pure", "kl_coef": "0.1"},
        parse_option_flags(["preset=bf16_fp32_kl", "ppo_epochs=1"]),
    )
    assert options == {"preset": "bf16_fp32_kl", "kl_coef": 0.1, "ppo_epochs": 1}
    with pytest.raises(TrainRequestError) as info:
        resolve_options("rlhf_ppo", declared_options(rlhf_ppo), {"preset": "bf16_fast"})
    message = str(info.value)
    assert message.startswith("GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__PRESET: agent rlhf_ppo")
    assert "'bf16_fast' is not one of fp32_baseline," in message and "bf16_fp32_kl" in message
    with pytest.raises(TrainRequestError, match=r"--option hiden=8: .*did you mean 'hidden'"):
        resolve_options("se_darwin", declared_options(se_darwin), {}, {"hiden": "8"})
    with pytest.raises(TrainRequestError, match="'many' is not an int"):
        resolve_options("se_darwin", declared_options(se_darwin), {}, {"batch_size": "many"})
    with pytest.raises(TrainRequestError, match="expected KEY=VALUE"):
        parse_option_flags(["preset"])


def test_agents_json_lists_every_option_of_both_built_in_agents(tmp_path: Path) -> None:
    """`agents --json` has name, type, default, choices and help of each declared option."""
    proc = run_cli(
        ["agents", "--json"],
        cwd=tmp_path,
        env=daemon_env({}, fixtures=False),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    names = {name: [o["name"] for o in rows[name]["options"]] for name in rows}
    assert {"preset", "rollout_precision", "lr", "batch_size", "kl_coef"} <= set(names["rlhf_ppo"])
    assert {"preset", "hidden", "depth", "learning_rate", "batch_size"} <= set(names["se_darwin"])
    preset = next(o for o in rows["rlhf_ppo"]["options"] if o["name"] == "preset")
    assert "bf16_fp32_kl" in preset["choices"] and preset["type"] == "str" and preset["help"]
    learning_rate = next(o for o in rows["se_darwin"]["options"] if o["name"] == "learning_rate")
    assert learning_rate["type"] == "float" and learning_rate["default"] == 0.003


@pytest.mark.slow
def test_train_option_preset_runs_the_kl_in_fp32(tmp_path: Path) -> None:
    """`train rlhf_ppo --option preset=bf16_fp32_kl --steps 10 --json`: the KL ran in fp32."""
    out = _last_json(
        _cli(
            tmp_path,
            "train",
            "rlhf_ppo",
            "--option",
            "preset=bf16_fp32_kl",
            "--steps",
            "10",
            "--json",
        )
    )
    extra = out["extra"]
    assert isinstance(extra, dict)
    assert extra["preset"] == "bf16_fp32_kl" and extra["components"]["kl"] == "fp32"
    assert extra["kl_dtype_seen"] == "torch.float32"
    assert "preset bf16_fp32_kl" in str(out["precision_reason"])


def test_train_option_final_fit_whole_serves_the_refit(tmp_path: Path) -> None:
    """`train se_darwin --option final_fit=whole --json`: the refit trains on every record
    the judged run does not hold out; extra.final_fit names its checkpoint, in the
    candidate's folder, which the prediction API loads from the agent's folder (its
    served-model pointer); a bad value is one line."""
    data = write_pool(tmp_path / "data", 300, seed=4)
    ckpt = tmp_path / "ckpt"
    proc = _cli(
        tmp_path, "train", "se_darwin", "--option", "final_fit=whole", "--precision", "fp32",
        "--data", str(data), "--checkpoint-dir", str(ckpt), "--json",
    )  # fmt: skip
    out = _last_json(proc)
    extra = out["extra"]
    assert isinstance(extra, dict)
    record = extra["final_fit"]
    # The refit learns every labelled record but the judged run's held-out ones.
    columns = read_trajectories(data).columns
    held = int(HELD_OUT.of_ids(judged_ids(columns)).sum())
    assert 0 < held < extra["examples"]
    assert record["mode"] == "whole" and record["records"] == extra["examples"] - held
    assert out["checkpoint"] == record["checkpoint"]
    # The refit is a candidate of the folder (its own subfolder), served through served.json.
    assert Path(record["checkpoint"]).parent.parent == ckpt / "candidates"
    # Both sides on the CPU: on a GPU host the run trained, and saved its tensors, on cuda.
    served = WorldModelPredictor.load(ckpt, device="cpu").model.state_dict()
    saved = torch.load(record["checkpoint"], map_location="cpu", weights_only=True)["model"]
    assert all(torch.equal(served[k], saved[k]) for k in saved)
    proc = _cli(tmp_path, "train", "se_darwin", "--option", "final_fit=all")
    _one_line_error(proc, "agent se_darwin", "final_fit", "split, whole")


def test_bad_option_is_one_line_before_anything_trains(tmp_path: Path) -> None:
    """A bad --option value: exit 2, one line naming agent, option and choices; no state."""
    proc = _cli(tmp_path, "train", "rlhf_ppo", "--option", "rollout_precision=fp8")
    _one_line_error(proc, "agent rlhf_ppo", "rollout_precision", "fp32, bf16, fp16")
    assert not (tmp_path / "state").exists()


def test_bad_option_in_env_file_stops_daemon_start_up(tmp_path: Path) -> None:
    """GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__PRESET=nope in .env: serve exits 2, one line."""
    (tmp_path / ".env").write_text("GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__PRESET=nope\n")
    proc = run_cli(
        ["serve"],
        cwd=tmp_path,
        env=daemon_env({"GENESIS_FP16_PLUGIN_ALLOWLIST": "rlhf_ppo"}, fixtures=False),
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    error = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(error) == 1 and "GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__PRESET" in error[0]
    assert "'nope' is not one of" in error[0] and "bf16_fp32_kl" in error[0]


@pytest.mark.slow
def test_preset_from_env_file_in_the_daemon_runs_the_kl_in_fp32(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """The same preset through .env in the daemon: its run's components say kl fp32."""
    (tmp_path / ".env").write_text("GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__PRESET=bf16_fp32_kl\n")
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": "rlhf_ppo",
            "GENESIS_FP16_AGENTS__RLHF_PPO__STEPS": "4",
            "GENESIS_FP16_SAMPLE_COUNT": "16",
        },
        fixtures=False,
    )
    finished = daemon.wait_for(lambda: daemon.events("training run finished"), "a run", 120)
    assert finished[0]["outcome"] == "success", daemon.tail()
    assert finished[0]["components"]["kl"] == "fp32"
    assert "preset bf16_fp32_kl" in finished[0]["precision_reason"]
    assert daemon.events("training run started")[0]["options"] == {"preset": "bf16_fp32_kl"}
