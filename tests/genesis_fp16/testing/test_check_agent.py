"""The plugin contract checker: the built-in agents and the scaffold pass, each rule can fail."""

from __future__ import annotations

import dataclasses
import importlib
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16.scaffold import write_agent
from genesis_fp16.testing import RULES, check_agent
from genesis_fp16_agents.rlhf_ppo import plugin as rlhf_ppo
from genesis_fp16_agents.se_darwin import plugin as se_darwin
from genesis_fp16_infrastructure.contract.split import HELD_OUT, HeldOutSplit


@pytest.fixture(scope="module")
def scaffold(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The module `genesis-fp16 new-agent toy_check` writes, imported."""
    root = write_agent("toy_check", tmp_path_factory.mktemp("scaffold"))
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("toy_check")
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("toy_check", None)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("plugin", "options"),
    [(se_darwin, {}), (rlhf_ppo, {"batch_size": 16})],
    ids=["se_darwin", "rlhf_ppo"],
)
def test_the_built_in_agents_meet_the_contract(plugin: Any, options: dict[str, Any]) -> None:
    """Every rule passes for se_darwin and rlhf_ppo."""
    report = check_agent(plugin, options)
    assert report.ok, report.summary()
    assert [r.rule for r in report.results] == list(RULES)


@pytest.mark.parametrize(
    ("plugin", "options", "said"),
    [
        (se_darwin, {}, "another draw of the held-out split trains another model"),
        (rlhf_ppo, {"batch_size": 16}, "its records are evaluation episodes"),
    ],
    ids=["se_darwin", "rlhf_ppo"],
)
def test_the_built_in_agents_train_only_on_the_rows_kept(
    plugin: Any, options: dict[str, Any], said: str
) -> None:
    """Issue 92: se_darwin trains another model under another draw of the held-out split
    (rlhf_ppo's records are evaluation episodes), and the split is the judged run's again
    after the rule."""
    report = check_agent(plugin, options, rules=["trains_only_on_rows_kept"])
    assert report.ok and said in report.results[-1].detail, report.summary()
    assert HELD_OUT.salt == HeldOutSplit().salt


def test_the_scaffolded_agent_meets_the_contract(scaffold: Any) -> None:
    """Every rule passes for the agent new-agent writes, unchanged."""
    report = check_agent(scaffold.plugin)
    assert report.ok, report.summary()


def test_the_probe_line_says_when_the_default_split_is_used(scaffold: Any) -> None:
    """A ProbeSetup without split_batch (the scaffold's): the probe line names the default;
    one with its own says nothing of it."""
    report = check_agent(scaffold.plugin, rules=["probe_setup_works"])
    assert report.ok and report.results[-1].line().endswith(
        " batches, a finite loss; split_batch: the default, each tensor cut in two along its "
        "first dimension"
    )

    class Own(scaffold.Agent):  # type: ignore[misc, name-defined]
        def probe_setup(self, data_path: Any, seed: int) -> Any:
            setup = super().probe_setup(data_path, seed)
            return dataclasses.replace(setup, split_batch=lambda b: (b, b))

    own = check_agent(Own(), rules=["probe_setup_works"])
    assert own.ok and own.results[-1].line().endswith(" batches, a finite loss")


def _broken(scaffold: Any, rule: str) -> Any:
    """The scaffold's agent with one defect that breaks ``rule``."""
    agent, fit = scaffold.Agent, scaffold.fit

    class Broken(agent):  # type: ignore[misc, valid-type]
        def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
            if rule == "sample_data_generates":
                seed = random.randrange(10**9)  # ignores its seed
            return super().generate_sample_data(out, count, seed)

        def train(self, request: Any) -> Any:
            if rule == "trains_without_budget" and request.steps is None:
                raise ValueError("FitOptions needs steps=N or epochs=N")  # before the default
            _, x, y, _ = scaffold.read_records(Path(request.data_path), None)
            task = scaffold.Task(x, y)
            if rule == "trains_on_no_held_out_record":  # every record, held-out ones too
                ids, x, y, _ = scaffold.read_records(Path(request.data_path), None)
                task = scaffold.Task(x, y, ids)
            if rule == "trains_only_on_rows_kept":  # every record, naming the kept ones
                ids, x, y, _ = scaffold.read_records(Path(request.data_path), None)
                kept = [ids[i] for i in request.training_rows(ids)]
                task = scaffold.Task(x, y, request.trained_ids(kept))
            if rule == "device_audit":  # a host tensor added to the run device's output
                plain_loss = task.loss
                task.loss = lambda m, b: plain_loss(m, b) + torch.zeros(1)  # type: ignore[method-assign]
            overrides: dict[str, Any] = {
                "trains_with_budget": {"steps": (request.steps or 0) + 1},
                "resumes_bit_for_bit": {"resume": False},
                "stops_at_step_with_checkpoint": {"should_stop": lambda: False},
            }.get(rule, {})
            result = scaffold.TrainResult.from_fit(
                request, fit(task, request.fit_options(**overrides))
            )
            if rule == "reports_precision_and_execution":
                result = dataclasses.replace(result, precision_used="fp16")
            if rule == "checkpoint_loads_weights_only" and result.checkpoint:
                torch.save({"model": Path(".")}, result.checkpoint)  # a pickled object
            return result

        def probe_setup(self, data_path: Any, seed: int) -> Any:
            setup = super().probe_setup(data_path, seed)
            return dataclasses.replace(setup, batches=[]) if rule == "probe_setup_works" else setup

    broken = Broken()
    if rule == "rebuilds_fault_steps":  # replay cannot rebuild its step
        broken.replay_task = None
    if rule == "contract":
        broken.api_version = 99
    if rule == "refuses_bad_data":  # a silent fallback to whatever else there is
        broken.train = lambda request: Broken.train(  # type: ignore[method-assign]
            broken, dataclasses.replace(request, data_path=broken._fallback(request))
        )
    broken._fallback = lambda request: (
        request.data_path
        if Path(request.data_path).suffix == ".jsonl"
        else scaffold.plugin.generate_sample_data(Path(request.state_dir) / "fallback", 64, 0)
    )
    return broken


@pytest.mark.parametrize(
    "rule", [r if r != "trains_under_device_audit" else "device_audit" for r in RULES]
)
def test_each_rule_fails_for_a_plugin_that_breaks_it(scaffold: Any, rule: str) -> None:
    """A plugin with one defect fails that rule, in one line that names it."""
    name = "trains_under_device_audit" if rule == "device_audit" else rule
    report = check_agent(_broken(scaffold, rule), rules=[name])
    assert name in report.failed, report.summary()
    line = next(r.line() for r in report.results if r.rule == name)
    assert line.startswith(f"FAIL {name}: ") and "\n" not in line


def test_a_plugin_broken_twice_fails_with_one_line_per_broken_rule(scaffold: Any) -> None:
    """Two defects (a wrong precision reported, no probe batches): two FAIL lines, each
    naming its rule; the rule both leave alone passes."""
    plugin = _broken(scaffold, "reports_precision_and_execution")
    plain_probe = scaffold.Agent.probe_setup
    plugin.probe_setup = lambda data, seed: dataclasses.replace(
        plain_probe(plugin, data, seed), batches=[]
    )
    chosen = ["trains_with_budget", "reports_precision_and_execution", "probe_setup_works"]
    report = check_agent(plugin, rules=chosen)
    assert report.failed == ("reports_precision_and_execution", "probe_setup_works")
    fails = [line for line in report.summary().splitlines() if line.startswith("FAIL ")]
    assert len(fails) == 2 and "PASS trains_with_budget: " in report.summary()


def test_a_result_field_of_the_wrong_type_fails_in_one_line_naming_it(scaffold: Any) -> None:
    """A plugin written for API 1 that reports precision_requested=request.precision: each
    rule that trains fails in one line naming the field and what to report instead."""

    class Api1(scaffold.Agent):  # type: ignore[misc, name-defined]
        def train(self, request: Any) -> Any:
            result = super().train(request)
            return dataclasses.replace(result, precision_requested=request.precision)

    report = check_agent(Api1(), rules=["trains_with_budget", "probe_setup_works"])
    assert report.failed == ("trains_with_budget",), report.summary()
    (line,) = [line for line in report.summary().splitlines() if line.startswith("FAIL ")]
    assert line == (
        "FAIL trains_with_budget: toy_check's TrainResult.precision_requested: Literal['auto', "
        "'fp32', 'bf16', 'fp16'] expected, got PrecisionRequest; report "
        "request.precision.requested (plugin API 2)"
    )


def test_check_agent_command_refuses_an_unknown_agent_in_one_line(tmp_path: Path) -> None:
    """`genesis-fp16 check-agent` on an unknown agent is one line, exit 2."""
    (tmp_path / "none.env").write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "check-agent", "no_such_agent"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"GENESIS_FP16_ENV_FILE": str(tmp_path / "none.env"), "PATH": "/usr/bin"},
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "no_such_agent" in done.stderr
