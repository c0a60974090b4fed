"""One run of the retrain loop: check, read, plan a candidate, train it through ``fit()``,
report drift, gate it against the served model, and record what was trained on.

An agent plugin hands its ``TrainRequest`` here in one call (:func:`train`) and gets the
run's ``TrainResult``; the loop calls nothing of the agent back. :func:`probe_setup`
(``probe.py``) gives the precision probe the same world model, loss and batches."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_infrastructure.agent_folder.layout import QUARANTINE_LOG
from genesis_fp16_infrastructure.agent_folder.lifecycle import candidates_dir
from genesis_fp16_infrastructure.contract.agent_snapshot import DataCheck
from genesis_fp16_infrastructure.contract.plugin_api import (
    TrainRequest,
    TrainRequestError,
    TrainResult,
)
from genesis_fp16_infrastructure.contract.reports import (
    DataReport,
    DriftReport,
    GateReport,
    LiveReport,
)
from genesis_fp16_infrastructure.data.fingerprint import (
    DataFingerprint,
    fingerprint_of,
)
from genesis_fp16_infrastructure.data.readers import ReadResult
from genesis_fp16_infrastructure.gc_pause import paused_gc
from genesis_fp16_infrastructure.outcome import Outcome
from genesis_fp16_infrastructure.phases import PhaseClock
from genesis_fp16_infrastructure.recipes.retrain.drift import drift_report
from genesis_fp16_infrastructure.recipes.retrain.freshness import (
    check_data,
    forget_record,
    record_cache,
    save_record,
)
from genesis_fp16_infrastructure.recipes.retrain.gate import pool_numeric
from genesis_fp16_infrastructure.recipes.retrain.live_watch import watch
from genesis_fp16_infrastructure.recipes.retrain.probe import probe_setup
from genesis_fp16_infrastructure.recipes.retrain.promotion import (
    SPLIT_FOLDER,
    Plan,
    judge,
    plan_candidate,
    rejudge_kept,
)
from genesis_fp16_infrastructure.recipes.retrain.refit import refit_record, train_refit
from genesis_fp16_infrastructure.recipes.retrain.run_report import (
    cache_record,
    data_record,
    live_record,
    log_drift,
    run_extra,
    stored_verdict,
    trained_extra,
)
from genesis_fp16_infrastructure.recipes.retrain.served_model import Served, served_model
from genesis_fp16_infrastructure.recipes.retrain.task import (
    TaskOptions,
    WorldModelTask,
    read_pool,
)
from genesis_fp16_infrastructure.training import CheckpointManager, EarlyStopping, fit
from genesis_fp16_infrastructure.training.checkpoint_files import digest_path, summary_path
from genesis_fp16_infrastructure.training.checkpoint_load import Loaded, file_signature
from genesis_fp16_infrastructure.training.distributed import rank_and_world

logger = logging.getLogger(__name__)

__all__ = ["check_data", "probe_setup", "train"]


def train(request: TrainRequest) -> TrainResult:
    """Read the data, compare it with what the checkpoint's model saw, and train:
    nothing new ends the run at once (up to date), changed data trains afresh.

    The agent's checkpoint folder is claimed for the whole run (rank 0 under
    torchrun): its candidates and served.json have one writer, and another process
    that writes it is refused at once (CheckpointFolderBusy, naming it)."""
    owner = CheckpointManager(request.checkpoint_dir) if rank_and_world()[0] == 0 else None
    if owner is not None:
        owner.claim(f"{request.agent} train (agent folder {request.checkpoint_dir})")
    try:
        return _train(request)
    finally:
        if owner is not None:
            owner.release()


def _train(request: TrainRequest) -> TrainResult:
    options = _options(request)
    whole = options.final_fit == "whole"
    clock = PhaseClock()  # issue 36: where the run's time goes (the result's phases)
    single = rank_and_world()[1] == 1  # ranks must not decide apart: torchrun reads
    snapshot = request.snapshot
    with clock.phase("check"):
        check = _checked_data(request, single)
    if check is not None and check.up_to_date is not None:
        return TrainResult.from_json(check.up_to_date)
    manifest = None if check is None else check.scan
    assert request.data_path is not None  # _options refused a request without one
    root = Path(request.checkpoint_dir)
    # What Genesis uses now, as the plan read it; a candidate never touches it.
    served = served_model(root, snapshot)
    with clock.phase("read"), paused_gc():  # objects without cycles (gc_pause)
        cache = record_cache(request, manifest)  # issue 36: unchanged files unparsed
        data = read_pool(
            Path(request.data_path),
            options,
            _quarantine_path(request),
            request.memory_limit_bytes,
            cache,
            agent=request.agent,
        )
        seen = fingerprint_of(data.columns)
    with clock.phase("live"):
        live = _watch(root, data, request, single)
    if live is not None and live.rolled_back:
        served = served_model(root)  # the predecessor, served again by the watch
    steps, epochs = request.steps, request.epochs
    # No budget given: train until validation stops improving, within max_epochs. An
    # explicit steps/epochs budget runs in full (what the operator asked for, a forced
    # run), and the best validated weights are still the ones a candidate offers.
    own_budget = steps is None and epochs is None
    # A budget sizes a run on new data; only a forced run (train --resume --steps N)
    # trains it on data the served model already learned.
    forced = request.forced and not own_budget
    if not forced and single:  # issue 62: a kept inconclusive candidate is judged again
        with clock.phase("gate"):
            kept = rejudge_kept(root, request, seen, served, data, options, whole)
        if kept is not None and kept.outcome != Outcome.INCONCLUSIVE:
            return _rejudged(request, data, seen, kept, clock, live, served)
    with clock.phase("check"):
        plan = plan_candidate(root, request, seen, served, not forced, whole)
    if plan.up_to_date is not None:
        return _up_to_date(request, data, seen, options, plan, clock, manifest, live)
    if manifest is not None:  # a run under way: no manifest answers "unchanged" meanwhile
        forget_record(root)
    candidate = plan.folder
    # With final_fit=whole the split run keeps its checkpoints in a subfolder, and the
    # candidate's folder itself holds the refit's: the one that would be served.
    folder = candidate / SPLIT_FOLDER if whole else candidate
    saved = plan.saved
    with clock.phase("encode"), paused_gc():
        task = WorldModelTask(
            data, options, request.seed, request.device, saved, seen=seen, agent=request.agent
        )
    if own_budget:
        epochs = options.max_epochs
    early_stop = _early_stop(task, options, request, own_budget)
    with clock.phase("train"):  # steps and checkpoint writes; evaluation moved out
        result = fit(
            task,
            request.fit_options(
                steps=steps,
                epochs=epochs,
                early_stop=early_stop,
                checkpoint_dir=folder,
                resume=saved is not None,
                loaded_checkpoint=plan.loaded,  # read once, by plan_candidate
            ),
        )
    clock.move("train", "eval", task.eval_seconds)
    with clock.phase("check"):
        plan = plan.compared_to_served(seen)  # a resumed cut-short candidate reads it now
    extra = {**run_extra(result, data, task), **trained_extra(result, candidate.name)}
    refit = None
    if whole and not result.stopped_early:
        with clock.phase("final_fit"):
            refit = train_refit(
                dataclasses.replace(request, checkpoint_dir=candidate), task, data, result
            )
    if refit is not None:
        extra["final_fit"] = refit_record(refit, data.labelled, result.checkpoint)
    peak = _device_peak(request.device)  # before the gate's scoring adds its own
    if cache is not None:
        extra["record_cache"] = cache_record(cache)
    checkpoint = result.checkpoint if refit is None else refit.checkpoint
    drift = gate = None
    # A run cut short is kept unjudged: the next run resumes it.
    stopped = result.stopped_early or (refit is not None and refit.stopped_early)
    if not stopped:
        numeric = task.take_numeric_rows()  # the task's, for the drift report and the gate
        drift, numeric = _drift(request, data, plan, numeric, clock)
        with clock.phase("gate"):
            gate = judge(
                root,
                candidate,
                result,
                checkpoint,
                served,
                data,
                request,
                options,
                numeric,
                plan.served_scored,
                seen.digest,
            )
    extra["peak_rss_mib"] = clock.peaks()
    out = TrainResult.from_fit(
        request,
        result,
        quarantined=data.quarantined,
        extra=extra,
        live=live,
        data=data_record(seen, plan.change),
        device_memory_peak_bytes=peak,
        checkpoint=checkpoint,
        drift=drift,
        gate=gate,
        rejected=gate is not None and gate.outcome == Outcome.REJECTED,
        phases=clock.to_json(),
        wall_seconds=clock.elapsed(),
    )
    if not stopped:  # issue 36
        save_record(request, manifest, out, _served_now(gate, checkpoint, served))
    return out


def _up_to_date(
    request: TrainRequest,
    data: ReadResult,
    seen: DataFingerprint,
    options: TaskOptions,
    plan: Plan,
    clock: PhaseClock,
    manifest: Any,
    live: LiveReport | None,
) -> TrainResult:
    """Nothing new for the served model, or this data's candidate was already judged:
    the served model's eval, no step taken."""
    served_folder = plan.served_folder
    assert served_folder is not None and plan.saved is not None
    why = plan.up_to_date
    if data.quarantined:  # a malformed file dropped in brings nothing new, and says so
        why = f"{why}; {data.quarantined} record(s) quarantined"
    logger.info("%s: up to date, %s", request.agent, why)
    with clock.phase("encode"), paused_gc():
        task = WorldModelTask(
            data,
            options,
            request.seed,
            request.device,
            plan.saved,
            seen=seen,
            agent=request.agent,
        )
    with clock.phase("train"), _only(plan.loaded, Path(request.checkpoint_dir)) as only:
        result = fit(
            task,
            request.fit_options(
                steps=0,
                epochs=None,
                # its tracker restores the best weights the checkpoint keeps: the eval is
                # the served model's, as its own run reported it
                early_stop=(
                    task.early_stopping() if options.early_stopping and not request.fsdp else None
                ),
                checkpoint_dir=only[0],
                resume=True,
                loaded_checkpoint=only[1],
            ),
        )
    clock.move("train", "eval", task.eval_seconds)
    extra = {**run_extra(result, data, task), "peak_rss_mib": clock.peaks()}
    out = TrainResult.from_fit(
        request,
        result,
        quarantined=data.quarantined,
        extra=extra,
        live=live,
        up_to_date=True,
        up_to_date_against=why,
        wall_seconds=clock.elapsed(),
        checkpoint=plan.served_checkpoint,
        data=data_record(seen, plan.change),
        phases=clock.to_json(),
        gate=stored_verdict(plan.verdict, request.agent),
    )
    save_record(request, manifest, out, plan.served_checkpoint)
    return out


def _rejudged(
    request: TrainRequest,
    data: ReadResult,
    seen: DataFingerprint,
    gate: GateReport,
    clock: PhaseClock,
    live: LiveReport | None,
    served: Served | None,
) -> TrainResult:
    """A run that judged a kept candidate again and decided (issue 62): no step, the
    gate's figures; the candidate's held-out scores are its eval. Its record of the data
    is not saved: the next run trains on what the decided model did not learn."""
    checkpoint = candidates_dir(Path(request.checkpoint_dir)) / str(gate.candidate_id)
    scores = gate.candidate
    return TrainResult(
        agent=request.agent,
        precision_requested=request.precision.requested,
        precision_used=gate.precision or "fp32",
        precision_reason=f"{request.precision_reason}; judged again, no step",
        device=request.device,
        steps=0,
        skipped_steps=0,
        overflow_rate=0.0,
        loss_scale=1.0,
        final_train_loss=math.nan,
        eval={} if scores is None else {"auc": scores.auc, "success_bce": scores.log_loss},
        samples_per_second=0.0,
        wall_seconds=clock.elapsed(),
        checkpoint=checkpoint / str(gate.checkpoint)
        if gate.outcome == Outcome.PROMOTED
        else (served.checkpoint if served is not None else None),
        quarantined=data.quarantined,
        rejected=gate.outcome == Outcome.REJECTED,
        data=DataReport(seen.records, seen.digest, "changed"),
        gate=gate,
        live=live,
        phases=clock.to_json(),
    )


def _options(request: TrainRequest) -> TaskOptions:
    """The request's task options; a request this recipe cannot run refused in one line."""
    if request.data_path is None:
        raise TrainRequestError(
            f"{request.agent} needs a data path: generate one with generate_sample_data"
        )
    options = TaskOptions.from_mapping(request.options)
    if options.final_fit == "whole" and rank_and_world()[1] > 1:
        raise TrainRequestError("final_fit='whole': one process only, not under torchrun")
    return options


def _checked_data(request: TrainRequest, single: bool) -> DataCheck | None:
    """Issue 36: the data files against the served model's run (nothing changed ends the
    run unparsed). The job's plan checked once (request.snapshot); a request without a
    check checks now; none under torchrun (ranks must not decide apart)."""
    if not single:
        return None
    checked = request.snapshot.data if request.snapshot is not None else None
    return checked or check_data(request)


def _watch(root: Path, data: ReadResult, request: TrainRequest, single: bool) -> LiveReport | None:
    """Issue 51: the new records judge the served model against its predecessor first,
    and a live regression serves the predecessor again; one process only (ranks would
    race)."""
    if not single:
        return None
    return live_record(watch(root, data.columns, request.agent, snapshot=request.snapshot))


def _early_stop(
    task: WorldModelTask, options: TaskOptions, request: TrainRequest, stop: bool
) -> EarlyStopping | None:
    """The task's early stopping, when its options ask for it (not with FSDP); ``stop``:
    it ends the run (no budget given), else it only keeps the best weights."""
    if options.early_stopping and not request.fsdp:
        return task.early_stopping(stop=stop)
    return None


def _served_now(
    gate: GateReport | None, checkpoint: Path | None, served: Served | None
) -> Path | None:
    """What is served after the gate: the candidate, when it promoted it; else the model
    served before."""
    if gate is not None and gate.outcome == Outcome.PROMOTED:
        return checkpoint
    return served.checkpoint if served else None


def _drift(
    request: TrainRequest,
    data: ReadResult,
    plan: Plan,
    numeric: torch.Tensor | None,
    clock: PhaseClock,
) -> tuple[DriftReport | None, torch.Tensor | None]:
    """The new records' drift from the served model's (None when the data did not
    change), logged when flagged; and the numeric rows, computed here if the task kept
    none, for the gate to reuse."""
    if plan.change is None or plan.change.unchanged:
        return None, numeric
    with clock.phase("drift"):
        if numeric is None:
            numeric = pool_numeric(data.columns, data.columns.labelled)
        drift = drift_report(data.columns, plan.served_seen, request.seed, numeric)
    if drift is not None:
        log_drift(drift, request.agent)
    return drift, numeric


def _device_peak(device: str) -> int | None:
    """The run's peak CUDA memory; None on a CPU."""
    if torch.cuda.is_available() and device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(device))
    return None


@contextlib.contextmanager
def _only(loaded: Loaded | None, root: Path) -> Iterator[tuple[Path, Loaded | None]]:
    """A folder holding only the file the pointer names (a hard link, else a copy, and its
    digest), so that the up-to-date run evaluates that model and never a newer file that
    sits beside it in the candidate's folder (issue 51). Removed afterwards."""
    assert loaded is not None  # an up-to-date plan read the served model
    with tempfile.TemporaryDirectory(prefix=".up-to-date-", dir=root) as tmp:
        for source in (loaded.path, digest_path(loaded.path), summary_path(loaded.path)):
            if source.exists():
                try:
                    os.link(source, Path(tmp) / source.name)
                except OSError:  # another file system, or no hard links there
                    shutil.copy2(source, Path(tmp) / source.name)
        link = Path(tmp) / loaded.path.name
        yield Path(tmp), Loaded(loaded.state, link, file_signature(link))


def _quarantine_path(request: TrainRequest) -> Path | None:
    """Where this process writes quarantined records: rank 0's path, None on other ranks.

    Under torchrun every rank reads the whole data file and counts and skips the same
    records; only rank 0 writes them down, so the file holds each record once.
    """
    if rank_and_world()[0] != 0:
        return None
    return request.quarantine_path or QUARANTINE_LOG.at(Path(request.checkpoint_dir))
