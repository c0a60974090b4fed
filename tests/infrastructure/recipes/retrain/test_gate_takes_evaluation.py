"""The gate scores a se_darwin candidate from its run's own evaluation (issue 90,
recipes/retrain/evaluated.py): in a daemon's run (a plan) the candidate's held-out
records are neither encoded nor run through the model a second time, and the verdict and
every figure are those of a scoring that computes them again."""

from __future__ import annotations

import gc
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from first_served import write_pool
from se_darwin_runs import train

from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.contract.agent_snapshot import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.recipes.retrain import evaluated, scoring
from genesis_fp16_infrastructure.recipes.retrain import run as retrain_run
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor


def _grown(
    tmp: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[TrainResult, list[int], AgentSnapshot]:
    """The run after a first model and 600 more records, in a plan (as a daemon's run),
    from a copy of one first model: its result, the rows of each forward its scorings
    ran, and its plan (what is kept lives while it does)."""
    folder = tmp / name
    shutil.copytree(tmp / "first", folder)
    write_pool(folder / "data", "more.json", 600, seed=41)
    forwards: list[int] = []
    real = scoring.forward_chunked

    def counted(model: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        forwards.append(len(x))
        return real(model, x, *args, **kwargs)

    monkeypatch.setattr(scoring, "forward_chunked", counted)
    plan = AgentSnapshot(pointer=read_pointer(folder / "ck"), data=DataCheck(None))
    result = train(folder / "data", folder / "ck", snapshot=plan, steps=40)
    monkeypatch.setattr(scoring, "forward_chunked", real)
    return result, forwards, plan


def test_the_gate_takes_the_candidates_logits_from_its_evaluation(
    first: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One forward in the run's scorings (the served model's), not two; the same verdict,
    reason and comparisons as a run whose gate scores the candidate again."""
    taken, forwards, _ = _grown(first, "taken", monkeypatch)
    monkeypatch.setattr(retrain_run, "scored_alike", lambda *_: False)  # nothing kept
    again, forwards_again, _ = _grown(first, "again", monkeypatch)
    assert taken.extra["split"]["mode"] == "held_out"
    assert len(forwards_again) == 2 and len(forwards) == 1  # the served model's alone
    assert forwards == forwards_again[:1]
    assert taken.gate is not None and again.gate is not None
    assert taken.gate.outcome == again.gate.outcome
    assert taken.gate.reason == again.gate.reason
    assert taken.gate.comparisons == again.gate.comparisons


def test_a_scoring_of_other_bytes_or_another_plan_computes_them(
    first: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept logits answer only the checkpoint file they were computed from, with the
    weights that computed them, in the plan they were kept for: another file, other
    weights, or a request of another plan, is scored anew."""
    taken, _, plan = _grown(first, "kept", monkeypatch)
    assert taken.checkpoint is not None and evaluated._EVALUATED
    kept = evaluated._EVALUATED[0]
    assert kept.plan() is plan.data
    assert "ranked" not in vars(kept)  # the run's gate asked in the order evaluated: no sort
    request = replace(_request(first / "kept"), snapshot=plan)
    hashes, checkpoint = kept.hashes[:5], Path(taken.checkpoint)
    model = WorldModelPredictor.of_state(load_checkpoint(checkpoint)).model
    assert evaluated.evaluated_logit(request, checkpoint, model, hashes) is not None
    # Asked in another order than kept: each record's own logit, in the order asked
    backwards = kept.hashes[::-1][:7]
    given = evaluated.evaluated_logit(request, checkpoint, model, backwards)
    assert given is not None and given.tolist() == kept.logit[-7:].flip(0).tolist()
    # Every record evaluated, in the order evaluated (the gate's): taken whole, each
    # compared, no sort and no search; the same records kept in another order (planted):
    # searched, each record's own logit all the same
    searches: list[int] = []
    real = evaluated.find_ids
    monkeypatch.setattr(evaluated, "find_ids", lambda *a: searches.append(1) or real(*a))
    in_order = np.array(kept.hashes)
    whole = evaluated.evaluated_logit(request, checkpoint, model, in_order)
    assert whole is not None and not searches
    assert whole.tolist() == kept.logit.tolist()
    rolled = replace(kept, hashes=np.roll(kept.hashes, 1), logit=kept.logit.roll(1))
    evaluated._EVALUATED[:] = [rolled]
    again = evaluated.evaluated_logit(request, checkpoint, model, in_order)
    assert again is not None and again.tolist() == whole.tolist() and searches == [1]
    evaluated._EVALUATED[:] = [kept]
    missing = np.concatenate((hashes, [kept.hashes.max() + 1]))  # one never evaluated
    assert evaluated.evaluated_logit(request, checkpoint, model, missing) is None
    other = tmp_path / "other.pt"
    other.write_bytes(checkpoint.read_bytes() + b"\0")
    assert evaluated.evaluated_logit(request, other, model, hashes) is None
    elsewhere = replace(request, snapshot=AgentSnapshot(data=DataCheck(None)))
    assert evaluated.evaluated_logit(elsewhere, checkpoint, model, hashes) is None
    with torch.no_grad():
        next(model.parameters()).add_(1e-3)  # other weights than those evaluated
    assert evaluated.evaluated_logit(request, checkpoint, model, hashes) is None
    del plan, request, kept
    gc.collect()  # the plan gone: what was kept for it with it
    assert not evaluated._EVALUATED


def _request(folder: Path) -> TrainRequest:
    return TrainRequest(
        agent="se_darwin",
        precision="fp32",  # type: ignore[arg-type]
        precision_reason="test",
        state_dir=folder,
        checkpoint_dir=folder / "ck",
        data_path=folder / "data",
    )
