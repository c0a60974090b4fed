"""Candidates and promotion for SE-Darwin: where a run trains, and whether it is served.

A run never trains in the served model's folder. :func:`plan_candidate` decides, from the
served-model pointer (agent_folder.lifecycle) and the candidates kept beside it:

* a candidate of this data (same data digest, same request) cut short earlier: resume it;
* a judged candidate of this data that is served, rejected, rolled back from or held by
  a pin: the run is up to date against it, no step, whatever its budget (one promoted
  once but no longer served, the data having come back to its records, trains anew,
  unless the served model is pinned); only a forced run (``TrainRequest.forced`` with a
  budget: ``train --resume --steps N``) trains;
* otherwise a new candidate folder: from scratch on changed data (an encoder fitted on
  the whole pool), or continuing the served model's checkpoint (a copy) when the data
  is the served model's own and the run is forced.

:func:`judge` then runs the gate (genesis_fp16_infrastructure.recipes.retrain.gate) and promotes,
rejects, or fails loudly when it cannot decide. The first model has nothing to beat and is served.
Under an operator's pin (``model promote``/``model rollback``) a candidate the gate would
promote is ``held``: its verdict and figures are kept and reported, the pinned model stays.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genesis_fp16_infrastructure.agent_folder.lifecycle import (
    CANDIDATE_META,
    VERDICT_NAME,
    candidate_entry,
    candidates_dir,
    list_candidates,
    new_candidate,
    newest_checkpoint,
    read_json,
    serve_unless_pinned,
    write_verdict,
)
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequest, TrainRequestError
from genesis_fp16_infrastructure.contract.reports import GateReport, ScoresOn
from genesis_fp16_infrastructure.data.fingerprint import DataChange, DataFingerprint, compare
from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.readers import DataError, ReadResult
from genesis_fp16_infrastructure.data.schema import Example
from genesis_fp16_infrastructure.outcome import Outcome
from genesis_fp16_infrastructure.recipes.retrain import gate, judge_sets
from genesis_fp16_infrastructure.recipes.retrain.freshness import request_key, same_request
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.pool_read import read_pool
from genesis_fp16_infrastructure.recipes.retrain.served_model import Served
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import (
    CheckpointError,
    load_checkpoint,
)
from genesis_fp16_infrastructure.training.checkpoint_files import digest_path, summary_path
from genesis_fp16_infrastructure.training.checkpoint_load import Loaded, read_checkpoint
from genesis_fp16_infrastructure.training.distributed import rank_and_world
from genesis_fp16_infrastructure.training.run.options import FitResult
from genesis_fp16_infrastructure.world_model.predict import (
    read_world_model_state,
)

logger = logging.getLogger(__name__)

SPLIT_FOLDER = "split"  # final_fit=whole: the split run's checkpoints, under the candidate


@dataclass(frozen=True)
class Plan:
    """Where this run trains (``folder``, resuming ``saved``), or why it is up to date."""

    folder: Path
    saved: Mapping[str, Any] | None
    change: DataChange | None
    up_to_date: str | None = None  # why, when no step is to be taken
    verdict: Mapping[str, Any] | None = None  # the judged candidate's, when up to date
    served_folder: Path | None = None
    served_checkpoint: Path | None = None
    served_seen: DataFingerprint | None = None  # the served model's data, for drift
    # Read once here: the checkpoint the run resumes (fit() takes it, not reading it
    # again), and what the gate scores of the served model's (_scored_part).
    loaded: Loaded | None = None
    served_scored: Mapping[str, Any] | None = None
    # A resumed cut-short candidate's: the served checkpoint, not yet read (change and
    # served_scored wait for compared_to_served, after the run).
    served_unread: Path | None = None

    def compared_to_served(self, seen: DataFingerprint) -> Plan:
        """This plan with the data change and the gate's part of the served model, read
        now if planning left it unread (a cut-short candidate resumed), else itself: the
        run calls it after training, so that its first step waits for one read, not two."""
        if self.served_unread is None:
            return self
        loaded, state = _read(self.served_unread)
        change = compare(state.get("data"), seen)
        return dataclasses.replace(
            self, change=change, served_scored=_scored_part(loaded), served_unread=None
        )


def plan_candidate(
    root: Path,
    request: TrainRequest,
    seen: DataFingerprint,
    served: Served | None,
    unforced: bool,
    whole: bool,
) -> Plan:
    """Where the run trains, or that it is up to date (the module docstring's order)."""
    key = request_key(request)
    mine = [
        c
        for c in list_candidates(root)
        if (m := read_json(c / CANDIDATE_META))
        and m.get("fingerprint") == seen.digest
        and same_request(m.get("request"), key)
    ]
    judged_one: tuple[Path, Any, dict[str, Any] | None] | None = None
    if request.resume:
        for candidate in reversed(mine):
            verdict = read_json(candidate / VERDICT_NAME)
            train_folder = candidate / SPLIT_FOLDER if whole else candidate
            newest = newest_checkpoint(train_folder)
            if verdict is None and newest is not None:
                logger.info(
                    "%s: resuming candidate %s, cut short earlier", request.agent, candidate.name
                )
                loaded, saved = _read(newest)
                # The served model waits for the run's end (Plan.compared_to_served).
                unread = served.judged if served is not None else None
                return Plan(candidate, saved, None, loaded=loaded, served_unread=unread)
            # Judged and not served (rejected, rolled back, held by a pin): up to date
            # against it. A promoted one no longer served (the data came back to its
            # records) trains anew, unless the operator pinned the served model: a pin
            # is never undone by training the same data again.
            outcome = verdict.get("outcome") if verdict is not None else None
            served_id = served.entry.get("id") if served is not None else None
            pinned = served is not None and served.pinned is not None
            judged = outcome in ("rejected", "rolled_back", "held", "inconclusive") or (
                outcome == "promoted" and (candidate.name == served_id or pinned)
            )
            if judged and unforced:
                judged_one = (candidate, outcome, verdict)
                break
    # Every other plan decides on the served model or continues it: read once, here.
    served_loaded, served_state = _read(served.judged) if served is not None else (None, None)
    served_scored = _scored_part(served_loaded)
    change = compare(served_state.get("data"), seen) if served_state is not None else None
    if request.resume:
        # Judged but nothing served (removed by hand): train anew.
        if judged_one is not None and served is not None and served_state is not None:
            candidate, outcome, verdict = judged_one
            why = f"nothing new: candidate {candidate.name} trained on these records, {outcome}"
            plan = _up_to_date(candidate, served, served_state, change, why, verdict)
            return dataclasses.replace(plan, loaded=served_loaded)
        same = served is not None and _same_request(root, served, key)
        if same and unforced and change is not None and change.unchanged:
            assert served is not None and served_state is not None
            why = f"nothing new: {change.describe()}"  # a copy, a quarantined record
            plan = _up_to_date(None, served, served_state, change, why, None)
            return dataclasses.replace(plan, loaded=served_loaded)
    meta = {"fingerprint": seen.digest, "records": seen.records, "request": key}
    folder = new_candidate(root, meta, _shared_name(seen, key, served))
    served_seen = DataFingerprint.from_state(served_state.get("data")) if served_state else None
    same = served is not None and _same_request(root, served, key)
    if same and served is not None and change is not None and change.unchanged:
        # The served model's own data and request, and a budget asked: the candidate
        # continues it (a copy of its checkpoint; the served file is never written).
        into = folder / SPLIT_FOLDER if whole else folder
        into.mkdir(parents=True, exist_ok=True)
        judged = served.judged
        for source in (judged, digest_path(judged), summary_path(judged)):
            if source.exists():  # the checkpoint, its digest and its summary
                shutil.copy2(source, into / source.name)
        logger.info("%s: candidate %s continues the served model", request.agent, folder.name)
        assert served_loaded is not None
        # The copy's state is a copy: the run trains on its tensors, the gate scores the
        # served model's own.
        loaded = served_loaded.copied_to(into / judged.name)
        return Plan(
            folder,
            served_state,
            change,
            served_seen=served_seen,
            loaded=loaded,
            served_scored=served_scored,
        )
    if change is not None:
        logger.info(
            "%s: the data changed, %s: candidate %s trains afresh",
            request.agent,
            change.describe(),
            folder.name,
        )
    return Plan(folder, None, change, served_seen=served_seen, served_scored=served_scored)


def judge(
    root: Path,
    candidate: Path,
    trained: FitResult,
    checkpoint: Path | None,
    served: Served | None,
    data: ReadResult,
    request: TrainRequest,
    options: TaskOptions,
    numeric: torch.Tensor | None = None,
    served_scored: Mapping[str, Any] | None = None,
    judged_on: str | None = None,
) -> GateReport:
    """Gate the finished candidate; promote it, reject it (the served model stays), keep
    it ``inconclusive`` (judged again as records arrive: :func:`rejudge_kept`), or raise
    TrainRequestError when the gate cannot decide. Returns the gate's report (the run's
    ``gate``). ``trained``: the candidate's run (the split run's, scored);
    ``checkpoint``: the file served if promoted (a final_fit=whole refit's, else the
    run's). ``numeric``: ``numeric_columns`` of the read's examples
    (``data.columns.labelled``), if known; ``judged_on``: the data's digest."""
    if checkpoint is None or trained.checkpoint is None:
        raise TrainRequestError(f"candidate {candidate.name} wrote no checkpoint: nothing to judge")
    judged = trained.checkpoint
    if served is None:
        verdict = gate.Verdict(True, True, "the first model: nothing served to beat")
    else:
        verdict = _compare(root, judged, served, data, request, options, numeric, served_scored)
    report = verdict.report(
        precision=trained.precision.used,
        served_id=served.entry.get("id") if served is not None else None,
        checkpoint=Path(checkpoint).name,  # the file served if promoted (a repair's)
        judged_on=judged_on,
    )
    if served is None and report.candidate is None:  # the first model: its run's figures
        auc, log_loss = trained.eval.get("auc", math.nan), trained.eval.get("success_bce")
        first = ScoresOn("its run's evaluation", auc, math.nan if log_loss is None else log_loss)
        report = dataclasses.replace(report, candidate=first)
    return _settle(root, candidate, verdict, report, judged, checkpoint, served, request)


def rejudge_kept(
    root: Path,
    request: TrainRequest,
    seen: DataFingerprint,
    served: Served | None,
    data: ReadResult,
    options: TaskOptions,
    whole: bool,
) -> GateReport | None:
    """Issue 62: the newest candidate of this request kept ``inconclusive``, judged again
    against the served model on the current records (those that arrived since count as
    for any candidate: it never trained on them), with no step trained: promoted,
    rejected, held, or inconclusive still (its verdict updated with the records it now
    needs). None when nothing is served, none is kept, the data is what it was judged
    on (nothing new to tell), or the model it was judged against is no longer served
    (a newer one was promoted: it is superseded, and pruned in time)."""
    if served is None:
        return None
    key = request_key(request)
    for candidate in reversed(list_candidates(root)):
        verdict = read_json(candidate / VERDICT_NAME)
        meta = read_json(candidate / CANDIDATE_META)
        if verdict is None or verdict.get("outcome") != "inconclusive":
            continue
        if meta is None or meta.get("request") != key:
            continue
        if verdict.get("judged_on") == seen.digest:
            return None
        if verdict.get("served_id") != served.entry.get("id"):
            return None  # another model was served since: this one is superseded
        checkpoint = candidate / str(verdict.get("checkpoint"))
        judged = newest_checkpoint(candidate / SPLIT_FOLDER) if whole else checkpoint
        if judged is None or not checkpoint.is_file():
            logger.warning("%s: kept candidate %s has no checkpoint", request.agent, candidate.name)
            return None
        logger.info("%s: judging kept candidate %s again", request.agent, candidate.name)
        found = _compare(root, judged, served, data, request, options, None, None)
        report = found.report(
            precision=verdict.get("precision"),
            served_id=served.entry.get("id"),
            checkpoint=checkpoint.name,
            judged_on=seen.digest,
        )
        return _settle(root, candidate, found, report, judged, checkpoint, served, request)
    return None


def _settle(
    root: Path,
    candidate: Path,
    verdict: gate.Verdict,
    report: GateReport,
    judged: Path,
    checkpoint: Path,
    served: Served | None,
    request: TrainRequest,
) -> GateReport:
    """Act on the gate's verdict: serve the candidate (unless pinned: ``held``), or write
    its verdict (rejected, inconclusive, undecided: raised), and return the report."""
    if verdict.promote and served is not None and served.pinned is not None:
        # The operator pinned the served model: the gate's figures are reported, and the
        # choice stays the operator's (`genesis-fp16 model promote AGENT ID`).
        report = dataclasses.replace(
            report, outcome=Outcome.HELD, reason=f"pinned: {verdict.reason}"
        )
    if report.outcome != "promoted":
        write_verdict(candidate, report.to_json())  # a promotion's goes with the pointer
    report = dataclasses.replace(report, candidate_id=candidate.name)
    if not verdict.decided:
        logger.error("%s: candidate %s: %s", request.agent, candidate.name, verdict.reason)
        raise TrainRequestError(
            f"promotion gate: {verdict.reason}; the served model stays, candidate kept in "
            f"{candidate}"
        )
    if report.outcome in ("held", "inconclusive", "rejected"):
        why = {
            "held": "held, not served: the served model is pinned",
            "inconclusive": "kept, inconclusive: judged again as records arrive",
            "rejected": "rejected",
        }[report.outcome]
        logger.warning(
            "%s: candidate %s %s (%s)", request.agent, candidate.name, why, verdict.reason
        )
        return report
    decided = dataclasses.replace(report, candidate_id=None).to_json()
    entry = candidate_entry(root, candidate, checkpoint, decided)
    entry["judged"] = str(judged.resolve().relative_to(Path(root).resolve()))
    # The verdict is written after the pointer, from it: a kill before leaves the
    # candidate unfinished (resumed and judged again), never promoted and unserved.
    how = "gate" if served is not None else "first"
    if not serve_unless_pinned(root, entry, how, verdict=decided):
        # Pinned by an operator while the candidate trained: held, as above.
        held = dataclasses.replace(
            report, outcome=Outcome.HELD, reason=f"pinned: {verdict.reason}", candidate_id=None
        )
        write_verdict(candidate, held.to_json())
        logger.warning("%s: candidate %s held: pinned meanwhile", request.agent, candidate.name)
        return dataclasses.replace(held, candidate_id=candidate.name)
    logger.info("%s: candidate %s promoted: %s", request.agent, candidate.name, verdict.reason)
    return report


def _compare(
    root: Path,
    judged: Path,
    served: Served,
    data: ReadResult,
    request: TrainRequest,
    options: TaskOptions,
    numeric: torch.Tensor | None,
    served_scored: Mapping[str, Any] | None,
) -> gate.Verdict:
    """The candidate's and the served model's scores on the held-out comparison set and
    the golden pool, and the verdict; ``seconds``: what the comparison cost."""
    start = time.perf_counter()
    try:
        candidate_model = gate.ScoredModel(load_checkpoint(judged))
        # Read once in the job (plan_candidate, Plan.compared_to_served), else now.
        served_model_ = gate.ScoredModel(served_scored or load_checkpoint(served.judged))
    except (CheckpointError, ValueError) as exc:  # e.g. a served model of encoder version 1
        return gate.Verdict(
            False, False, f"the gate cannot decide (a model cannot be scored: {exc})"
        )
    # From the read's columns: building its examples and pool as objects would cost
    # seconds and a gigabyte on a million records (issue 36).
    hashes = gate.RecordHashes.of_columns(data.columns)
    chosen = gate.comparison_mask(hashes, candidate_model, served_model_)
    rows = None if numeric is None else numeric[torch.from_numpy(chosen)]
    held_out = gate.Records.of_columns(data.columns, np.flatnonzero(chosen), rows)
    # Per segment too (issue 62): a gain on an agent only the candidate knows cannot
    # excuse a loss on one the served model knew.
    known = gate.known_segments(data.columns, served_model_)
    comparisons = gate.compare_segments(
        "held_out", held_out, candidate_model, served_model_, True, known
    )
    comparisons += judge_sets.further_comparisons(
        root, data.columns, hashes, chosen, candidate_model, served_model_, numeric, served.history
    )
    golden_path = request.golden_data_path
    if golden_path is not None:
        golden = gate.Records.of_examples(*_read_golden(Path(golden_path), options, data))
        comparisons.append(gate.compare_on("golden", golden, candidate_model, served_model_, False))
    return gate.decide(comparisons, lambda: time.perf_counter() - start)


def _read_golden(path: Path, options: TaskOptions, data: ReadResult) -> tuple[list[Example], Pool]:
    """The operator's trusted pool; its records that the training pool also holds are left
    out (a model may have trained on them), with a warning naming how many."""
    try:
        golden = read_pool(path, options, None)
    except DataError as exc:
        raise TrainRequestError(f"golden data {str(path)!r}: {exc}") from None
    training_ids = set(data.columns.example_ids)
    kept = [e for e in golden.examples if e.trajectory_id not in training_ids]
    if len(kept) < len(golden.examples):
        logger.warning(
            "golden data: %d record(s) also in the training pool, left out of the gate",
            len(golden.examples) - len(kept),
        )
    return kept, golden.pool


def _shared_name(seen: DataFingerprint, key: Any, served: Served | None) -> str | None:
    """Under torchrun, a candidate name every rank derives alike (data, request, served
    model); None in one process (the UTC time names it)."""
    if rank_and_world()[1] == 1:
        return None
    text = json.dumps(
        [seen.digest, key, served.entry.get("id") if served else None], sort_keys=True
    )
    return f"ranks-{seen.digest[:8]}-{hashlib.blake2b(text.encode(), digest_size=4).hexdigest()}"


def _same_request(root: Path, served: Served, key: Any) -> bool:
    """Whether the served model was trained for this request (an adopted one, written
    before requests were recorded, counts as the same: as before the pointer existed)."""
    if served.entry.get("how") == "adopted":
        return True
    meta = read_json(candidates_dir(root) / str(served.entry.get("id")) / CANDIDATE_META)
    return meta is not None and same_request(meta.get("request"), key)


def _up_to_date(
    candidate: Path | None,
    served: Served,
    served_state: Mapping[str, Any],
    change: DataChange | None,
    why: str,
    verdict: Mapping[str, Any] | None,
) -> Plan:
    return Plan(
        candidate or served.judged.parent,
        served_state,
        change,
        up_to_date=why,
        verdict=verdict,
        served_folder=served.judged.parent,
        served_checkpoint=served.checkpoint,
    )


def _scored_part(loaded: Loaded | None) -> Mapping[str, Any] | None:
    """What the gate scores of a checkpoint read at planning (its weights, best weights
    and world-model state), kept through the run without its optimizer state."""
    if loaded is None:
        return None
    dropped = (keys.OPTIMIZER, keys.SCHEDULER, keys.RNG, keys.RNG_PER_RANK)
    return {key: value for key, value in loaded.state.items() if key not in dropped}


def _read(path: Path) -> tuple[Loaded, Mapping[str, Any]]:
    """A checkpoint, read once, and its world-model state (encoder, shape, data, split);
    a file that is not a readable world model is a one-line refusal naming it."""
    try:
        loaded = read_checkpoint(path)
        return loaded, read_world_model_state(loaded.state)
    except (CheckpointError, ValueError, OSError) as exc:
        raise TrainRequestError(f"checkpoint {str(path)!r} unusable: {exc}") from None
