"""The plugin contract, rule by rule: :func:`check_agent`.

Each rule runs the plugin for real on its own sample data, on the CPU in fp32 (bf16 for
the device audit's run), with a few optimizer steps, in a temporary folder, and reports
one :class:`RuleResult`. Bad data must be refused with ``TrainRequestError`` or the
library's ``DataError`` (its readers' refusal): `train` and the daemon turn either into
one line naming the file. A rule that raises fails with the exception's one line; the
other rules still run, so a broken plugin gets one line per broken rule.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from genesis_fp16.plugin_api import ProbeSetup, TrainRequest, TrainRequestError, TrainResult
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    DataError,
    api_version_error,
    capabilities_of,
    check_result,
    run_plugin,
)

# Records of sample data the rules train on, and the steps of a run: tiny on purpose.
SAMPLE_COUNT = 64
STEPS = 4  # rlhf_ppo's PPO iteration is 4 optimizer steps: a boundary


class RuleFailed(Exception):
    """A rule's finding: its message is the report's line."""


@dataclass(frozen=True)
class RuleResult:
    rule: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'} {self.rule}: {self.detail}"


@dataclass(frozen=True)
class AgentReport:
    agent: str
    results: tuple[RuleResult, ...]
    # The optional capabilities the plugin declares, a line each (plugin_api's protocol):
    # "judged: judging_version 1, loss_span 1.0"; none when its contract rule failed.
    capabilities: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(r.rule for r in self.results if not r.ok)

    def summary(self) -> str:
        return "\n".join(r.line() for r in self.results)

    def capability_lines(self) -> list[str]:
        """One ``HAS`` line for each optional capability the plugin declares."""
        return [f"HAS {line}" for line in self.capabilities]


@dataclass
class _Bench:
    """What every rule shares: the plugin, a temporary folder, its sample data."""

    plugin: Any
    root: Path
    options: Mapping[str, Any]
    data: Path | None = None
    runs: int = field(default=0)

    def sample_data(self) -> Path:
        if self.data is None:
            self.data = Path(self.plugin.generate_sample_data(self.root / "data", SAMPLE_COUNT, 0))
        return self.data

    def request(self, folder: str | None = None, **fields: Any) -> TrainRequest:
        if folder is None:
            self.runs += 1
            folder = f"run{self.runs}"
        agent = AgentFolder(self.root / folder, self.plugin.name)  # laid out as the daemon's
        values: dict[str, Any] = {
            "agent": self.plugin.name,
            "precision": "fp32",
            "precision_reason": "check-agent",
            "state_dir": agent.state_dir,
            "checkpoint_dir": agent.checkpoint_dir,
            "quarantine_path": agent.new_quarantine_file(),
            "device": "cpu",
            "seed": 1,
            "steps": STEPS,
            "resume": False,
            "log_interval": 1,
            "checkpoint_seconds": None,
            "data_path": self.sample_data(),
            "options": dict(self.options),
        }
        values.update(fields)
        return TrainRequest(**values)

    def train(
        self, request: TrainRequest, own: bool = False, split_salt: str | None = None
    ) -> TrainResult:
        """A run as the daemon makes it (a judged plugin's through its judged run), or
        ``own``: the plugin's own ``train`` alone (a rule about train itself);
        ``split_salt``: under another draw of the held-out split (``run_plugin``'s)."""
        if own:
            result = self.plugin.train(request)
        else:
            result = run_plugin(self.plugin, request, split_salt=split_salt)
        try:  # the type of each field, as train and the daemon check it
            return check_result(result, self.plugin.name)
        except TrainRequestError as exc:  # its refusal, a TrainResultError: the rule's line
            raise RuleFailed(str(exc)) from None


def _stop_at_first_log() -> tuple[Callable[[Any], None], Callable[[], bool]]:
    logged = threading.Event()
    return lambda _: logged.set(), logged.is_set


def _contract(bench: _Bench) -> str:
    plugin = bench.plugin
    missing = [
        n
        for n in ("name", "description", "api_version", "generate_sample_data", "train")
        if not hasattr(plugin, n)
    ]
    if missing:
        raise RuleFailed(f"missing {', '.join(missing)}")
    wrong_api = api_version_error(plugin.api_version)
    if wrong_api is not None:
        raise RuleFailed(wrong_api)
    try:  # each optional capability declared whole, as the loader checks it
        capabilities_of(plugin)
    except TypeError as exc:
        raise RuleFailed(str(exc)) from None
    return f"api_version {plugin.api_version}, name {plugin.name!r}"


def _sample_data(bench: _Bench) -> str:
    first = Path(bench.plugin.generate_sample_data(bench.root / "same1", SAMPLE_COUNT, 0))
    second = Path(bench.plugin.generate_sample_data(bench.root / "same2", SAMPLE_COUNT, 0))
    if not first.exists():
        raise RuleFailed(f"generate_sample_data returned {first}, which does not exist")
    if first.is_file() and first.read_bytes() != second.read_bytes():
        raise RuleFailed("the same seed wrote different bytes")
    return f"{first.name}, the same bytes for the same seed"


def _with_budget(bench: _Bench) -> str:
    result = bench.train(bench.request())
    if result.steps != STEPS:
        raise RuleFailed(f"asked for {STEPS} steps, reported {result.steps}")
    if result.checkpoint is None or not Path(result.checkpoint).is_file():
        raise RuleFailed(f"no checkpoint file at the end (reported {result.checkpoint})")
    return f"{STEPS} steps, checkpoint written"


def _without_budget(bench: _Bench) -> str:
    # The default budget may be long: the run is stopped after its first logged step.
    on_log, should_stop = _stop_at_first_log()
    request = bench.request(steps=None, epochs=None, on_log=on_log, should_stop=should_stop)
    result = bench.train(request)
    if result.steps < 1:
        raise RuleFailed("a request with no budget trained no step")
    return f"no budget: trained (stopped after {result.steps} steps)"


def _model_tensors(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    model = state.get("model", state) if isinstance(state, dict) else state
    flat: dict[str, torch.Tensor] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            flat[prefix] = value
        elif isinstance(value, Mapping):
            for key, item in value.items():
                walk(f"{prefix}.{key}", item)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(f"{prefix}.{i}", item)

    walk("", model)
    return flat


def _resumes(bench: _Bench) -> str:
    whole = bench.train(bench.request("straight", steps=2 * STEPS))
    bench.train(bench.request("halves", steps=STEPS))
    # Forced (train --resume --steps): N more on the same data, which an agent that can
    # tell its data unchanged would otherwise answer up to date.
    resumed = bench.train(bench.request("halves", steps=STEPS, resume=True, forced=True))
    if whole.checkpoint is None or resumed.checkpoint is None:
        raise RuleFailed("a run reported no checkpoint")
    a, b = _model_tensors(Path(whole.checkpoint)), _model_tensors(Path(resumed.checkpoint))
    if a.keys() != b.keys() or not a:
        raise RuleFailed("the resumed run's checkpoint holds other weights")
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    if differ:
        raise RuleFailed(
            f"{STEPS}+{STEPS} steps resumed differ from {2 * STEPS} straight in {differ[0]!r}"
        )
    return f"{STEPS}+{STEPS} steps resumed equal {2 * STEPS} straight, bit for bit"


def _stops(bench: _Bench) -> str:
    on_log, should_stop = _stop_at_first_log()
    result = bench.train(bench.request(steps=50, on_log=on_log, should_stop=should_stop))
    if result.steps >= 50 or not result.stopped_early:
        raise RuleFailed(f"asked to stop, ran {result.steps} of 50 (stopped_early False)")
    if result.checkpoint is None or not Path(result.checkpoint).is_file():
        raise RuleFailed("stopped without a checkpoint")
    return f"stopped at step {result.steps} of 50 with a checkpoint"


def _reports(bench: _Bench) -> str:
    result = bench.train(bench.request())
    if result.precision_used != "fp32":
        raise RuleFailed(f"fp32 requested, precision_used {result.precision_used!r}")
    if result.execution not in {"eager", "cuda_graph", "cuda_graph_compiled"}:
        raise RuleFailed(f"execution {result.execution!r}")
    return f"precision_used {result.precision_used}, execution {result.execution}"


def _refuses_bad_data(bench: _Bench) -> str:
    bad = bench.root / "bad" / "garbage.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(b"\x00\xff not data\n")
    try:  # train's own refusal: a judged run's scoring would refuse the file too
        bench.train(bench.request(data_path=bad), own=True)
    except (TrainRequestError, DataError) as exc:
        if str(bad) not in str(exc) and bad.name not in str(exc):
            raise RuleFailed(f"the refusal does not name the file: {exc}") from None
        return f"garbage refused with {type(exc).__name__} naming the file"
    except Exception as exc:
        raise RuleFailed(
            f"garbage data raised {type(exc).__name__}, not TrainRequestError: {exc}"
        ) from None
    raise RuleFailed("trained on a file of garbage bytes")


def _device_audit(bench: _Bench) -> str:
    from genesis_fp16.testing.device_audit import DeviceAudit

    with DeviceAudit():
        bench.train(bench.request(precision="bf16"))
    return "bf16 steps with the run's device kept apart from the host"


def _probe(bench: _Bench) -> str:
    setup = bench.plugin.probe_setup(bench.sample_data(), 0)
    if not isinstance(setup, ProbeSetup) or not setup.batches:
        raise RuleFailed(f"probe_setup returned {type(setup).__name__} with no batches")
    loss = setup.loss(setup.build_model(), setup.batches[0])
    if not bool(torch.isfinite(loss)):
        raise RuleFailed(f"the probe's loss on its first batch is {float(loss)}")
    default = "; split_batch: the default, each tensor cut in two along its first dimension"
    default = "" if setup.split_batch is not None else default
    return f"{len(setup.batches)} batches, a finite loss{default}"


def _weights_only(bench: _Bench) -> str:
    result = bench.train(bench.request())
    if result.checkpoint is None:
        raise RuleFailed("no checkpoint")
    torch.load(result.checkpoint, map_location="cpu", weights_only=True)
    return f"{Path(result.checkpoint).name} loads with weights_only=True"


def _held_out(bench: _Bench) -> str:
    """The judged run's own check, twice in one folder: the first model is served, and a
    forced second run's candidate is judged against it. A candidate that trained on a
    held-out record is refused by the run (TrainRequestError: this rule's line); one whose
    checkpoint names no records it trained on is judged on its training data."""
    declared = capabilities_of(bench.plugin)
    if declared.judged is None:
        return "not judged (no score_records): no held-out split applies"
    bench.train(bench.request(folder="held_out"))
    gate = bench.train(bench.request(folder="held_out", forced=True)).gate
    sets = {c.name for c in gate.comparisons} if gate is not None else set()
    if "held_out" in sets:
        return "a second model judged against the first on records neither trained on"
    if not declared.records_are_training_data:
        return "its records are evaluation episodes: it trains on none of them"
    raise RuleFailed(
        f"judged on its training data (sets {sorted(sets)}): its task's extra_state() must "
        "name the records it trains on, 'trained_ids' (docs/judging.md)"
    )


# Another draw of the held-out split (its salt), for trains_only_on_rows_kept.
OTHER_SPLIT = "check-agent: another draw of the held-out split"


def _kept_rows_only(bench: _Bench) -> str:
    """Whether the plugin trains on the rows the request keeps, not only names them: the
    judged run can check the names (trains_on_no_held_out_record), never the training,
    so a plugin that trained on every row and named the others was judged on records it
    had learned. It trains twice, afresh, on the same data and seed: under the judged
    run's split and under another draw of it (other rows withheld). A plugin that trains
    on the kept rows alone trains two models; one that trains on the withheld rows too
    trains the same one twice. Resting on training being deterministic (the resume rule's
    check), it catches a model that ignores the split, not every use of a withheld row
    (docs/judging.md, "What the split rests on")."""
    declared = capabilities_of(bench.plugin)
    if declared.judged is None:
        return "not judged (no score_records): no held-out split applies"
    if not declared.records_are_training_data:
        return "its records are evaluation episodes: it trains on none of them"
    first = bench.train(bench.request(folder="split_drawn"))
    again = bench.train(bench.request(folder="split_redrawn"), split_salt=OTHER_SPLIT)
    if first.checkpoint is None or again.checkpoint is None:
        raise RuleFailed("a run reported no checkpoint")
    a, b = _model_tensors(Path(first.checkpoint)), _model_tensors(Path(again.checkpoint))
    if a and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a):
        raise RuleFailed(
            "trained the same model, bit for bit, whichever rows the request withheld: it "
            "trains on the rows withheld for judging, whatever its trained_ids name (train "
            "on request.training_rows(ids) alone, docs/judging.md)"
        )
    return "another draw of the held-out split trains another model: it trains on the rows kept"


def _rebuilds(bench: _Bench) -> str:
    declared = capabilities_of(bench.plugin)
    if declared.replay_task is None:
        raise RuleFailed(
            "no replay_task(context): `genesis-fp16 replay` cannot rebuild this agent's fault "
            "bundles (return the run's TrainingTask, from the bundle's request or its rebuild "
            "record: docs/precision-forensics.md)"
        )
    count = len(declared.batch_types)
    return f"replay_task rebuilds a bundle's step; {count} batch type(s) declared"


RULES: dict[str, Callable[[_Bench], str]] = {
    "contract": _contract,
    "sample_data_generates": _sample_data,
    "trains_with_budget": _with_budget,
    "trains_without_budget": _without_budget,
    "resumes_bit_for_bit": _resumes,
    "stops_at_step_with_checkpoint": _stops,
    "reports_precision_and_execution": _reports,
    "refuses_bad_data": _refuses_bad_data,
    "trains_under_device_audit": _device_audit,
    "probe_setup_works": _probe,
    "checkpoint_loads_weights_only": _weights_only,
    "trains_on_no_held_out_record": _held_out,
    "trains_only_on_rows_kept": _kept_rows_only,
    "rebuilds_fault_steps": _rebuilds,
}


def check_agent(
    plugin: Any, options: Mapping[str, Any] | None = None, rules: Sequence[str] | None = None
) -> AgentReport:
    """Run every rule of :data:`RULES` on ``plugin``; ``options`` are its ``--option``s.

    ``rules`` runs only those (and ``contract``, which the others need).

    >>> report = check_agent(plugin)        # doctest: +SKIP
    >>> print(report.summary())             # doctest: +SKIP
    PASS contract: api_version 3, name 'my_agent'
    ...
    """
    results: list[RuleResult] = []
    with tempfile.TemporaryDirectory(prefix="check-agent-") as folder:
        bench = _Bench(plugin, Path(folder), options or {})
        unknown = sorted(set(rules or ()) - set(RULES))
        if unknown:
            raise ValueError(f"unknown rules {unknown}; the rules: {', '.join(RULES)}")
        chosen = {"contract", *(rules or RULES)}
        for rule, check in RULES.items():
            if rule not in chosen:
                continue
            if rule != "contract" and results and not results[0].ok:
                results.append(RuleResult(rule, False, "not run: the contract rule failed"))
                continue
            try:
                results.append(RuleResult(rule, True, check(bench)))
            except RuleFailed as exc:
                results.append(RuleResult(rule, False, str(exc)))
            except Exception as exc:
                why = str(exc).splitlines()[0] if str(exc) else ""
                results.append(RuleResult(rule, False, f"{type(exc).__name__}: {why}"))
    declared = capabilities_of(plugin).lines() if results[0].ok else []
    return AgentReport(getattr(plugin, "name", "?"), tuple(results), tuple(declared))
