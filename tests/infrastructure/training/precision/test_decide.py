"""decide(): the one place a precision is picked, from one PrecisionRequest."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.errors import PrecisionError
from genesis_fp16_infrastructure.training.precision import decide as decide_module
from genesis_fp16_infrastructure.training.precision.decide import (
    DeviceCapabilities,
    decide,
    measures_here,
    planned_precision,
    runs_at_floor,
)
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.reports import Measured

REPO = Path(__file__).resolve().parents[4]
BF16_CPU = DeviceCapabilities("cpu", True, False, "test: bf16 taken as native")
PLAIN_CPU = DeviceCapabilities("cpu", False, False, "test: no native 16-bit")
NATIVE_CPU = DeviceCapabilities("cpu", True, True, "test: bf16 and fp16 taken as native")


@pytest.fixture
def bf16_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A CPU whose bf16 counts as native, whatever this machine has (the rule's input)."""
    monkeypatch.setattr(decide_module, "detect_capabilities", lambda device: BF16_CPU)
    yield


def _row(name: str, execution: str, ms: float) -> Measured:
    return Measured(name, execution, ms, ms, ms, 3)


def test_a_floor_raises_a_less_robust_pick_and_says_why(bf16_cpu: None) -> None:
    """fp16 under a bf16 floor runs bf16 with the floor's reason; what was asked is kept."""
    request = PrecisionRequest("fp16", floor="bf16", floor_reason="guard: overflow")
    decision = decide(request, "cpu")
    assert (decision.requested, decision.used) == ("fp16", "bf16")
    assert decision.reason == "guard: overflow"


def test_a_floor_leaves_a_pick_at_or_above_it_unless_auto_lands_on_it(bf16_cpu: None) -> None:
    """An explicit pick at the floor or more robust runs as asked with its own reason; an
    auto that comes out at the floor takes the floor's reason (the plugin may go below)."""
    explicit = decide(PrecisionRequest("bf16", floor="bf16", floor_reason="memory"), "cpu")
    assert explicit.used == "bf16" and explicit.reason.startswith("bf16 requested explicitly")
    robust = decide(PrecisionRequest("fp32", floor="bf16", floor_reason="memory"), "cpu")
    assert robust.used == "fp32" and robust.reason != "memory"
    auto = decide(PrecisionRequest("auto", floor="bf16", floor_reason="memory"), "cpu")
    assert (auto.requested, auto.used, auto.reason) == ("auto", "bf16", "memory")


@pytest.mark.parametrize(
    ("requested", "used", "floor", "raised"),
    [
        ("fp16", "fp16", "bf16", True),  # less robust than the floor
        ("auto", "bf16", "bf16", True),  # auto at the floor takes it
        ("bf16", "bf16", "bf16", False),  # an explicit name at the floor keeps its own
        ("auto", "fp32", "bf16", False),  # more robust already
        ("fp16", "fp16", "fp8", False),  # a floor from a broken file means nothing
    ],
)
def test_runs_at_floor_needs_no_device(requested: str, used: str, floor: str, raised: bool) -> None:
    """The floor rule on names alone (the daemon's check of an explicit request)."""
    assert runs_at_floor(requested, used, floor) is raised


def test_the_rule_drops_an_excluded_pick_to_fp32_and_adds_its_note(bf16_cpu: None) -> None:
    """The rule's bf16 excluded (a red probe) runs fp32 and says so; else the note is added."""
    excluded = decide(PrecisionRequest("auto", excluded={"bf16": "probe red"}), "cpu")
    assert (excluded.used, excluded.reason) == ("fp32", "auto -> fp32: bf16 excluded (probe red)")
    noted = decide(PrecisionRequest("auto", note="one candidate, nothing to time"), "cpu")
    assert noted.used == "bf16" and noted.reason.endswith("; one candidate, nothing to time")


def test_timings_pick_the_precision_and_its_execution(bf16_cpu: None) -> None:
    """With a calibration's rows, auto runs the measured pick in its faster execution."""
    rows = [
        _row("fp32", "eager", 10.0),
        _row("fp32", "cuda_graph", 2.0),
        _row("bf16", "eager", 6.0),
        _row("bf16", "cuda_graph", 2.05),
    ]
    decision = decide(PrecisionRequest("auto", note="cached measurement"), "cpu", rows)
    assert (decision.used, decision.execution) == ("fp32", "cuda_graph")
    assert decision.reason.startswith("auto -> fp32, cuda_graph: measured 5.00x fp32 eager")
    assert decision.reason.endswith("; cached measurement")
    assert decide(PrecisionRequest("auto"), "cpu").execution is None  # nothing measured


def test_a_measured_auto_under_torchrun_keeps_the_rule_the_exclusions_and_the_floor(
    bf16_cpu: None,
) -> None:
    """Over several ranks a measured auto is the rule, says why, and keeps what the
    request bounds it by: the probe's exclusions (they were dropped there) and the floor."""
    request = PrecisionRequest("auto", mode="measure")
    ruled = decide(request, "cpu", ranks=2)
    assert ruled.used == "bf16"
    assert ruled.reason.endswith("; not measured under torchrun (ranks could choose differently)")
    red = decide(replace(request, excluded={"bf16": "probe red"}), "cpu", ranks=2)
    assert red.used == "fp32" and "bf16 excluded (probe red)" in red.reason
    assert "not measured under torchrun" in red.reason
    floored = decide(replace(request, floor="bf16", floor_reason="remembered"), "cpu", ranks=2)
    assert (floored.used, floored.reason) == ("bf16", "remembered")
    assert measures_here(request, 1) and not measures_here(request, 2)
    assert not measures_here(PrecisionRequest("auto"), 1)  # the rule's mode never times


def test_a_measured_auto_decided_with_nothing_timed_says_so(bf16_cpu: None) -> None:
    """A policy built outside a run (PrecisionPolicy.create times nothing) for a measured
    auto is the rule's pick, and its reason says that no measurement was made; a caller
    that timed nothing for a reason of its own gives that reason instead."""
    request = PrecisionRequest("auto", mode="measure")
    policy = PrecisionPolicy.create(request, "cpu", announce=False)
    assert policy.resolved.used == "bf16"
    assert policy.resolved.reason == (
        "auto -> bf16: CPU with native bf16 (test: bf16 taken as native); measuring was "
        "asked, but nothing was timed here: decided by the rule"
    )
    own = decide(replace(request, note="one candidate, nothing to time"), "cpu")
    assert own.reason.endswith("; one candidate, nothing to time")
    assert "measuring was asked" not in decide(PrecisionRequest("auto"), "cpu").reason


def test_a_measured_pick_is_floored_and_an_excluded_row_is_not_picked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Timings decide first, then the floor raises the pick; a kept row of a precision the
    request now excludes is left out of the choice."""
    monkeypatch.setattr(decide_module, "detect_capabilities", lambda device: NATIVE_CPU)
    rows = [_row("fp32", "eager", 10.0), _row("bf16", "eager", 5.0), _row("fp16", "eager", 2.0)]
    measured = PrecisionRequest("auto", mode="measure")
    assert decide(measured, "cpu", rows).used == "fp16"
    floored = decide(replace(measured, floor="bf16", floor_reason="remembered"), "cpu", rows)
    assert (floored.requested, floored.used, floored.reason) == ("auto", "bf16", "remembered")
    assert decide(replace(measured, excluded={"fp16": "probe red"}), "cpu", rows).used == "bf16"


def test_a_row_of_a_precision_the_device_lacks_is_never_read(bf16_cpu: None) -> None:
    """Issue 92's planted row: an fp16 row 100x faster, on a CPU without native fp16, is
    not among what auto times there, so it decides nothing (the run and the daemon's
    planned precision alike)."""
    rows = [_row("fp32", "eager", 2.0), _row("bf16", "eager", 2.5), _row("fp16", "eager", 0.02)]
    measured = PrecisionRequest("auto", mode="measure")
    decision = decide(measured, "cpu", rows)
    assert decision.used == "fp32" and "fp16" not in decision.reason
    assert planned_precision(measured, "cpu", rows) == "fp32"


def test_the_planned_precision_is_decides_answer_before_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before a run: an explicit name floored by name, without the device; an auto by the
    rule as decide() answers; a measured auto from kept timings, None without."""

    def no_probe(device: object) -> object:
        raise AssertionError("the device was probed")

    monkeypatch.setattr(decide_module, "detect_capabilities", no_probe)
    assert planned_precision(PrecisionRequest("fp16", floor="bf16"), "cuda") == "bf16"
    assert planned_precision(PrecisionRequest("fp32", floor="bf16"), "cuda") == "fp32"
    assert planned_precision(PrecisionRequest("auto", mode="measure"), "cuda") is None
    monkeypatch.setattr(decide_module, "detect_capabilities", lambda device: BF16_CPU)
    assert planned_precision(PrecisionRequest("auto"), "cpu") == "bf16"
    rows = [_row("fp32", "eager", 1.0), _row("bf16", "eager", 2.0)]
    assert planned_precision(PrecisionRequest("auto", mode="measure"), "cpu", rows) == "fp32"


def test_a_basis_names_who_chose_an_explicit_precision(bf16_cpu: None) -> None:
    """rlhf_ppo's preset names bf16 for the operator: the reason says the preset did."""
    decision = decide(PrecisionRequest("bf16", basis="preset mixed_recommended"), "cpu")
    assert (decision.used, decision.reason) == ("bf16", "preset mixed_recommended")


def test_bad_requests_are_one_clear_error() -> None:
    """An unknown name or floor names the valid ones; timings for an explicit name refuse."""
    with pytest.raises(PrecisionError, match="'fp8'; valid precisions: fp32, bf16, fp16, auto"):
        PrecisionRequest("fp8")
    with pytest.raises(PrecisionError, match="precision floor 'tf32'"):
        PrecisionRequest("auto", floor="tf32")
    with pytest.raises(PrecisionError, match="auto precision mode 'guess': choose from measure"):
        PrecisionRequest("auto", mode="guess")
    with pytest.raises(ValueError, match="timings are for precision 'auto', not 'fp32'"):
        decide(PrecisionRequest("fp32"), "cpu", [_row("fp32", "eager", 1.0)])


def test_a_policy_runs_what_was_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    """from_decision builds the policy of the decision, its reason untouched."""
    monkeypatch.setattr(decide_module, "detect_capabilities", lambda device: PLAIN_CPU)
    decision = decide(PrecisionRequest("fp16", floor="fp32", floor_reason="demoted"), "cpu")
    policy = PrecisionPolicy.from_decision(decision, "cpu")
    assert (policy.name, policy.resolved) == ("fp32", decision)
    assert not policy.scaler.is_enabled()


def _patches(source: str) -> list[str]:
    """Where ``source`` builds a ResolvedPrecision or replaces a policy's ``resolved``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        if name == "ResolvedPrecision" or (
            name == "replace" and any(k.arg == "resolved" for k in node.keywords)
        ):
            found.append(f"line {node.lineno}: {name}")
    return found


def test_only_decide_makes_a_decision_and_nothing_patches_one() -> None:
    """No source module but decide.py builds a ResolvedPrecision, and none patches a
    policy's ``resolved`` after construction (the four places that used to)."""
    offenders = {}
    for folder in ("infrastructure", "agents", "genesis_fp16"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.name == "decide.py":
                continue
            if found := _patches(path.read_text()):
                offenders[str(path.relative_to(REPO))] = found
    assert offenders == {}


def test_the_decision_check_catches_a_patch() -> None:
    """The scan above can fail: it finds both kinds of patch in a sample."""
    sample = (
        "policy = replace(policy, resolved=replace(policy.resolved, reason='x'))\n"
        "r = ResolvedPrecision('auto', 'fp32', 'cpu', 'why')\n"
    )
    assert _patches(sample) == ["line 1: replace", "line 2: ResolvedPrecision"]


# Where a product module may still test a value for "auto" outside decide.py and the
# request's own module: each is not a decision of a run's precision.
AUTO_TESTED_ELSEWHERE = {
    # a preset named under auto names the precision of the request decide() answers
    ("infrastructure/genesis_fp16_infrastructure/rl/precision_presets.py", "preset_request"),
    # the benchmark's grid: which runners time an `auto` column
    ("genesis_fp16/bench/run.py", "_runners"),
    ("genesis_fp16/bench/run.py", "plan"),
    # cuda_graph's own auto, an execution, not a precision
    ("infrastructure/genesis_fp16_infrastructure/training/step/execution.py", "resolve_execution"),
}
_SUBJECT = ("precision", "requested", "used", "preset", "floor")


def _auto_tests(source: str) -> list[str]:
    """The functions of ``source`` that compare a precision-named value with ``"auto"``."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            literal = any(
                isinstance(n, ast.Constant) and n.value == "auto"
                for s in sides
                for n in ast.walk(s)
            )
            named = any(word in ast.unparse(s) for s in sides for word in _SUBJECT)
            if literal and named:
                found.append(fn.name)
                break
    return found


def test_auto_is_decided_only_by_decide() -> None:
    """No product module but decide.py and precision_request.py branches on a precision
    being "auto" (the daemon's floor, the gauge's checkpoint, rlhf_ppo's preset and the
    probe gate all did): `auto` means what decide() answers."""
    offenders = []
    for folder in ("infrastructure", "agents", "genesis_fp16"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.name in ("decide.py", "precision_request.py"):
                continue
            rel = str(path.relative_to(REPO))
            offenders += [
                f"{rel}:{name}"
                for name in _auto_tests(path.read_text())
                if (rel, name) not in AUTO_TESTED_ELSEWHERE
            ]
    assert offenders == []


def test_the_auto_check_catches_a_branch_on_auto() -> None:
    """The scan above can fail: the daemon's old floor branch is found, a device's is not."""
    sample = (
        "def choose(requested, device):\n"
        "    if requested == 'auto':\n"
        "        return 'bf16'\n"
        "def place(device):\n"
        "    return device == 'auto'\n"
    )
    assert _auto_tests(sample) == ["choose"]


def test_a_measured_reason_names_every_row_and_says_when_it_was_taken_under_load(
    bf16_cpu: None,
) -> None:
    """The issue's case (fp32 1.9 ms, bf16 35.2 ms under load): both rows with their
    median and p10-p90, and that it was taken under load; its choice holds across the
    intervals, so it is kept. Overlapping intervals: not reused. A steady one says neither."""
    steady = Measured("fp32", "eager", 1.9, 1.7, 2.4, 20, p10_ms=1.8, p90_ms=2.3)
    loaded = Measured("bf16", "eager", 35.2, 30.0, 50.0, 20, p10_ms=24.0, p90_ms=41.0)
    decision = decide(PrecisionRequest("auto", mode="measure", note=None), "cpu", [steady, loaded])
    assert decision.used == "fp32"
    timed = "timed, median (p10-p90): fp32 eager 1.9 ms (1.8-2.3), bf16 eager 35.2 ms (24-41)"
    assert timed in decision.reason
    assert decision.reason.endswith(
        "; taken under load (bf16 eager p90/p10 1.71 > 1.5), but the choice holds across "
        "every row's p10-p90: kept"
    )
    close = replace(loaded, median_ms=2.0, min_ms=1.0, max_ms=3.0, p10_ms=1.2, p90_ms=2.9)
    unsure = decide(PrecisionRequest("auto", mode="measure"), "cpu", [steady, close])
    assert unsure.reason.endswith(
        "; taken under load (bf16 eager p90/p10 2.42 > 1.5): not reused, measured again at "
        "the next run"
    )
    calm = decide(PrecisionRequest("auto"), "cpu", [steady, replace(loaded, p10_ms=33.0)])
    assert "under load" not in calm.reason and "bf16 eager 35.2 ms (33-41)" in calm.reason
