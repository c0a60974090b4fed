"""`genesis-fp16 replay` on the real agents' own bundles: an fp16 run driven non-finite by
a huge learning rate writes a bundle, and replay rebuilds the model the run trained,
reproduces the step bit for bit on the CPU and names the first module; `--against fp32`
names the first operation that leaves fp32 and what to change.

Kept small: CPU fp16 is emulated (slow), so each run is a few steps of a small pool,
with the guard checking every 5 steps.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_fork import run_cli
from daemon_harness import daemon_env

ENV = {
    "ENABLE_FP16_TRAINING": "true",
    "GENESIS_FP16_GUARD_CHECK_INTERVAL": "5",
    "GENESIS_FP16_GUARD_OVERFLOW_WINDOW": "5",
    "GENESIS_FP16_GUARD_OVERFLOW_WARMUP": "0",
    "GENESIS_FP16_GUARD_BF16_NEEDS_NATIVE": "false",
}


def _cli(
    state: Path, *args: str, code: int | None = 0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    settings = {"GENESIS_FP16_STATE_DIR": str(state), **ENV, **(env or {})}
    done = run_cli(
        [*args],
        cwd=state,
        env=daemon_env(settings, fixtures=False),
        timeout=600,
    )
    assert code is None or done.returncode == code, done.stderr[-2000:]
    return done


def _first_bundle(state: Path, agent: str) -> Path:
    """The agent's oldest bundle: the run's first fault, in fp16."""
    bundles = sorted((state / "agents" / agent / "fault_bundles").glob("*.fault.pt"))
    assert bundles, f"{agent}: no fault bundle written"
    return bundles[0]


def _replay(
    state: Path, bundle: Path, *extra: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    done = _cli(state, "replay", str(bundle), "--json", *extra, env=env)
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _assert_reproduced(report: dict[str, Any], modules: tuple[str, ...]) -> None:
    assert report["reproduced"] is True and report["same_setup"] is True
    assert report["recorded"]["precision"] == report["replayed"]["precision"] == "fp16"
    first = report["first_nonfinite"]
    assert first is not None and first["module"].startswith(modules), first
    assert first["phase"] in ("forward", "backward")


def _assert_departure(report: dict[str, Any], modules: tuple[str, ...]) -> dict[str, Any]:
    against = report["against_fp32"]
    first = against["first_departure"]
    assert first is not None and first["module"].startswith(modules), first
    assert first["phase"] in ("forward", "backward") and first["fp32"] is not None
    # Its fp16 value is not finite (null in JSON), or off by more than the tolerance.
    assert (
        first["low"] is None
        or first["relative_error"] is None
        or (first["relative_error"] > against["tolerance"])
    )
    assert against["advice"]["action"] in ("bf16", "fp32_exception", "learning_rate")
    assert against["advice"]["why"]
    return against


@pytest.fixture(scope="module")
def se_darwin_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 400-record se_darwin pool (cross-validated by default: under 3,334 records)."""
    root = tmp_path_factory.mktemp("se_darwin_data")
    done = _cli(root, "data", "generate", "se_darwin", "--out", str(root), "--count", "400")
    return Path(done.stdout.strip().splitlines()[-1])


WORLD_MODEL = ("trunk", "success_head", "score_head", "outcome_head", "loss")


@pytest.mark.slow
@pytest.mark.parametrize(
    "options", [(), ("--option", "cross_validation=false")], ids=["cross_validated", "held_out"]
)
def test_se_darwin_bundle_replays_and_names_where(
    tmp_path: Path, se_darwin_data: Path, options: tuple[str, ...]
) -> None:
    """se_darwin's own bundle (its default, cross-validated ensemble, and a held-out single
    model) replays bit for bit, names the first module, and --against fp32 names where
    fp16 leaves fp32 and advises a lower learning rate (values grow in every module)."""
    data = tmp_path / "pool.json"
    data.write_bytes(se_darwin_data.read_bytes())
    _cli(
        tmp_path, "train", "se_darwin", "--precision", "fp16", "--steps", "10",
        "--option", "learning_rate=10000", *options, "--data", str(data), "--json",
        code=None,  # the run may end failed: the guard's last rung is fp32
    )  # fmt: skip
    bundle = _first_bundle(tmp_path, "se_darwin")
    report = _replay(tmp_path, bundle)
    _assert_reproduced(report, WORLD_MODEL)
    assert report["data"] == "the run's data is unchanged"
    against = _assert_departure(_replay(tmp_path, bundle, "--against", "fp32"), WORLD_MODEL)
    assert against["advice"]["action"] == "learning_rate", against["advice"]
    assert against["fp32_step"]["loss_finite"] == [True]

    data.write_text("[]")  # the data changed: the bundle's own batches still replay it
    changed = _replay(tmp_path, bundle)
    assert changed["reproduced"] is True
    assert changed["data"].startswith(f"the bundle's data {data} has changed")


POLICY_CRITIC = ("policy", "critic", "loss")


@pytest.mark.slow
def test_rlhf_ppo_bundle_replays_its_update_step(tmp_path: Path) -> None:
    """rlhf_ppo (a task with iterations) now writes bundles: its fp16 run with a huge
    policy learning rate bundles the update step, whose rollout batch the recorder rolled
    out again from (seed, iteration); replay reproduces it and names the policy's module,
    and --against fp32 names where fp16 leaves fp32."""
    data = _cli(tmp_path, "data", "generate", "rlhf_ppo", "--out", str(tmp_path), "--count", "16")
    # A check at every iteration's end (4 update steps): the guard demotes before the
    # policy's weights, grown by the huge rate, make its rollouts' probabilities NaN.
    env = {"GENESIS_FP16_GUARD_CHECK_INTERVAL": "4", "GENESIS_FP16_GUARD_OVERFLOW_WINDOW": "4"}
    _cli(
        tmp_path, "train", "rlhf_ppo", "--precision", "fp16", "--epochs", "3",
        "--option", "lr=10000", "--option", "batch_size=16",
        "--data", data.stdout.strip().splitlines()[-1], "--json", env=env,
    )  # fmt: skip
    bundle = _first_bundle(tmp_path, "rlhf_ppo")
    _assert_reproduced(_replay(tmp_path, bundle), POLICY_CRITIC)
    _assert_departure(_replay(tmp_path, bundle, "--against", "fp32"), POLICY_CRITIC)


def _scaffold_agent(root: Path, name: str) -> Path:
    """`new-agent NAME`'s package, found by entry point through PYTHONPATH (a dist-info
    folder beside it, as an installed package has), without installing it."""
    _cli(root, "new-agent", name, "--out", str(root))
    package = root / name.replace("_", "-")
    info = package / f"{name}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[genesis_fp16.agents]\n{name} = {name}:plugin\n")
    return package


@pytest.mark.slow
def test_the_scaffolds_agent_bundle_replays_after_its_data_is_gone(tmp_path: Path) -> None:
    """The agent `new-agent` writes, trained in fp16 on records whose inputs are 1e5 (its
    linear layer's output overflows fp16's 65504, not bf16's range): its bundle replays,
    names the layer, --against fp32 advises bf16, and with the data deleted it still
    replays from the bundle's own batches, saying the data is gone."""
    name = "toy_replay"
    package = _scaffold_agent(tmp_path, name)
    data = tmp_path / "big.jsonl"
    data.write_text("".join(f'{{"x": [1e5, 1e5, 1e5, {i}], "y": 1.0}}\n' for i in range(256)))
    env = {"PYTHONPATH": str(package), "GENESIS_FP16_PLUGIN_ALLOWLIST": name}
    train = ("train", name, "--precision", "fp16", "--steps", "10", "--data", str(data))
    _cli(tmp_path, *train, env=env)
    bundle = _first_bundle(tmp_path, name)
    _assert_reproduced(_replay(tmp_path, bundle, env=env), ("(model)", "loss"))
    against = _replay(tmp_path, bundle, "--against", "fp32", env=env)
    assert _assert_departure(against, ("(model)",))["advice"]["action"] == "bf16", against
    data.unlink()
    gone = _replay(tmp_path, bundle, env=env)
    assert gone["reproduced"] is True and f"the bundle's data {data} is gone" in gone["data"]
