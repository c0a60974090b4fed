"""One training run of the retrain loop: read the pool, train a world model through
``fit()`` in the folder the request names, and report the data's drift from the served
model's.

se_darwin is a judged plugin (``contract.judging``): the library's judged run
(``genesis_fp16_infrastructure.judging.run``) decides everything about serving. It scores
the served model (:func:`~.scoring.score_records`), watches it live, decides whether
anything is new, makes a candidate folder (with a copy of the served checkpoint in it),
calls the plugin's ``train`` there, and gates the candidate on the held-out records
neither model trained on. This module is that ``train``: it trains on the records the
judged split does not hold out (``split.py``; the checkpoint names them,
``trained_ids``), afresh on the current records unless the run is forced
(``train --resume --steps N`` continues the served model's copy). :func:`probe_setup`
(``task.py``) gives the precision probe the same world model, loss and batches."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genesis_fp16_infrastructure.agent_folder.candidates import newest_checkpoint
from genesis_fp16_infrastructure.agent_folder.layout import CANDIDATES_FOLDER, QUARANTINE_LOG
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.reports import DataReport, DriftReport, TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.fingerprint import (
    DataChange,
    DataFingerprint,
    compare,
)
from genesis_fp16_infrastructure.data.readers import DataTooLarge, ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.machine_memory import PhaseClock, machine_memory_bytes, paused_gc
from genesis_fp16_infrastructure.recipes.retrain.drift import drift_report, keep_reference
from genesis_fp16_infrastructure.recipes.retrain.evaluated import keep_evaluated, scored_alike
from genesis_fp16_infrastructure.recipes.retrain.freshness import (
    check_data,
    record_cache,
    save_record,
)
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.training import CheckpointManager, FitResult, fit
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint_arrays import with_arrays
from genesis_fp16_infrastructure.training.checkpoint_load import (
    Loaded,
    read_checkpoint,
    reusing_loads,
    sharing_kept,
)
from genesis_fp16_infrastructure.training.distributed import rank_and_world
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric
from genesis_fp16_infrastructure.world_model.predict import read_world_model_state

logger = logging.getLogger(__name__)

SUPERSEDED_FOLDER = "superseded"  # final_fit=whole: earlier checkpoints of the folder, kept
SPLIT_FOLDER = "split"  # final_fit=whole: the split run's checkpoints, under the candidate


def train(request: TrainRequest) -> TrainResult:
    """Read the data and train a candidate in ``request.checkpoint_dir`` (the judged run's
    candidate folder: module docstring). The judged run that made the candidate holds
    the agent's folder for the whole run (rank 0 under torchrun; ``judging.run``), and
    ``fit()`` the folder it writes: no other process writes the candidate meanwhile."""
    if request.data_path is None:  # a request this recipe cannot run: refused in one line
        raise TrainRequestError(
            f"{request.agent} needs a data path: generate one with generate_sample_data"
        )
    options = TaskOptions.from_mapping(request.options)
    whole = options.final_fit == "whole"
    if whole and rank_and_world()[1] > 1:
        raise TrainRequestError("final_fit='whole': one process only, not under torchrun")
    clock = PhaseClock()  # issue 36: where the run's time goes (the result's phases)
    manifest = _scan(request)
    candidate = Path(request.checkpoint_dir)
    candidate.mkdir(parents=True, exist_ok=True)  # a caller's own folder may not exist yet
    with clock.phase("check"):
        served, saved, loaded = _served_copy(candidate, request)
    with clock.phase("read"), paused_gc():  # objects without cycles (machine_memory.paused_gc)
        cache = record_cache(request, manifest)  # issue 36: unchanged files unparsed
        data = read_pool(request, options, _quarantine_path(request), cache)
        seen = data.fingerprint  # kept with the pool: a later read sorts in what is new
    steps, epochs = request.steps, request.epochs
    # No budget given: train until validation stops improving, within max_epochs. An
    # explicit steps/epochs budget runs in full (what the operator asked for, a forced
    # run), and the best validated weights are still the ones a candidate offers.
    own_budget = steps is None and epochs is None
    # With final_fit=whole the split run keeps its checkpoints in a subfolder, and the
    # candidate's folder itself holds the refit's: the one that would be served.
    folder = candidate / SPLIT_FOLDER if whole else candidate
    with clock.phase("check"):  # what changed since the served model's data: its phase
        change = None if served is None else compare(served.get("data"), seen)
    with clock.phase("encode"), paused_gc():
        kept = _kept_numeric_pruned(request, cache)  # encode's rows (a file per agent kept)
        # An unforced later run may encode with the served model's encoder (encoder_choice)
        task = WorldModelTask(
            data, options, request.seed, request.device, saved, seen=seen, agent=request.agent,
            kept=kept, served=served if saved is None else None, change=change,
        )  # fmt: skip
    if own_budget:
        epochs = options.max_epochs
    # Early stopping when the options ask for it (not with FSDP): it ends a run given no
    # budget, else it only keeps the best weights.
    stopping = options.early_stopping and not request.fsdp
    early_stop = task.early_stopping(stop=own_budget) if stopping else None
    with clock.phase("train"):  # steps and checkpoint writes; evaluation moved out
        result = fit(
            task,
            request.fit_options(
                steps=steps,
                epochs=epochs,
                early_stop=early_stop,
                checkpoint_dir=folder,
                resume=saved is not None,
                loaded_checkpoint=loaded,  # read once, by _served_copy
            ),
        )
    clock.move("train", "eval", task.eval_seconds)
    extra = run_extra(result, data, task, candidate.name)
    refit = None
    if whole and not result.stopped_early:
        with clock.phase("final_fit"):
            refit, records = train_refit(request, task, data, result)
        extra["final_fit"] = refit_record(refit, records, result.checkpoint)
    evaluation = task.held_out_evaluation  # the gate's scoring of the checkpoint takes it
    if refit is None and evaluation is not None and scored_alike(request, result):
        assert result.checkpoint is not None  # evaluated.py
        held_out = data.columns.judged[task.split.held_out]
        keep_evaluated(request, result.checkpoint, held_out, evaluation)
    peak = _device_peak(request.device)
    if cache is not None:
        extra["record_cache"] = cache_record(cache, kept, task)
    checkpoint = result.checkpoint if refit is None else refit.checkpoint
    drift = None
    if not result.stopped_early:
        numeric = task.take_numeric_rows()
        stamp = None if kept is None else kept.stamps_of(numeric)  # its rows' stamps, if sound
        drift = _drift(request, data, served, change, numeric, stamp, clock)
    extra["peak_rss_mib"] = clock.peaks()
    out = TrainResult.from_fit(
        request,
        result,
        quarantined=data.quarantined,
        extra=extra,
        data=data_record(seen, change),
        device_memory_peak_bytes=peak,
        checkpoint=checkpoint,
        drift=drift,
        phases=clock.to_json(),
        wall_seconds=clock.elapsed(),
    )
    save_record(request, manifest, out, checkpoint)  # issue 36: read while it is served
    return out


def _scan(request: TrainRequest) -> Any:
    """The data files as the job's plan scanned them (``request.snapshot``), else scanned
    now (one process only: ranks must not decide apart): the record cache's and the data
    manifest's (issue 36)."""
    checked = request.snapshot.data if request.snapshot is not None else None
    if checked is None and rank_and_world()[1] == 1:
        checked = check_data(request)
    return None if checked is None else checked.scan


# Reading the pool for a run (and for its scorings: retrain.scoring), refused first when it
# would not fit in memory.
# What a run costs in resident memory per byte of pool file, at its peak, with room to
# spare. Measured since a training read keeps its records as columns, no object per
# record (issue 36): a generated 1,000,000-record pool (one 1,510 MB file) peaked at
# 1,407 MiB in a first one-epoch `train` (0.98x, ~235 MiB of it the imports) and at
# 1,389 MiB after it grew by 1% (0.96x), reached while the task is built or trained
# (benchmarks/results/pool_scale_cpu-amd-epyc-2-cores.md, "peak RSS as each phase
# ended"); 2,230 and 2,186 MiB one version before, 6,262 MiB (4.3x) before issue 36,
# when the factor was 7. Memory follows the number of records more than their bytes (a
# record holds ~1.2 KB at the peak whatever its text): a pool of records a third the
# size of the generated ~1.5 KB ones would peak near 3x its bytes, so the factor stays 3
# rather than following the measured 1x down. The default max_pool_bytes is the run's
# memory limit (or the machine's memory) divided by it.
POOL_MEMORY_FACTOR = 3
# Named in the refusal, so that an operator sees where the factor comes from.
MEASURED_PEAK = (
    "0.98x on a generated 1,000,000-record pool (1,407 MiB for 1,510 MB, ~1.2 KB a "
    "record), benchmarks/results/pool_scale_cpu-amd-epyc-2-cores.md"
)


def max_pool_setting(agent: str) -> str:
    """The daemon's setting of ``agent``'s ``max_pool_bytes`` option, named in a refusal.

    >>> max_pool_setting("se_darwin")
    'GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_POOL_BYTES'
    """
    return f"GENESIS_FP16_AGENTS__{agent.upper()}__OPTIONS__MAX_POOL_BYTES"


def read_pool(
    request: TrainRequest,
    options: TaskOptions,
    quarantine: Path | None,
    cache: RecordCache | None,
) -> ReadResult:
    """The pool at ``request.data_path``, size-checked first against the options'
    ``max_pool_bytes`` (unset: derived from the request's ``memory_limit_bytes``, or the
    machine's memory); a pool over it is one :class:`TrainRequestError` line naming its
    size, the limit and the setting of the request's agent (train exits 2, the daemon
    logs one line)."""
    assert request.data_path is not None
    path, memory_limit, agent = Path(request.data_path), request.memory_limit_bytes, request.agent
    limit = options.max_pool_bytes
    if limit is None:
        memory = machine_memory_bytes() if memory_limit is None else memory_limit
        limit = memory // POOL_MEMORY_FACTOR
        whose = (
            "the run's memory limit (GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES)"
            if memory_limit is not None
            else "this machine's memory (or its cgroup limit)"
        )
        source = f"{whose}, {memory / 2**20:,.0f} MiB, / {POOL_MEMORY_FACTOR}"
    else:
        source = max_pool_setting(agent)
    try:
        # keep_text=False: the run needs each record's numbers, not its change's text
        return read_trajectories(
            path,
            quarantine=quarantine,
            max_bytes=limit or None,
            cache=cache,
            keep_text=False,
            workers=request.read_workers or 0,
        )
    except DataTooLarge as exc:
        raise TrainRequestError(
            f"{exc} (the limit is {source}); a run peaks at about {POOL_MEMORY_FACTOR}x its "
            f"pool's bytes in resident memory (measured {MEASURED_PEAK}). "
            f"Raise {max_pool_setting(agent)} (the {agent} option max_pool_bytes; 0: no limit) "
            "on a machine with the memory, or train on part of the pool"
        ) from None


def _served_copy(
    candidate: Path, request: TrainRequest
) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None, Loaded | None]:
    """The served model's world-model state (its data, for drift), from the copy the
    judged run put in the candidate's folder (``request.resume``); and, for a forced
    run only, the same as the state to resume and its read. A run that is not forced
    trains afresh (its encoder fitted on the current records): the copy is removed, so
    that it is never offered as the candidate. A newest checkpoint of a run cut short
    (its run record not complete: the candidate's own, which the judged run continues,
    judging.unfinished) is never a copy: it is resumed, forced or not; nor is one its run
    wrote at its end in this folder (``request.finishes``: killed before its verdict),
    which the run then judges as it is."""
    newest = newest_checkpoint(candidate)
    if newest is None or (rank_and_world()[0] != 0 and not request.forced):
        return None, None, None  # torchrun: rank 0 alone removes the copy (and reports drift)
    # A forced run resumes from the copy (its tensors trained on): a state of its own.
    # Otherwise first read as a reader that never changes it: the served model's bytes, in
    # a resident process the state its judged run just scored (hashed, not unpickled again)
    loaded, state = _read_copy(newest, shared=not request.forced)
    run = loaded.state.get(keys.RUN)
    own = request.finishes and isinstance(run, Mapping) and run.get("folder") == candidate.name
    if request.forced or own or (isinstance(run, Mapping) and run.get("complete") is False):
        if not request.forced:  # a run cut short, resumed: read again, a state of its own
            loaded, state = _read_copy(newest, shared=False)
        return state, state, loaded
    CheckpointManager(candidate).remove(newest)  # a copy: the served model's own files stay
    return state, None, None


def _read_copy(path: Path, shared: bool) -> tuple[Loaded, dict[str, Any]]:
    """``path`` read and checked (``read_checkpoint``), its world-model state checked too;
    ``shared``: by a reader that never changes the state (``sharing_kept``: in a resident
    process the state kept of the same bytes, which the judged run's scoring of the
    served model read; issue 90), and its world-model state. Unusable: one
    TrainRequestError line."""
    try:
        if shared:
            with reusing_loads(), sharing_kept():
                loaded = read_checkpoint(path)
        else:
            loaded = read_checkpoint(path)
        # Its data's fingerprint (for what changed, and drift) from its side file.
        return loaded, read_world_model_state(with_arrays(loaded.state, path))
    except (CheckpointError, ValueError, OSError) as exc:
        raise TrainRequestError(f"checkpoint {str(path)!r} unusable: {exc}") from None


def _drift(
    request: TrainRequest,
    data: ReadResult,
    served: Mapping[str, Any] | None,
    change: DataChange | None,
    numeric: torch.Tensor | None,
    stamp: np.ndarray | None,
    clock: PhaseClock,
) -> DriftReport | None:
    """The new records' drift from the served model's (None when the data did not
    change), logged when flagged. With no served model, in a resident process, the
    reference a later run's report over this run's candidate starts from is kept
    (``drift.keep_reference``): measured once, grown by what is new after. ``stamp``:
    ``numeric``'s rows' stamps (``KeptNumeric.stamps_of``), which the kept reference's
    sampled rows are checked by where it has them, else None."""
    if served is None and rank_and_world()[0] == 0 and (request.keep_in_memory_bytes or 0) > 0:
        with clock.phase("drift"):
            keep_reference(data.columns, numeric, request.keep_in_memory_bytes, stamp)
    if served is None or change is None or change.unchanged:
        return None
    with clock.phase("drift"):  # drift_report builds the numbers when the task gave none
        seen = DataFingerprint.from_state(served.get("data"))
        drift = drift_report(
            data.columns, seen, request.seed, numeric, request.keep_in_memory_bytes, stamp
        )
    if drift is not None and drift.any_flagged:  # one line: what moved, and by how much
        logger.warning(
            "%s: %d new record(s) drifted: %s; success rate shift %+.3f (threshold %.3f)",
            request.agent,
            drift.new_records,
            ", ".join(f"{k} {drift.features[k]:.3f}" for k in drift.flagged) or "none",
            drift.label_shift,
            drift.label_shift_threshold,
        )
    return drift


def _device_peak(device: str) -> int | None:
    """The run's peak CUDA memory; None on a CPU."""
    if torch.cuda.is_available() and device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(device))
    return None


def _quarantine_path(request: TrainRequest) -> Path | None:
    """Where this process writes quarantined records: rank 0's path, None on other ranks.

    Under torchrun every rank reads the whole data file and counts and skips the same
    records; only rank 0 writes them down, so the file holds each record once.
    """
    if rank_and_world()[0] != 0:
        return None
    folder = Path(request.checkpoint_dir)  # a judged run's candidates/<id>: the agent's
    if folder.parent.name == CANDIDATES_FOLDER:
        folder = folder.parent.parent
    return request.quarantine_path or QUARANTINE_LOG.at(folder)


def train_refit(
    request: TrainRequest, task: WorldModelTask, data: ReadResult, split: FitResult
) -> tuple[FitResult, int]:
    """``final_fit=whole``: train a fresh model on every labelled record the judged run
    does not hold out, for the step count the split run served (its best validated step:
    what the pool needs), with no early stopping; it is what the candidate offers
    (``docs/se-darwin.md``, "final_fit"). Returns its result and the records it trained on.

    It writes one checkpoint, at its end, into the request's folder. A resumed request
    continues an earlier refit found there (same encoder, at most that many steps) to the
    same step count, so a finished one takes no step; any other checkpoint there (another
    step count, other data) is first moved into ``superseded/<UTC time>/`` under the
    folder, since it would otherwise be the newest: kept, but no longer served.
    """
    best = split.early_stop.best_step if split.early_stop is not None else None
    steps = int(best or split.summary.step)
    whole = task.on_whole_pool(data, request.device)
    folder = Path(request.checkpoint_dir)
    done = _refit_done(folder, whole, steps) if request.resume else None
    if done is None:
        _set_aside_checkpoints(folder)
    logger.info("final_fit=whole: %d record(s), %d step(s)", len(whole.train_data), steps)
    options = request.fit_options(
        # What the split run ended in, after any demotion; the request's measurement cache
        # (where captured steps' verdicts are kept) and floor stay.
        precision=dataclasses.replace(request.precision, requested=split.precision.used),
        steps=steps - (done or 0),
        epochs=None,
        resume=done is not None,
        checkpoint_steps=steps or 1,  # the end only: a refit is at most the split's length
        checkpoint_seconds=None,
        on_log=None,  # its step counter starts again at 0: not the run's progress
    )
    return fit(whole, options), len(whole.train_data)


def _refit_done(folder: Path, whole: WorldModelTask, steps: int) -> int | None:
    """The steps of an earlier refit in ``folder`` that this one can continue, or None."""
    found = CheckpointManager(folder).load_latest()
    if found is None:
        return None
    state = found[0]
    same_data = state.get(keys.EXTRA, {}).get("encoder") == whole.encoder.state_dict()
    step = int(state[keys.STEP])
    return step if same_data and step <= steps else None


def _set_aside_checkpoints(folder: Path) -> None:
    manager = CheckpointManager(folder)
    into = folder / SUPERSEDED_FOLDER / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for path in manager.checkpoints():
        moved = manager.set_aside(path, into)
        logger.warning("moved %s to %s (kept, no longer served)", path, moved)


def refit_record(refit: FitResult, records: int, split_checkpoint: Path | None) -> dict[str, Any]:
    """``extra.final_fit`` of ``train --json``: what is served, and what ``eval`` measures."""
    return {
        "mode": "whole",
        "records": records,
        "steps": refit.summary.step,
        "precision": refit.precision.used,
        "checkpoint": str(refit.checkpoint) if refit.checkpoint else None,
        "split_checkpoint": str(split_checkpoint) if split_checkpoint else None,
        "stopped_early": refit.stopped_early,
        "eval": "the split model's, on its held-out part; the served model trained on it too",
    }


# What the run reports beside its counts (contract.reports): the data it trained on and
# what changed, how the records were split; train builds its result from these once.


def data_record(seen: DataFingerprint, change: DataChange | None) -> DataReport:
    """The run's ``data``: the records trained on and what changed."""
    if change is None:
        return DataReport(seen.records, seen.digest, "first")
    return DataReport(
        seen.records,
        seen.digest,
        "unchanged" if change.unchanged else "changed",
        previous_records=change.previous,
        new=change.added,
        removed=change.removed,
        relabelled=change.relabelled,
    )


def split_record(task: WorldModelTask) -> dict[str, Any]:
    """``extra.split`` of ``train --json``: how the records were used."""
    if task.cross_validated:
        return {
            "mode": "cross_validation",
            "folds": task.config.members,
            "records": len(task.train_data),
            "eval": "out-of-fold: each record scored by the member that did not train on it",
        }
    return {
        "mode": "held_out",
        "train": len(task.train_data),
        "validation": len(task.validation_data),
        "held_out": len(task.eval_data),
    }


def run_extra(
    result: FitResult, data: ReadResult, task: WorldModelTask, candidate: str
) -> dict[str, Any]:
    """The run's own record in ``extra`` (the daemon reads none of it): its steps over
    the whole chain, the records used, skipped as duplicates or unlabelled, the split,
    the precision's warning, the checkpoint it resumed from and its candidate's name."""
    return {
        "total_steps": result.summary.step,
        "examples": data.labelled,
        "duplicates": data.duplicates,
        "unlabelled": data.unlabelled,
        "split": split_record(task),
        "precision_warning": result.precision.warning,
        "resumed_from": str(result.resumed_from) if result.resumed_from else None,
        "candidate": candidate,
        # served, fitted or checkpoint, and why (recipes.retrain.encoder_choice)
        "encoder": task.encoder_use,
        "encoder_reason": task.encoder_reason,
    }


def cache_record(
    cache: RecordCache, kept: KeptNumeric | None = None, task: WorldModelTask | None = None
) -> dict[str, int]:
    """``extra.record_cache``: the per-file record cache's counts for this read, and what
    the run's encode took from the kept numeric rows (``world_model.kept_numeric``) and
    the kept encoded rows (``world_model.kept_encoded``: a resident run process's)."""
    numeric = {}
    encoded = None if task is None else task.kept_encoded
    if encoded is not None:  # a resident run process's: kept_encoded is on
        numeric = {
            "encoded_reused": encoded.reused,  # rows taken from the kept matrix
            "encoded_computed": encoded.encoded,  # new, changed, or another encoder
        }
    if kept is not None:
        numeric |= {
            "numeric_reused": kept.reused,  # records whose numeric rows were kept
            "numeric_computed": kept.computed,  # new, changed, or beside a change
            "numeric_unreadable": kept.unreadable,  # a damaged file: every row worked out
            "numeric_write_failures": kept.write_failures,
            "numeric_appended": kept.appended,  # frames appended: the pool grew at its end
            "numeric_spliced": kept.spliced,  # of them, new records laid among the kept
            "numeric_from_memory": kept.from_memory,  # kept pools this process held
            "numeric_written": kept.written,  # kept pools refused: their rows written into
        }
    return numeric | {
        "files_cached": cache.hits,
        "files_read": cache.misses,
        "files_continued": cache.continued,  # appended .jsonl: new lines only
        "write_failures": cache.write_failures,
        "entries_unreadable": cache.unreadable,  # damaged entries: their files parsed again
        "pool_cached": int(cache.pool_hit),  # the joined pool whole: no file decoded
        # of files_cached, those a resident run process kept in memory (kept_in_memory)
        "files_from_memory": cache.from_memory,
    }


def kept_numeric(request: TrainRequest, cache: RecordCache | None) -> KeptNumeric | None:
    """The numeric rows kept for the request's pool, beside its record cache (and in its
    memory: a resident run process's); None without one (under torchrun each rank reads
    and encodes the pool itself)."""
    if cache is None or request.data_path is None:
        return None
    return KeptNumeric(cache.folder, Path(request.data_path).resolve(), cache.memory)


def _kept_numeric_pruned(request: TrainRequest, cache: RecordCache | None) -> KeptNumeric | None:
    """:func:`kept_numeric`, the files kept for other data paths deleted (a training run's:
    one file per agent, bounded)."""
    kept = kept_numeric(request, cache)
    if kept is not None:
        kept.forget_others()
    return kept
