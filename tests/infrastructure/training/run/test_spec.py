"""RunSpec: the run's fields declared once, shared by TrainRequest and FitOptions, and read
and written by the library's one codec (record_codec)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NewType

import pytest

from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.record_codec import decode_record, encode_record
from genesis_fp16_infrastructure.training import FitOptions, GuardConfig, StepTuning, TrainerConfig
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.run.fit import _trainer_config
from genesis_fp16_infrastructure.training.run.spec import RunCallbacks, RunSpec
from genesis_fp16_infrastructure.training.step_spec import StepSpec

# RunSpec's fields: the run's, no callback among them (those are RunCallbacks').
RUN_FIELDS = {f.name for f in fields(RunSpec)}

# Every RunSpec field away from its default: a field the codec or fit_options() dropped
# would come back as its default and fail the comparisons below.
NON_DEFAULT = {
    # Every field of the precision request set, so that the round trips below carry each.
    "precision": PrecisionRequest(
        "bf16",
        basis="a preset",
        mode="measure",
        excluded={"fp16": "probe red"},
        note="a note",
        floor="fp32",
        floor_reason="remembered",
        cache=Path("state/cal.json"),
        budget_s=2.5,
    ),
    "device": "cuda:1",
    "steps": 7,
    "epochs": 3,
    "seed": 11,
    "resume": False,
    "finishes": True,
    "checkpoint_steps": 9,
    "checkpoint_seconds": 2.5,
    "log_interval": 4,
    "guard": GuardConfig(ladder=("fp16", "fp32"), check_interval=5, nonfinite_limit=None),
    "fsdp": True,
    "initial_loss_scale": 2048.0,
    "cuda_graph": "off",
    "compile": "on",
}


# A string type whose name reads like a callback's (the codec once matched text).
CallableName = NewType("CallableName", str)
# A string type whose name holds "Path" (the codec once decoded it as a path).
PathwayName = NewType("PathwayName", str)


@dataclass(frozen=True, kw_only=True)
class _NamedLikeOthers(RunSpec):
    """A spec whose field types' names contain the words the old codec looked for."""

    handler: CallableName
    route: PathwayName
    hook: Callable[[], None] | None = None


def _own_fields(cls: type) -> set[str]:
    """The fields ``cls`` itself declares (not inherited)."""
    return set(inspect.get_annotations(cls))


def test_the_sample_sets_every_field_of_the_spec() -> None:
    """The sample above covers RunSpec whole, and every value differs from the default."""
    assert set(NON_DEFAULT) == RUN_FIELDS
    assert all(NON_DEFAULT[f.name] != f.default for f in fields(RunSpec))


def test_request_options_and_trainer_declare_no_shared_field_again() -> None:
    """TrainRequest and FitOptions inherit the run's fields and callbacks, TrainerConfig
    and RunSpec the step's: none of them declares one again."""
    shared = RUN_FIELDS | {f.name for f in fields(RunCallbacks)}
    for cls in (TrainRequest, FitOptions):
        assert issubclass(cls, RunSpec) and issubclass(cls, RunCallbacks)
        assert _own_fields(cls) & shared == set(), cls.__name__
        assert _own_fields(cls), cls.__name__  # the check reads real annotations
    step = {f.name for f in fields(StepSpec)}
    for cls in (RunSpec, TrainerConfig):
        assert issubclass(cls, StepSpec) and _own_fields(cls) & step == set(), cls.__name__


def test_fit_options_hold_each_step_field_once() -> None:
    """FitOptions.trainer takes the trainer's own settings only: no step field twice, and a
    TrainerConfig (which carries the step fields again) is refused naming the way."""
    step = {f.name for f in fields(StepSpec)}
    assert step.isdisjoint(f.name for f in fields(StepTuning))
    assert {f.name for f in fields(TrainerConfig)} == step | {f.name for f in fields(StepTuning)}
    with pytest.raises(ValueError, match=r"StepTuning\(\.\.\.\) and log_interval"):
        FitOptions(steps=1, trainer=TrainerConfig(log_interval=3))


def test_fit_hands_the_step_fields_to_its_trainer() -> None:
    """Each StepSpec field of FitOptions reaches the trainer's config, the rest is kept."""
    options = FitOptions(
        steps=1,
        log_interval=7,
        cuda_graph="off",
        compile="on",
        trainer=StepTuning(grad_accum_steps=3),
    )
    config = _trainer_config(options)
    assert (config.log_interval, config.cuda_graph, config.compile) == (7, "off", "on")
    assert config.grad_accum_steps == 3


def test_the_codec_round_trips_a_spec_and_a_request_without_callbacks(tmp_path: Path) -> None:
    """Through JSON text: every field back equal, paths as Path, the guard as GuardConfig,
    callbacks left out; unknown keys ignored, missing ones take their defaults."""
    spec = RunSpec(**NON_DEFAULT)
    assert decode_record(RunSpec, json.loads(json.dumps(encode_record(spec))), "R") == spec
    request = TrainRequest(
        **NON_DEFAULT,
        agent="a",
        precision_reason="flag",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "c",
        data_path=tmp_path / "pool.json",
        on_log=print,
    )
    data = json.loads(json.dumps(request.to_json()))
    assert "on_log" not in data and "should_stop" not in data and "on_diagnostics" not in data
    back = TrainRequest.from_json({**data, "from_a_newer_daemon": 1})
    assert back == TrainRequest(**{**request.__dict__, "on_log": None})
    assert isinstance(back.data_path, Path) and isinstance(back.guard, GuardConfig)
    assert isinstance(back.precision, PrecisionRequest) and back.precision.cache == Path(
        "state/cal.json"
    )
    assert decode_record(RunSpec, {}, "RunSpec") == RunSpec()


def test_a_bare_precision_name_is_a_request_in_the_spec_and_in_an_older_run_file() -> None:
    """RunSpec(precision="fp16") and a run file whose precision is a bare name both give
    PrecisionRequest("fp16"): one type on every edge, whoever wrote it."""
    assert RunSpec(precision="fp16").precision == PrecisionRequest("fp16")  # type: ignore[arg-type]
    older = decode_record(RunSpec, {"precision": "fp16"}, "RunSpec")
    assert older.precision == PrecisionRequest("fp16")
    with pytest.raises(ValueError, match=r"'fp8'.*valid precisions"):
        RunSpec(precision="fp8")  # type: ignore[arg-type]


def test_fit_options_carry_every_field_of_the_request_spec(tmp_path: Path) -> None:
    """fit_options() copies each RunSpec field and both callbacks, none named one by one."""
    request = TrainRequest(
        **NON_DEFAULT,
        agent="a",
        precision_reason="flag",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path,
        should_stop=bool,
        on_log=print,
    )
    options = request.fit_options()
    for name in RUN_FIELDS:
        assert getattr(options, name) == getattr(request, name), name
    assert (options.on_log, options.should_stop) == (print, bool)


def test_the_codec_reads_field_types_not_their_names() -> None:
    """A field is a callback or a path by its type: a str type named like a Callable or a
    Path travels as its value, a real Callable field is left out."""
    spec = _NamedLikeOthers(handler=CallableName("on"), route=PathwayName("north"), hook=print)
    data = json.loads(json.dumps(encode_record(spec)))
    assert data["handler"] == "on" and data["route"] == "north" and "hook" not in data
    back = decode_record(_NamedLikeOthers, data, "_NamedLikeOthers")
    assert (back.handler, back.route, back.hook) == ("on", "north", None)
    assert type(back.route) is str  # not Path("north")
