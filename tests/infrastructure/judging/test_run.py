"""One judged run, with a plugin whose model is one number: its candidate, the gate's
verdicts (first, promoted, rejected, held), up to date, the live watch's rollback, and
one-line refusals. No torch: the plugin's checkpoint is a small JSON file."""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from checkpoint_state import checkpoint_state

from genesis_fp16_infrastructure.agent_folder.candidates import (
    candidate_entry,
    list_candidates,
    new_candidate,
    newest_checkpoint,
    read_verdict,
    write_verdict,
)
from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.agent_folder.transaction import Committed, Transaction
from genesis_fp16_infrastructure.agent_folder.transitions import operator_pin, rollback, serve
from genesis_fp16_infrastructure.contract import split
from genesis_fp16_infrastructure.contract.judging import TRAINED_IDS
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.record_losses import RecordIds, RecordLosses
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.split import HELD_OUT, id_hashes
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.errors import ExecutionError
from genesis_fp16_infrastructure.judging import run as judging_run
from genesis_fp16_infrastructure.judging import stores, up_to_date
from genesis_fp16_infrastructure.judging.run import run_plugin
from genesis_fp16_infrastructure.judging.trained_ids import TrainedIdsError, trained_ids
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.step.execution import resolve_execution


@dataclass
class OneNumber:
    """A model that predicts one number: training writes the data's mean label (or
    ``fixed``) as ``ckpt-0000000001.pt``; a record's loss is its squared error."""

    api_version: int = 3
    name: str = "one_number"
    description: str = "a model of one number"
    judging_version: int = 1
    loss_span: float = 1.0
    fixed: float | None = None
    resumed: list[float | None] = field(default_factory=list)
    garbage: bool = False

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        raise NotImplementedError

    def probe_setup(self, data_path: Path | None, seed: int) -> Any:
        raise NotImplementedError

    def train(self, request: TrainRequest) -> TrainResult:
        Path(request.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        found = sorted(Path(request.checkpoint_dir).glob("ckpt-*.pt"))
        self.resumed.append(json.loads(found[-1].read_text())["value"] if found else None)
        labels = [r["y"] for r in _records(request)]
        value = self.fixed if self.fixed is not None else sum(labels) / len(labels)
        step = len(found) + 1
        (Path(request.checkpoint_dir) / f"ckpt-{step:010d}.pt").write_text(
            json.dumps({"value": value})
        )
        return _result(request)

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        if self.garbage:
            return [1.0]  # type: ignore[return-value]
        value = json.loads(checkpoint.read_text())["value"]
        records = _records(request)
        return RecordLosses.of([r["id"] for r in records], [(value - r["y"]) ** 2 for r in records])


def _records(request: TrainRequest) -> list[dict[str, Any]]:
    assert request.data_path is not None
    return json.loads(Path(request.data_path).read_text())  # type: ignore[no-any-return]


def _result(request: TrainRequest) -> TrainResult:
    return TrainResult(
        agent=request.agent,
        precision_requested="fp32",
        precision_used="fp32",
        precision_reason="test",
        device="cpu",
        steps=1,
        skipped_steps=0,
        overflow_rate=0.0,
        loss_scale=1.0,
        final_train_loss=0.0,
        eval={},
        samples_per_second=0.0,
        wall_seconds=0.0,
        checkpoint=None,
        quarantined=0,
    )


def _served_after(plugin: OneNumber, request: TrainRequest) -> str:
    """The id of the model served after a run of ``request``."""
    run_plugin(plugin, request)
    pointer = read_pointer(request.checkpoint_dir)
    assert pointer is not None
    return str(pointer.served.id)


def _data(path: Path, label: float, ids: range) -> Path:
    path.write_text(json.dumps([{"id": f"r{i}", "y": label + 0.01 * (i % 3)} for i in ids]))
    return path


def _on(tmp_path: Path, label: float, ids: range) -> TrainRequest:
    """A request on records ``ids`` labelled about ``label``, in tmp_path's agent folder."""
    return _request(tmp_path, _data(tmp_path / "d.json", label, ids))


def _request(tmp_path: Path, data: Path, **changes: Any) -> TrainRequest:
    values: dict[str, Any] = {
        "agent": "one_number",
        "precision": PrecisionRequest("fp32"),
        "precision_reason": "test",
        "state_dir": tmp_path,
        "checkpoint_dir": tmp_path / "checkpoints",
        "device": "cpu",
        "seed": 1,
        "steps": 1,
        "resume": True,
        "data_path": data,
    }
    return TrainRequest(**(values | changes))


def test_the_first_model_is_served_and_unchanged_data_is_up_to_date(tmp_path: Path) -> None:
    """A first run trains a candidate and serves it (verdict promoted, the records it
    knew kept); a second run on the same records trains nothing."""
    plugin = OneNumber()
    request = _on(tmp_path, 0.5, range(40))
    result = run_plugin(plugin, request)
    assert result.gate is not None and result.gate.outcome == "promoted"
    (candidate,) = list_candidates(request.checkpoint_dir)
    pointer = read_pointer(request.checkpoint_dir)
    assert pointer is not None and pointer.served.id == candidate.name
    assert pointer.served.how == "first" and plugin.resumed == [None]
    assert len(stores.read_known_ids(candidate)) == 40  # type: ignore[arg-type]
    again = run_plugin(plugin, request)
    assert again.up_to_date and again.outcome == "up_to_date" and plugin.resumed == [None]
    assert math.isclose(again.eval["loss"], result.gate.candidate.losses["loss"], abs_tol=1e-6)  # type: ignore[union-attr]
    # Its time is the served model scored and watched: this run's phases, not none (the
    # daemon's run_phase_seconds would then go on showing the first run's).
    assert again.phases == {"live": again.wall_seconds} and again.wall_seconds > 0


def test_an_up_to_date_run_reports_the_precision_and_reason_asked_now(tmp_path: Path) -> None:
    """Served in fp32, asked bf16 now, nothing new: the up-to-date result says bf16 for
    today's reason and names the served model's fp32 (it said the served run's)."""
    plugin = OneNumber()
    request = _on(tmp_path, 0.5, range(40))
    run_plugin(plugin, request)
    asked = replace(request, precision=PrecisionRequest("bf16"), precision_reason="asked now")
    again = run_plugin(plugin, asked)
    assert again.up_to_date and again.steps == 0
    assert (again.precision_requested, again.precision_used) == ("bf16", "bf16")
    assert (
        again.precision_reason
        == "asked now; up to date, no step taken (the served model was trained in fp32)"
    )


@pytest.mark.parametrize(
    ("asked", "stored", "expected"), [("fp32", 65536.0, 1.0), ("fp16", 1024.0, 1024.0)]
)
def test_an_up_to_date_run_stores_the_scale_it_ran_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: str, stored: float, expected: float
) -> None:
    """No step taken: outside fp16 the run's scale is 1, not the served checkpoint's
    disabled-scaler 65536 (which the page charted for an fp32-only agent); in fp16 it is
    the checkpoint's."""
    plugin = OneNumber()
    request = _on(tmp_path, 0.5, range(40))
    run_plugin(plugin, request)
    summary = {"loss_scale": stored, "precision": asked}
    monkeypatch.setattr(up_to_date, "read_summary", lambda checkpoint: summary)
    again = run_plugin(plugin, replace(request, precision=PrecisionRequest(asked)))
    assert again.up_to_date and again.loss_scale == expected
    assert again.history_entry(1.0, "daemon").loss_scale == expected


def test_a_better_candidate_continues_the_served_model_and_is_promoted(tmp_path: Path) -> None:
    """New records with another label: the candidate starts from the served checkpoint
    (copied in), is better on them, and is promoted over it (history keeps the first)."""
    plugin = OneNumber()
    first = _served_after(plugin, _on(tmp_path, 0.0, range(40)))
    request = _on(tmp_path, 0.6, range(40, 80))
    result = run_plugin(plugin, request)
    assert result.gate is not None and result.gate.outcome == "promoted", result.gate
    assert plugin.resumed[-1] == pytest.approx(0.00975)  # the served model's value, copied
    pointer = read_pointer(request.checkpoint_dir)
    assert pointer is not None and pointer.served.id == result.gate.candidate_id
    assert pointer.history[0].id == first and pointer.served.how == "gate"
    candidate = request.checkpoint_dir / "candidates" / pointer.served.id
    verdict = read_verdict(candidate).to_json()
    assert verdict["judged"][0]["upper"] < verdict["judged"][0]["margin"]


def test_a_worse_candidate_is_rejected_and_not_trained_again(tmp_path: Path) -> None:
    """A candidate worse on the same records is rejected (the served model stays), and
    the next run on those records is up to date instead of training it again."""
    plugin = OneNumber()
    run_plugin(plugin, _on(tmp_path, 0.3, range(40)))
    plugin.fixed = 0.9
    request = _on(tmp_path, 0.3, range(40, 80))
    result = run_plugin(plugin, request)
    assert result.gate is not None and result.gate.outcome == "rejected" and result.rejected
    assert result.outcome == "rejected" and "worse than the served model" in result.gate.reason
    assert result.gate.served_id == read_pointer(request.checkpoint_dir).served.id  # type: ignore[union-attr]
    assert run_plugin(plugin, request).up_to_date


def test_a_pinned_model_holds_a_better_candidate(tmp_path: Path) -> None:
    """Pinned by the operator, the served model stays; the candidate's verdict is held."""
    plugin = OneNumber()
    run_plugin(plugin, _on(tmp_path, 0.0, range(40)))
    folder = tmp_path / "checkpoints"
    pointer = read_pointer(folder)
    assert pointer is not None
    serve(folder, pointer.served, "manual", pin=operator_pin("model promote"))
    result = run_plugin(plugin, _on(tmp_path, 0.6, range(40, 80)))
    assert result.gate is not None and result.gate.outcome == "held"
    assert result.gate.reason.startswith("pinned by the operator")
    assert read_pointer(folder).served.id == pointer.served.id  # type: ignore[union-attr]


def test_the_watch_rolls_back_a_served_model_worse_on_later_records(tmp_path: Path) -> None:
    """Served B learned labels that later records contradict: on those records it is
    worse than its predecessor A beyond the margin, so A is served again and B's
    verdict is rolled_back with the watch's figures; the result's ``live`` reports it."""
    plugin = OneNumber()
    first = _served_after(plugin, _on(tmp_path, 0.0, range(40)))
    second = _served_after(plugin, _on(tmp_path, 0.6, range(40, 80)))
    result = run_plugin(plugin, _on(tmp_path, 0.0, range(80, 120)))
    live = result.live
    assert live is not None and live.rolled_back and live.now_served == first
    watched = live.watched
    assert live.records == 40 and watched.lower > watched.margin and (watched.difference or 0) > 0.3
    assert (
        watched.served_loss is not None and live.primary == "loss" and live.regressed == ("loss",)
    )
    verdict = read_verdict(tmp_path / "checkpoints" / "candidates" / second).to_json()
    assert verdict["outcome"] == "rolled_back" and verdict["reason"] == "live_regression"


def test_a_judged_run_first_settles_what_a_killed_rollback_left(tmp_path: Path) -> None:
    """A rollback killed after its pointer's commit left B's verdict ``promoted``: the next
    judged run (up to date here: it writes no pointer) writes B's ``rolled_back`` first."""
    plugin = OneNumber()
    _served_after(plugin, _on(tmp_path, 0.0, range(40)))
    second = _served_after(plugin, _on(tmp_path, 0.6, range(40, 80)))
    folder = tmp_path / "checkpoints"
    rollback(folder, verdict={"reason": "live_regression"})
    write_verdict(folder / "candidates" / second, {"outcome": "promoted"})  # the kill's state
    assert run_plugin(plugin, _on(tmp_path, 0.0, range(40))).up_to_date
    verdict = read_verdict(folder / "candidates" / second).to_json()
    assert verdict["outcome"] == "rolled_back" and verdict["reason"] == "live_regression"


def test_the_watch_keeps_a_model_no_worse_on_later_records(tmp_path: Path) -> None:
    """Later records on which the served model is as good as its predecessor: no
    rollback, and the running figures go into the pointer's served entry."""
    plugin = OneNumber()
    run_plugin(plugin, _on(tmp_path, 0.0, range(40)))
    run_plugin(plugin, _on(tmp_path, 0.6, range(40, 80)))
    result = run_plugin(plugin, _on(tmp_path, 0.6, range(80, 120)))
    live = result.live
    assert live is not None and not live.rolled_back and not live.regression
    pointer = read_pointer(tmp_path / "checkpoints")
    assert pointer is not None  # the watched model: served, or first in the history since
    watched = next(e for e in [pointer.served, *pointer.history] if e.id == live.served)
    assert watched.live is not None and watched.live.records == live.records == 40
    assert watched.live.against == live.against and watched.live.served == watched.id


def test_a_broken_pointer_or_bad_scores_refuse_the_run_in_one_line(tmp_path: Path) -> None:
    """An unreadable pointer and scores that are not RecordLosses: TrainRequestError, one
    line naming the repair or the agent."""
    plugin = OneNumber()
    request = _on(tmp_path, 0.0, range(40))
    run_plugin(plugin, request)
    SERVED_POINTER.at(request.checkpoint_dir).write_text("garbage")
    repair = r"unreadable: .* `genesis-fp16 model promote"
    with pytest.raises(TrainRequestError, match=repair) as caught:
        run_plugin(plugin, request)
    assert "\n" not in str(caught.value)
    SERVED_POINTER.at(request.checkpoint_dir).unlink()
    plugin.garbage = True
    with pytest.raises(TrainRequestError, match=r"one_number: cannot score .*not RecordLosses"):
        run_plugin(plugin, _request(tmp_path / "other", request.data_path))


def test_a_plugin_without_the_capability_trains_as_before(tmp_path: Path) -> None:
    """No score_records (or api_version 2): run_plugin is the plugin's own train, into
    the checkpoint folder itself, with no candidate and no pointer."""
    for plugin in (OneNumber(api_version=2, name="v2"), _Plain(name="plain")):
        folder = tmp_path / plugin.name
        result = run_plugin(plugin, _request(folder, _data(tmp_path / "d.json", 0.0, range(4))))
        assert result.gate is None and (folder / "checkpoints" / "ckpt-0000000001.pt").is_file()
        assert list_candidates(folder / "checkpoints") == []


class _Plain(OneNumber):
    """OneNumber without score_records."""

    def __getattribute__(self, name: str) -> Any:
        if name == "score_records":
            raise AttributeError(name)
        return super().__getattribute__(name)


class _Uncapturable(OneNumber):
    """OneNumber whose run asks ``cuda_graph=on`` on the CPU: an ``ExecutionError``."""

    def train(self, request: TrainRequest) -> TrainResult:
        optimizer = torch.optim.SGD(torch.nn.Linear(1, 1).parameters())
        resolve_execution("on", torch.device("cpu"), [optimizer])
        raise AssertionError("resolve_execution captured a step on the CPU")


class _PlainUncapturable(_Uncapturable, _Plain):
    """_Uncapturable without score_records: its own train, not a judged run."""


@pytest.mark.parametrize("plugin", [_Uncapturable(), _PlainUncapturable()])
def test_an_execution_the_run_cannot_honour_is_the_requests_refusal(
    tmp_path: Path, plugin: OneNumber
) -> None:
    """An ExecutionError from a plugin's run (judged or not) leaves run_plugin as a
    TrainRequestError with its line, which train and the daemon refuse in one line."""
    with pytest.raises(TrainRequestError, match=r"^cuda_graph=on, but this run cannot") as caught:
        run_plugin(plugin, _on(tmp_path, 0.0, range(4)))
    assert isinstance(caught.value.__cause__, ExecutionError)
    assert str(caught.value) == str(caught.value.__cause__)


def _coin_data(path: Path, count: int) -> Path:
    """``count`` records labelled 0 or 1 at random (seeded): one number fits them at 0.5."""
    rng = random.Random(5)
    path.write_text(
        json.dumps([{"id": f"c{i}", "y": float(rng.random() < 0.5)} for i in range(count)])
    )
    return path


def test_an_inconclusive_candidate_is_judged_again_without_training(tmp_path: Path) -> None:
    """Issue 62: a candidate 0.08 off the served number, on 50 records, is neither shown
    no worse nor worse: inconclusive, kept, not served, not called worse. When 4,000
    records arrive the next run judges that same candidate again and promotes it (its
    excess loss, 0.0064, is within the margin, 5% of about 0.25): no training, no new
    candidate."""
    plugin = OneNumber()
    first = run_plugin(plugin, _request(tmp_path, _coin_data(tmp_path / "d.json", 40)))
    assert first.gate is not None and first.gate.outcome == "promoted"
    served = read_pointer(tmp_path / "checkpoints")
    assert served is not None
    value = json.loads((tmp_path / "checkpoints" / served.served.checkpoint).read_text())
    plugin.fixed = value["value"] + 0.08
    second = run_plugin(plugin, _request(tmp_path, _coin_data(tmp_path / "d.json", 50)))
    assert second.gate is not None and second.gate.outcome == "inconclusive", second.gate.reason
    assert not second.rejected and second.gate.records_needed is not None
    kept = second.gate.candidate_id
    trained, candidates = len(plugin.resumed), list_candidates(tmp_path / "checkpoints")
    third = run_plugin(plugin, _request(tmp_path, _coin_data(tmp_path / "d.json", 4050)))
    assert third.gate is not None and third.gate.candidate_id == kept, third.gate
    assert third.gate.outcome == "promoted" and third.steps == 0 and not third.up_to_date
    assert third.phases is not None and set(third.phases) == {"live", "gate"}
    assert third.phases["gate"] == third.gate.seconds > 0
    assert math.isclose(sum(third.phases.values()), third.wall_seconds, abs_tol=1e-4)
    assert len(plugin.resumed) == trained  # the plugin's train was not called
    assert list_candidates(tmp_path / "checkpoints") == candidates
    pointer = read_pointer(tmp_path / "checkpoints")
    assert pointer is not None and pointer.served.id == kept


def _kept_inconclusive(plugin: OneNumber, tmp_path: Path) -> str:
    """A first model served on 40 records, then ``plugin``'s candidate 0.08 off it on 50,
    kept inconclusive (test_an_inconclusive_candidate_is_judged_again_without_training):
    its id."""
    run_plugin(plugin, _request(tmp_path, _coin_data(tmp_path / "d.json", 40)))
    served = read_pointer(tmp_path / "checkpoints")
    assert served is not None
    value = json.loads((tmp_path / "checkpoints" / served.served.checkpoint).read_text())
    plugin.fixed = value["value"] + 0.08
    second = run_plugin(plugin, _request(tmp_path, _coin_data(tmp_path / "d.json", 50)))
    assert second.gate is not None and second.gate.outcome == "inconclusive"
    assert second.gate.candidate_id is not None
    return second.gate.candidate_id


def test_a_close_and_a_kept_candidate_judged_again_are_one_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The candidate phase reads, decides, then commits once: a candidate cut short on
    another request is closed and the kept inconclusive one judged again (promoted) in
    one transaction, the close's verdict first, then the kept one's and the pointer."""
    plugin = OneNumber()
    kept = _kept_inconclusive(plugin, tmp_path)
    cut = new_candidate(tmp_path / "checkpoints", {"continues": kept, "seed": 99})
    committed: list[Committed] = []
    real = judging_run.transaction

    @contextmanager
    def counted(folder: Path, *args: Any, **kwargs: Any) -> Iterator[Transaction]:
        with real(folder, *args, **kwargs) as tx:
            yield tx
        assert tx.done is not None
        committed.append(tx.done)

    monkeypatch.setattr(judging_run, "transaction", counted)
    third = run_plugin(plugin, _request(tmp_path, _coin_data(tmp_path / "d.json", 4050)))
    assert third.gate is not None and third.gate.outcome == "promoted" and third.steps == 0
    assert len(committed) == 1, committed  # the candidate phase's one commit
    assert committed[0].verdicts == (cut.name, kept)
    assert [e.kind for e in committed[0].entries] == ["gate"]
    assert read_verdict(cut).outcome == "undecided"
    assert read_verdict(cut).reason.startswith("not continued: ")


def test_a_kept_candidate_whose_list_is_malformed_is_not_judged_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 92: a candidate kept inconclusive before its list was refused (its newest
    checkpoint names its records as an int32 tensor) is not judged again when records
    arrive, "on training data": the run says so in one warning and trains a new one."""
    plugin = OneNumber()
    kept = _kept_inconclusive(plugin, tmp_path)
    more = {keys.EXTRA: {TRAINED_IDS: torch.arange(3, dtype=torch.int32)}}
    CheckpointManager(tmp_path / "checkpoints" / "candidates" / kept).save(
        checkpoint_state(2, more=more)
    )
    with caplog.at_level("WARNING"):
        third = run_plugin(plugin, _request(tmp_path, _coin_data(tmp_path / "d.json", 4050)))
    assert third.gate is not None and third.gate.candidate_id != kept and third.steps == 1
    (warned,) = [r.getMessage() for r in caplog.records if "not judged again" in r.getMessage()]
    assert f"candidate {kept}: malformed trained_ids (a torch.int32 tensor" in warned


def test_the_known_records_are_a_veto_that_holds_no_clean_candidate_back() -> None:
    """Issue 68's gate with power, through the gate's own questions (``_comparisons``):
    400 records the served model knew, on which a candidate trained afresh is neither
    shown within the margin nor beyond it, are asked as a veto (``required=False``) that
    does not hold back its promotion on the pooled records (se_darwin's clean growth
    stayed inconclusive on the same known records for good); shown worse there, it is
    still rejected."""
    from types import SimpleNamespace

    import numpy as np

    from genesis_fp16_infrastructure.judging.gate import decide
    from genesis_fp16_infrastructure.judging.questions import _comparisons

    rng = np.random.default_rng(7)
    ids = [f"r{i}" for i in range(2000)]
    theirs = RecordLosses.of(ids, rng.uniform(0.2, 0.6, 2000).tolist())
    served = SimpleNamespace(
        known=np.sort(split.id_hashes(ids[:400])),
        losses=theirs,
        records=theirs,
        plugin=SimpleNamespace(loss_span=1.0, judging_margin=0.01),
        checkpoint=Path("served.pt"),
    )
    request = SimpleNamespace(golden_data_path=None)
    for shift, outcome in ((0.005, "promoted"), (0.1, "rejected")):
        noise = rng.normal(0.0, 0.1, 2000)
        noise[400:] = rng.normal(-0.02, 0.02, 1600)
        noise[:400] += shift
        ours = RecordLosses.of(ids, np.maximum(np.array(theirs.column()) + noise, 0.0).tolist())
        asked = _comparisons(request, served, ours, Path("c.pt"), False)  # type: ignore[arg-type]
        assert [(c.name, c.records, c.required) for c in asked] == [
            ("current", 2000, True),
            ("known", 400, False),
        ]
        assert decide(asked)[0] == outcome
        assert decide(asked[:1])[0] == "promoted"  # the pooled records alone promote it


@dataclass
class TwoColumns(OneNumber):
    """OneNumber scored on two columns: ``sq`` (primary, the squared error) and ``abs``
    (the absolute error, plus ``abs_bias`` for the candidate trained with ``fixed``)."""

    abs_bias: float = 0.0

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        value = json.loads(checkpoint.read_text())["value"]
        bias = self.abs_bias if self.fixed is not None and value == self.fixed else 0.0
        records = _records(request)
        columns = {
            "sq": [(value - r["y"]) ** 2 for r in records],
            "abs": [abs(value - r["y"]) + bias for r in records],
        }
        return RecordLosses.of([r["id"] for r in records], columns)


def test_a_judged_run_judges_every_loss_column(tmp_path: Path) -> None:
    """A candidate as good as the served model on the primary column and worse by 0.2 on
    the second is rejected; its verdict's comparisons cover both columns, the primary's
    first, and its reason names the worse one."""
    plugin = TwoColumns()
    first = _served_after(plugin, _on(tmp_path, 0.5, range(400)))
    plugin.fixed, plugin.abs_bias = 0.51, 0.2  # the mean label of the records below
    result = run_plugin(plugin, replace(_on(tmp_path, 0.5, range(400)), forced=True))
    assert result.gate is not None and result.gate.outcome == "rejected", result.gate
    assert "abs " in result.gate.reason
    metrics = [c.metric for c in result.gate.comparisons]
    assert metrics[0] == "sq" and set(metrics) == {"sq", "abs"}
    pointer = read_pointer(tmp_path / "checkpoints")
    assert pointer is not None and pointer.served.id == first


def _serve_fixed(tmp_path: Path, plugin: TwoColumns, bias: float) -> tuple[str, str]:
    """A served on 400 records, then B (the same number, its ``abs`` worse by ``bias``)
    served by hand over it, whatever the gate said; their ids."""
    first = _served_after(plugin, _on(tmp_path, 0.5, range(400)))
    plugin.fixed, plugin.abs_bias = 0.51, bias
    result = run_plugin(plugin, replace(_on(tmp_path, 0.5, range(400)), forced=True))
    folder = tmp_path / "checkpoints"
    assert result.gate is not None and result.gate.candidate_id is not None
    candidate = folder / "candidates" / result.gate.candidate_id
    checkpoint = newest_checkpoint(candidate)
    assert checkpoint is not None
    serve(folder, candidate_entry(folder, candidate, checkpoint), "manual")
    return first, result.gate.candidate_id


def test_the_watch_rolls_back_on_a_regression_of_the_second_column_alone(
    tmp_path: Path,
) -> None:
    """Served B is as good as its predecessor A on the primary column ``sq`` and worse by
    0.2 on ``abs``: on later records the watch rolls B back, naming ``abs`` alone, in the
    report and in B's verdict."""
    plugin = TwoColumns()
    first, second = _serve_fixed(tmp_path, plugin, 0.2)
    live = run_plugin(plugin, _on(tmp_path, 0.5, range(400, 600))).live
    assert live is not None and live.rolled_back and live.now_served == first
    assert live.regressed == ("abs",) and live.primary == "sq" and not live.watched.regression
    assert set(live.metrics) == {"sq", "abs"} and live.metrics["abs"].alpha == 0.025
    verdict = read_verdict(tmp_path / "checkpoints" / "candidates" / second).to_json()
    assert verdict["outcome"] == "rolled_back" and verdict["detail"].startswith(
        "live regression: abs "
    )


def test_clean_records_on_two_columns_keep_the_served_model(tmp_path: Path) -> None:
    """The same with B no worse on either column: each batch of later records is watched
    on both columns (B first, then the candidates the gate serves after it), and no
    model is rolled back."""
    plugin = TwoColumns()
    _, second = _serve_fixed(tmp_path, plugin, 0.0)
    watched = []
    for start in (400, 600, 800):
        live = run_plugin(plugin, _on(tmp_path, 0.5, range(start, start + 200))).live
        assert live is not None and not live.regression and not live.rolled_back
        assert set(live.metrics) == {"sq", "abs"} and live.self_test is not None
        watched.append(live.served)
    assert watched[0] == second
    pointer = read_pointer(tmp_path / "checkpoints")
    assert pointer is not None and "rollback" not in [e.kind for e in pointer.journal]


def _named(tmp_path: Path, name: str, value: Any) -> Path:
    state = checkpoint_state(more={keys.EXTRA: {TRAINED_IDS: value}})
    return CheckpointManager(tmp_path / name).save(state)


def test_a_checkpoint_names_its_records_as_ids_or_as_their_hashes_alike(tmp_path: Path) -> None:
    """trained_ids reads a list of ids and the int64 tensor of their hashes
    (TrainRequest.trained_ids, se_darwin's form) as the same records; no list, or None,
    names nothing."""
    ids = [f"r{i}" for i in range(50)]
    as_list = trained_ids(_named(tmp_path, "list", ids))
    as_hashes = trained_ids(_named(tmp_path, "hashes", TrainRequest.trained_ids(reversed(ids))))
    assert as_list is not None and as_hashes is not None and len(as_list) == 50
    assert as_list.tolist() == as_hashes.tolist()
    assert trained_ids(_named(tmp_path, "none", None)) is None
    plain = checkpoint_state(more={keys.EXTRA: {}})
    assert trained_ids(CheckpointManager(tmp_path / "absent").save(plain)) is None


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ([1, 2, 3], "a list of int"),
        (["r1", 2], "a list of int and str"),
        (torch.arange(3, dtype=torch.int32), "a torch.int32 tensor of shape (3,)"),
        (torch.zeros(3), "a torch.float32 tensor of shape (3,)"),
        (torch.zeros((2, 2), dtype=torch.int64), "a torch.int64 tensor of shape (2, 2)"),
        (7, "int 7"),
    ],
    ids=["ints", "mixed", "int32", "float32", "2d", "int"],
)
def test_a_malformed_list_of_trained_records_is_refused_as_malformed(
    tmp_path: Path, value: Any, said: str
) -> None:
    """Issue 92: a trained_ids that is neither a list of str ids nor one 1-D int64 tensor
    of their hashes is refused in one line saying what it is, not read as naming nothing."""
    with pytest.raises(TrainedIdsError, match=r"^malformed trained_ids \(" + re.escape(said)):
        trained_ids(_named(tmp_path, "bad", value))


@dataclass
class HeldOut(OneNumber):
    """OneNumber with real checkpoints that name the records they trained on (the rows
    ``request.training_rows`` keeps), so that the gate judges on held-out records; with
    ``honour``, it scores only the rows the request asks for (``scoring_rows``); every
    ``score_only`` it is handed is kept in ``asked`` (None: every record)."""

    honour: bool = True
    asked: list[list[str] | None] = field(default_factory=list)

    def train(self, request: TrainRequest) -> TrainResult:
        records = _records(request)
        rows = request.training_rows([r["id"] for r in records])
        value = sum(records[i]["y"] for i in rows) / len(rows)
        folder = Path(request.checkpoint_dir)
        step = len(list(folder.glob("*.pt"))) + 1
        extra = {TRAINED_IDS: [records[i]["id"] for i in rows]}
        more = {keys.EXTRA: extra}
        CheckpointManager(folder).save(checkpoint_state(step, torch.tensor([value]), more=more))
        return _result(request)

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        value = float(torch.load(checkpoint, weights_only=True)[keys.MODEL]["w"][0])
        records = _records(request)
        ids = [r["id"] for r in records]
        rows = request.scoring_rows(ids) if self.honour else range(len(ids))
        only = request.score_only
        self.asked.append(None if only is None else [ids[i] for i in only.rows(ids)])
        errors = [(value - records[i]["y"]) ** 2 for i in rows]
        return RecordLosses.of([ids[i] for i in rows], errors)


_MALFORMED: dict[str, Callable[[list[int]], Any]] = {
    "ints": lambda rows: rows,  # the rows' numbers, not their ids
    "int32": lambda rows: torch.tensor(rows, dtype=torch.int32),
    "float32": lambda rows: torch.tensor(rows, dtype=torch.float32),
}


@dataclass
class Malformed(HeldOut):
    """Issue 92's attack: trains on every record, held-out ones too, and names the rows
    ``training_rows`` keeps in a form the run cannot read (``form``, of _MALFORMED)."""

    form: str = "ints"

    def train(self, request: TrainRequest) -> TrainResult:
        records = _records(request)
        rows = request.training_rows([r["id"] for r in records])
        value = sum(r["y"] for r in records) / len(records)
        folder = Path(request.checkpoint_dir)
        more = {keys.EXTRA: {TRAINED_IDS: _MALFORMED[self.form](rows)}}
        CheckpointManager(folder).save(checkpoint_state(1, torch.tensor([value]), more=more))
        return _result(request)


def _served_unnamed(tmp_path: Path, form: str) -> TrainRequest:
    """A request on 300 records whose agent serves a model (adopted: written before the
    judged run read its list) that names its records in ``form``."""
    request = _on(tmp_path, 0.3, range(300))
    more = {keys.EXTRA: {TRAINED_IDS: _MALFORMED[form](list(range(10)))}}
    state = checkpoint_state(1, torch.tensor([0.9]), more=more)
    CheckpointManager(Path(request.checkpoint_dir)).save(state)
    return request


@pytest.mark.parametrize("form", list(_MALFORMED))
@pytest.mark.parametrize("served", [False, True], ids=["first", "against_served"])
def test_a_candidate_whose_list_of_records_is_malformed_is_refused(
    tmp_path: Path, form: str, served: bool
) -> None:
    """Issue 92: a candidate that trained on held-out records and names the others as
    ints or an int32/float32 tensor is refused in one line that says its list is
    malformed, verdict undecided: a first model, or against a served model whose list is
    malformed too (it was promoted "on training data")."""
    request = _served_unnamed(tmp_path, form) if served else _on(tmp_path, 0.3, range(300))
    before = read_pointer(request.checkpoint_dir)
    with pytest.raises(TrainRequestError, match="malformed trained_ids") as refused:
        run_plugin(Malformed(form=form), request)
    assert "\n" not in str(refused.value)
    (candidate,) = list_candidates(request.checkpoint_dir)
    assert read_verdict(candidate).outcome == "undecided"
    after = read_pointer(request.checkpoint_dir)
    assert (after is None) == (not served)
    assert before is None or (after is not None and after.served.id == before.served.id)


def test_a_served_model_whose_list_is_malformed_is_warned_of_and_names_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A served model whose checkpoint's list cannot be read (served before the run
    refused one) is said in one warning and taken as naming none: a candidate that names
    its records is still judged on held-out records."""
    request = _served_unnamed(tmp_path, "int32")
    with caplog.at_level("WARNING"):
        result = run_plugin(HeldOut(), request)
    warned = [r.getMessage() for r in caplog.records if "malformed trained_ids" in r.getMessage()]
    assert len(warned) == 1 and "a torch.int32 tensor of shape (10,)" in warned[0]
    assert result.gate is not None and result.gate.evidence == "held_out"


def test_an_empty_held_out_set_is_said_as_such_not_as_nothing_served(tmp_path: Path) -> None:
    """Issue 92: with a model served and no held-out record in the data, the verdict says
    there are no records to judge on, not "nothing served to compare with"."""
    kept = [i for i in range(400) if not HELD_OUT.of_ids([f"r{i}"])[0]][:300]
    data = tmp_path / "d.json"
    data.write_text(json.dumps([{"id": f"r{i}", "y": 0.3 + 0.01 * (i % 3)} for i in kept]))
    run_plugin(HeldOut(), _request(tmp_path, data))
    forced = run_plugin(HeldOut(), _request(tmp_path, data, forced=True))
    assert forced.gate is not None and forced.gate.served_id is not None
    assert forced.gate.reason == "held_out: no records to judge on, too few to decide"
    assert all("nothing served" not in c.reason for c in forced.gate.comparisons)


def _three_runs(tmp_path: Path, plugin: HeldOut) -> list[TrainResult]:
    """A first model on 300 records, a second after 300 more with other labels, then a
    third run after 300 more: the second's gate and the third's watch."""
    found = []
    tmp_path.mkdir()
    for n, label in enumerate((0.3, 0.5, 0.5)):
        request = _request(tmp_path, _data(tmp_path / f"d{n}.json", label, range(300 * (n + 1))))
        found.append(run_plugin(plugin, request))
    return found


def test_the_gate_and_the_watch_ask_only_for_the_records_they_judge(tmp_path: Path) -> None:
    """The candidate is asked for the held-out records the served model did not train on,
    the watch's predecessor for the records new since the served model, the served model
    for all; a plugin that scores only those gets the same verdicts and figures as one
    that scores every record."""
    honours, ignores = HeldOut(), HeldOut(honour=False)
    judged = _three_runs(tmp_path / "honours", honours)
    alike = _three_runs(tmp_path / "ignores", ignores)
    assert honours.asked == ignores.asked
    first, served2, candidate2, served3, previous3, candidate3 = honours.asked
    assert first is None and served2 is None and served3 is None
    held = [f"r{i}" for i in range(600) if HELD_OUT.of_ids([f"r{i}"])[0]]
    assert candidate2 is not None and sorted(candidate2) == sorted(held)
    assert 20 < len(held) < 300  # about a fifth
    assert previous3 is not None and sorted(previous3) == sorted(f"r{i}" for i in range(600, 900))
    assert candidate3 is not None and len(candidate3) > len(candidate2)
    for ours, theirs in zip(judged, alike, strict=True):
        assert ours.gate is not None and theirs.gate is not None
        assert ours.gate.outcome == theirs.gate.outcome
        assert ours.gate.comparisons == theirs.gate.comparisons
        assert (ours.live is None) == (theirs.live is None)
    assert judged[2].live is not None and alike[2].live is not None
    assert judged[2].live.records == alike[2].live.records == 300
    assert judged[2].live.metrics == alike[2].live.metrics


@dataclass
class Listing(HeldOut):
    """HeldOut that lists its records unscored (``record_ids``)."""

    def record_ids(self, request: TrainRequest) -> RecordIds:
        return RecordIds(tuple(r["id"] for r in _records(request)))


def test_a_plugin_that_lists_its_records_has_its_served_model_scored_where_needed(
    tmp_path: Path,
) -> None:
    """The served model of a plugin that lists its records is asked for the held-out
    records and those it did not know, not every one; the verdicts and the watch's
    figures are those of a plugin scored on every record."""
    lists, scores_all = Listing(), HeldOut()
    judged = _three_runs(tmp_path / "lists", lists)
    alike = _three_runs(tmp_path / "all", scores_all)
    served2, served3 = lists.asked[1], lists.asked[3]
    held = {f"r{i}" for i in range(900) if HELD_OUT.of_ids([f"r{i}"])[0]}
    assert served2 is not None and set(served2) == {i for i in held if int(i[1:]) < 600} | {
        f"r{i}" for i in range(300, 600)
    }
    assert served3 is not None and set(served3) == held | {f"r{i}" for i in range(600, 900)}
    assert lists.asked[2] == scores_all.asked[2] and lists.asked[4:] == scores_all.asked[4:]
    for ours, theirs in zip(judged, alike, strict=True):
        assert ours.gate is not None and theirs.gate is not None
        assert ours.gate.outcome == theirs.gate.outcome
        assert ours.gate.comparisons == theirs.gate.comparisons
    assert judged[2].live is not None and alike[2].live is not None
    assert judged[2].live.metrics == alike[2].live.metrics


@dataclass
class SlowListing(Listing):
    """Listing whose listing takes ``seconds`` on the clock ``clock`` adds to."""

    clock: list[float] = field(default_factory=lambda: [0.0])
    seconds: float = 5.0

    def record_ids(self, request: TrainRequest) -> RecordIds:
        self.clock[0] += self.seconds
        return super().record_ids(request)


def test_a_listing_is_the_runs_read_of_its_data_not_judging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing plugin's ``record_ids`` is the run's first read of its data (training
    then reads it from the plugin's cache): its seconds count as the run's "read" phase,
    not as "live", judging's. So in a trained run and in one with nothing new; a plugin
    that lists nothing has no "read" of the run's."""
    plugin, real = SlowListing(), time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: real() + plugin.clock[0])
    *_, third = _three_runs(tmp_path / "runs", plugin)
    again = run_plugin(plugin, _request(tmp_path / "runs", tmp_path / "runs" / "d2.json"))
    assert again.up_to_date
    for result in (third, again):
        phases = result.phases
        assert phases is not None and 5.0 <= phases["read"] < 6.0  # the listing, nearly all
        assert 0 <= phases["live"] < 5.0
        assert math.isclose(sum(phases.values()), result.wall_seconds, abs_tol=1e-4)
    assert set(third.phases or {}) == {"read", "live", "gate"}
    assert set(again.phases or {}) == {"read", "live"}
    *_, plain = _three_runs(tmp_path / "plain", HeldOut())
    assert plain.phases is not None and set(plain.phases) == {"live", "gate"}


@dataclass
class BadListing(HeldOut):
    """HeldOut whose ``record_ids`` answers what ``listing`` builds."""

    listing: Callable[[TrainRequest], Any] = lambda request: None

    def record_ids(self, request: TrainRequest) -> Any:
        return self.listing(request)


def _changed_after(ids: tuple[str, ...]) -> RecordIds:
    """A listing checked when built, then changed (a frozen object set anew)."""
    listed = RecordIds(ids)
    object.__setattr__(listed, "ids", (ids[0], ids[0]))
    return listed


def _hashes_changed_after(ids: tuple[str, ...]) -> RecordIds:
    """A listing with its ids' hashes, checked when built, then given other hashes."""
    listed = RecordIds(ids, hashes=id_hashes(ids))
    object.__setattr__(listed, "hashes", id_hashes(ids[::-1]))
    return listed


def test_a_listing_that_is_not_one_refuses_the_run_in_one_line(tmp_path: Path) -> None:
    """What record_ids returns is checked where the run uses it: not a RecordIds, an id
    twice (when built, or changed after), a segment that is not a string, hashes that are
    not its ids' (changed after: the run keeps the plugin's hashes, checked again): the
    run is refused in one line naming the agent, and the served model stays."""
    plugin = BadListing()
    first = _request(tmp_path, _data(tmp_path / "d0.json", 0.3, range(300)))
    run_plugin(plugin, first)
    served = read_pointer(tmp_path / "checkpoints")
    request = _request(tmp_path, _data(tmp_path / "d1.json", 0.5, range(600)))
    for listing, why in (
        (lambda r: ["r1", "r2"], "record_ids returned a list, not RecordIds or None"),
        (lambda r: RecordIds(("r1", "r1")), "RecordIds: id 'r1' twice"),
        (lambda r: _changed_after(("r1", "r2")), "RecordIds: id 'r1' twice"),
        (lambda r: RecordIds(("r1",), (3,)), "RecordIds: segment 0 is 3, not a string"),  # type: ignore[arg-type]
        (lambda r: _hashes_changed_after(("r1", "r2")), "RecordIds: hashes are not the ids'"),
    ):
        plugin.listing = listing
        with pytest.raises(TrainRequestError, match=f"cannot list its records: {why}") as caught:
            run_plugin(plugin, request)
        assert "\n" not in str(caught.value)
        assert read_pointer(tmp_path / "checkpoints") == served


def _committed(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[int]]:
    """Every transaction's commit (what it did) and the pointer lock's acquisitions, as a
    run makes them."""
    from genesis_fp16_infrastructure.agent_folder import pointer, transaction

    commits: list[Any] = []
    locks = [0]
    real_commit, real_lock = transaction.Transaction.commit, pointer.take_lock

    def commit(self: transaction.Transaction) -> Any:
        commits.append(real_commit(self))
        return commits[-1]

    def take_lock(*args: Any) -> Any:
        locks[0] += 1
        return real_lock(*args)

    monkeypatch.setattr(transaction.Transaction, "commit", commit)
    monkeypatch.setattr(pointer, "take_lock", take_lock)
    return commits, locks


def test_the_first_run_is_two_transactions_served_and_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run: the served phase's transaction finds no pointer and stages nothing;
    the gate's commits the verdict and the first promotion together; one lock each."""
    commits, locks = _committed(monkeypatch)
    result = run_plugin(OneNumber(), _on(tmp_path, 0.5, range(40)))
    assert result.gate is not None and result.gate.outcome == "promoted"
    assert [c.before for c in commits] == [None, None] and commits[0].after is None
    assert [e.kind for e in commits[1].entries] == ["first"]
    assert commits[1].verdicts == (result.gate.candidate_id,) and locks == [2]


def test_a_run_that_rolls_back_is_one_transaction_per_phase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch rolls the served model back: the served phase's transaction (nothing
    staged), the watch's (the rollback and its verdict), the gate's (the candidate's
    verdict and, when promoted, its promotion): three commits, one lock each."""
    plugin = OneNumber()
    first = _served_after(plugin, _on(tmp_path, 0.0, range(40)))
    second = _served_after(plugin, _on(tmp_path, 0.6, range(40, 80)))
    commits, locks = _committed(monkeypatch)
    result = run_plugin(plugin, _on(tmp_path, 0.0, range(80, 120)))
    assert result.live is not None and result.live.now_served == first
    assert result.gate is not None and result.gate.candidate_id is not None
    assert len(commits) == 3 and locks == [3]
    served, watched, gated = commits
    assert served.entries == () and served.after is served.before
    assert [e.kind for e in watched.entries] == ["rollback"] and watched.verdicts == (second,)
    promoted = ["gate"] if result.gate.outcome == "promoted" else []
    assert [e.kind for e in gated.entries] == promoted
    assert gated.verdicts[0] == result.gate.candidate_id


def test_a_run_reports_the_changes_its_transactions_committed(tmp_path: Path) -> None:
    """A run whose watch rolls back and whose gate judges: its result carries each
    journal entry its transactions committed, oldest first (the daemon counts these),
    through its JSON as a child sends it; an up-to-date run that changes nothing, none."""
    plugin = OneNumber()
    first = run_plugin(plugin, _on(tmp_path, 0.0, range(40)))
    assert [(t.seq, t.kind) for t in first.transitions] == [(1, "first")]
    _served_after(plugin, _on(tmp_path, 0.6, range(40, 80)))
    result = run_plugin(plugin, _on(tmp_path, 0.0, range(80, 120)))
    assert result.live is not None and result.live.rolled_back and result.gate is not None
    promoted = [("gate", None)] if result.gate.outcome == "promoted" else []
    said = [(t.kind, t.reason) for t in result.transitions]
    assert said == [("rollback", "live_regression"), *promoted]
    pointer = read_pointer(tmp_path / "checkpoints")
    assert pointer is not None and [t.seq for t in result.transitions] == [
        e.seq for e in pointer.journal[-len(said) :]
    ]
    assert TrainResult.from_json(result.to_json()).transitions == result.transitions
    assert run_plugin(plugin, _on(tmp_path, 0.0, range(80, 120))).transitions == ()


def test_the_gate_pairs_its_records_once_and_asks_what_pairing_each_question_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_comparisons`` pairs the judged records once (one ``shared_rows``) for every loss
    column, segment and part (``known``, ``newest``), and asks the same questions, figure
    for figure, as pairing each question's records apart (``compare_segments``, and
    ``compare`` of the records taken): issue 90, the gate paired 20,000 records five
    times a column at a 100,000-record pool."""
    from types import SimpleNamespace

    import numpy as np

    from genesis_fp16_infrastructure.judging import gate, questions
    from genesis_fp16_infrastructure.judging.gate import compare, compare_segments

    rng = np.random.default_rng(11)
    ids = [f"r{i}" for i in range(3000)]
    segments = [f"s{i % 3}" if i < 2400 else "s3" for i in range(3000)]
    columns = {"sq": rng.uniform(0.2, 0.6, 3000), "abs": rng.uniform(0.1, 0.9, 3000)}
    theirs = RecordLosses.of(ids, {k: v.tolist() for k, v in columns.items()}, segments)
    served = SimpleNamespace(
        known=np.sort(split.id_hashes(ids[:1200] + ids[2000:2400])),  # s3: new records only
        losses=theirs,
        records=theirs,
        knew=None,
        plugin=SimpleNamespace(loss_span=1.0, judging_margin=0.01),
        checkpoint=Path("served.pt"),
    )
    served.knew = schema.known(theirs.id_hashes, served.known)
    order = rng.permutation(3200)  # the candidate's records in its own order, 200 more
    more = [f"x{i}" for i in range(200)]
    ours = RecordLosses.of(
        [(ids + more)[i] for i in order],
        {k: np.r_[v + rng.normal(0, 0.05, 3000), np.zeros(200)].clip(0)[order].tolist()
         for k, v in columns.items()},
    )  # fmt: skip
    rolled = np.sort(split.id_hashes(ids[:2500]))
    request = SimpleNamespace(golden_data_path=None)
    known_segments = questions._known_segments(served)  # type: ignore[arg-type]
    assert known_segments is not None and set(known_segments) == {"s0", "s1", "s2"}
    expected = []
    knew = schema.known(ours.id_hashes, served.known)
    newer = ~schema.known(ours.id_hashes, rolled)
    for metric in ("sq", "abs"):
        margin = lambda mean: 0.01  # noqa: E731
        expected += compare_segments("current", ours, theirs, 1.0, margin, known_segments, metric)
        expected.append(replace(compare("known", ours.take(knew), theirs, 1.0, margin, metric),
                                required=False))  # fmt: skip
        expected.append(compare("newest", ours.take(newer), theirs, 1.0, margin, metric))
    calls: list[int] = []
    real = gate.shared_rows

    def counted(a: RecordLosses, b: RecordLosses) -> tuple[np.ndarray, np.ndarray]:
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(gate, "shared_rows", counted)
    monkeypatch.setattr(questions, "shared_rows", counted, raising=False)
    asked = questions._comparisons(request, served, ours, Path("c.pt"), False, rolled)  # type: ignore[arg-type]
    assert len(calls) == 1
    assert [c.to_json() for c in asked] == [c.to_json() for c in expected]
    assert [(c.name, c.segment, c.required) for c in asked] == [
        (c.name, c.segment, c.required) for c in expected
    ]
    assert {c.segment for c in asked} == {None, "s0", "s1", "s2"}


def test_a_run_reads_each_candidates_meta_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The candidate phase reads the folder's candidates once (each meta and verdict) and
    asks every question of that read: a run that judges a candidate, a rejected one (its
    next run up to date by the last judged candidate), one the watch rolls back, each
    reads every ``candidate.json`` once."""
    from genesis_fp16_infrastructure.agent_folder import files

    plugin = OneNumber()
    _served_after(plugin, _on(tmp_path, 0.0, range(40)))
    _served_after(plugin, _on(tmp_path, 0.6, range(40, 80)))
    reads: list[str] = []
    real_load = files.load

    def load(path: Path, *args: Any, **kwargs: Any) -> Any:
        if Path(path).name == "candidate.json":
            reads.append(Path(path).parent.name)
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(files, "load", load)
    rolled = run_plugin(plugin, _on(tmp_path, 0.0, range(80, 120)))  # rolled back, judged
    assert rolled.live is not None and rolled.live.rolled_back and rolled.gate is not None
    assert sorted(reads) == sorted(set(reads)) and len(reads) == 2, reads
    plugin.fixed, reads[:] = 0.9, []
    rejected = run_plugin(plugin, _on(tmp_path, 0.0, range(120, 160)))
    assert rejected.gate is not None and rejected.gate.outcome == "rejected"
    assert sorted(reads) == sorted(set(reads)) and len(reads) == 3, reads
    reads[:] = []
    assert run_plugin(plugin, _on(tmp_path, 0.0, range(120, 160))).up_to_date
    assert sorted(reads) == sorted(set(reads)) and len(reads) == 4, reads


def test_a_run_reads_the_pointer_once_per_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pointer is read in each transaction, under its lock, and nowhere else: after
    the watch's rollback the model served again is the one its commit wrote (no read of
    ``served.json`` between the watch and the gate)."""
    from genesis_fp16_infrastructure.agent_folder import pointer

    plugin = OneNumber()
    first = _served_after(plugin, _on(tmp_path, 0.0, range(40)))
    _served_after(plugin, _on(tmp_path, 0.6, range(40, 80)))
    commits, _ = _committed(monkeypatch)
    parsed: list[Any] = []
    real_parse = pointer.parse_pointer

    def parse_pointer(path: Path) -> Any:
        parsed.append(real_parse(path))
        return parsed[-1]

    monkeypatch.setattr(pointer, "parse_pointer", parse_pointer)
    result = run_plugin(plugin, _on(tmp_path, 0.0, range(80, 120)))
    assert result.live is not None and result.live.now_served == first
    assert len(parsed) == len(commits) == 3
    assert parsed[2].served.id == first and parsed[2].journal[-1].kind == "rollback"


@dataclass
class RowsListing(Listing):
    """Listing that notes, per scoring, whether it was asked by rows of a listing
    (``ScoreOnly.of_rows``) rather than by ids alone."""

    by_rows: list[bool] = field(default_factory=list)

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        only = request.score_only
        self.by_rows.append(only is not None and only.among is not None)
        return super().score_records(checkpoint, request)


def test_the_gate_asks_by_rows_only_where_the_served_model_was_given_what_it_asked(
    tmp_path: Path,
) -> None:
    """The served model's scoring asks by rows of its listing; the candidate's, and the
    watch's predecessor's, are asked by those rows too when that scoring gave back
    exactly the records asked for, and by ids when it scored every record (the served
    model's losses then are not the asked rows'); the verdicts and the watch's figures
    are the same."""
    honours, ignores = RowsListing(), RowsListing(honour=False)
    judged = _three_runs(tmp_path / "honours", honours)
    alike = _three_runs(tmp_path / "ignores", ignores)
    # Scorings: the first candidate; the served model, the candidate; the served model,
    # the watch's predecessor, the candidate.
    assert len(honours.by_rows) == len(ignores.by_rows) == 6
    assert honours.by_rows[1] and honours.by_rows[2] and honours.by_rows[-1]
    assert ignores.by_rows[1] and not ignores.by_rows[2] and not ignores.by_rows[-1]
    assert honours.by_rows[-2] and not ignores.by_rows[-2]  # the watch's predecessor
    for ours, theirs in zip(judged, alike, strict=True):
        assert ours.gate is not None and theirs.gate is not None
        assert ours.gate.outcome == theirs.gate.outcome
        assert ours.gate.comparisons == theirs.gate.comparisons
    watched, also = judged[-1].live, alike[-1].live
    assert watched is not None and also is not None and watched.new_records > 0
    assert (watched.records, watched.new_records) == (also.records, also.new_records)
    assert watched.metrics == also.metrics and watched.regression == also.regression
