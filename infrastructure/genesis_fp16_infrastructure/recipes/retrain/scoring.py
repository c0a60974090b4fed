"""How an SE-Darwin model is judged: its success head's log-loss and Brier score on each
record, two gated loss columns (the log-loss primary).

The judged run (``genesis_fp16_infrastructure.judging``) asks a plugin for a checkpoint's
loss on every current record (``score_records``); se_darwin answers with the success
head's log-loss and Brier score, its probability clipped to ``[CLIP, 1 - CLIP]`` so that a
record's log-loss is at most :data:`LOSS_SPAN` (4.6 nats), each record named by its
trajectory id and the hash of its label and inputs (``split.judged_ids``: a record edited
in place is a new one) and segmented by the Genesis agent that wrote it (the gate judges
every agent the served model knew on its own, on each column). The AUC is reported in
the run's eval (its held-out part is the judged run's), not gated (docs/judging.md).

>>> round(LOSS_SPAN, 3)
4.595
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genesis_fp16_infrastructure.contract.listed_rows import at_rows
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.record_losses import RecordIds, RecordLosses
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.pool_columns import GROWN_FROM, SPLICED_FROM, PoolColumns
from genesis_fp16_infrastructure.data.readers import ReadResult
from genesis_fp16_infrastructure.data.schema import judged_ids_of
from genesis_fp16_infrastructure.kept_in_memory import (
    estimate_bytes,
    kept_of_digest,
    process_memory,
)
from genesis_fp16_infrastructure.recipes.retrain.evaluated import checkpoint_digest, evaluated_logit
from genesis_fp16_infrastructure.recipes.retrain.freshness import record_cache
from genesis_fp16_infrastructure.recipes.retrain.kept_outputs import (
    PoolKeys,
    keep_logits,
    keep_pool_keys,
    kept_logits,
    kept_pool_keys,
    logged_reuse,
)
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.run import kept_numeric, read_pool
from genesis_fp16_infrastructure.recipes.retrain.split import judged_ids
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint, sharing_kept
from genesis_fp16_infrastructure.world_model.features import Categorical, numeric_rows
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor, forward_chunked

CLIP = 0.01  # P(success) clipped to [CLIP, 1 - CLIP]: a record's loss is at most LOSS_SPAN
LOSS_SPAN = math.log((1 - CLIP) / CLIP)
# The difference a candidate may be shown worse by at most, by loss column: log-loss in
# nats (the margin the recipe's own gate had: clean growth on the daemon's 2,000-record
# sample pool passes).
# Brier: 0.005, the Brier difference of the probability shift that costs 0.01 nats at
# P(success) = 0.5 (for a small shift d, log-loss grows by d^2 / (2 p (1 - p)), Brier by
# d^2): nowhere stricter than the log-loss margin.
MARGIN = {"log_loss": 0.01, "brier": 0.005}
MODEL_KIND = "scoring model"  # the memory store's (kept_in_memory.kept_of_digest)


def record_losses(p: torch.Tensor, success: np.ndarray) -> dict[str, np.ndarray]:
    """Each record's log-loss and Brier score ((p - label)^2) of ``p``, clipped to
    [CLIP, 1 - CLIP], against its label; the first column is the primary."""
    q = p.double().clamp(CLIP, 1 - CLIP).numpy()
    return {
        "log_loss": np.where(success, -np.log(q), -np.log1p(-q)),
        "brier": np.asarray((q - success.astype(np.float64)) ** 2),
    }


@dataclass
class _RunPool:
    """The pool one run's scorings share: its read, its records' judged ids, and the
    numeric inputs of every labelled record once the first scoring built them. A judged
    run scores up to three models on the same pool (the served one, the one before it,
    the candidate): read, named and built once, that is two fifths of its judging at
    100,000 records (20% of the run before, 11% after). Kept while the run's plan (its
    ``request.snapshot``) lives."""

    plan: weakref.ref[Any] | None
    key: tuple[str, TaskOptions, str]
    data: ReadResult
    kept: KeptNumeric | None = None
    numeric: np.ndarray | None = None  # read-only: the kept rows themselves (KeptNumeric.view)

    budget: int | None = None  # the request's keep_in_memory_bytes
    stamp: np.ndarray | None = None  # each labelled row's stamp (KeptNumeric.view)

    @functools.cached_property
    def keys(self) -> PoolKeys:
        """Each labelled record's input key (kept_outputs.py), worked out when asked: a
        kept row's as the previous run of this data path worked it out (its stamp the
        same), the rest hashed. Kept for the next run."""
        columns = self.data.columns
        if self.kept is None:
            return PoolKeys(columns)
        self.numeric_of(np.zeros(0, np.int64))  # the kept rows' view, and their stamps
        path = str(self.key[0])
        keys = PoolKeys(columns, self.stamp, kept_pool_keys(self.budget, path))
        keep_pool_keys(self.budget, path, keys)
        return keys

    def numeric_of(self, asked: np.ndarray) -> torch.Tensor:
        """The numeric rows of the labelled records ``asked``: every labelled record's
        built once a run, from the kept rows when there are (only what is new or changed
        is worked out: world_model.kept_numeric), else when all are asked for; else the
        rows asked for alone. Every labelled record's are read, not copied (a read-only
        view of the kept rows): each call gathers the rows it asks for."""
        columns = self.data.columns
        if self.numeric is None and self.kept is not None:
            self.numeric, self.stamp = self.kept.view(columns)
        elif self.numeric is None and len(asked) == len(self.ids):
            self.numeric = numeric_rows(columns, columns.labelled).numpy()
            self.numeric.flags.writeable = False
        if self.numeric is None:
            return numeric_rows(columns, columns.labelled[asked])
        return torch.from_numpy(self.numeric[asked])

    @functools.cached_property
    def ids(self) -> tuple[str, ...]:
        """Each labelled record's judged id (``split.judged_ids``): the listing's, when the
        run listed its records or a resident process keeps what it names (a first run's
        gate names them, checked, so that the next run's listing grows by what is new)."""
        if "listing" in vars(self) or process_memory(self.budget or 0) is not None:
            return self.listing.ids
        return judged_ids(self.data.columns, self.budget)

    @functools.cached_property
    def segments(self) -> Sequence[str]:
        """Each labelled record's segment: the Genesis agent that wrote it (the listing's,
        when the run listed its records)."""
        if "listing" in vars(self):
            return self.listing.segments or ()
        return _segments(self.data.columns, 0)

    @functools.cached_property
    def listing(self) -> RecordIds:
        """Every labelled record by judged id and segment, checked (``RecordIds``). A pool
        the record cache grew from the one this process listed last for the same data
        path (``pool_columns.GROWN_FROM``: its first rows are that pool's) is that
        listing extended by its new records, named and checked alone
        (``RecordIds.extended``: at 100,000 records, no walk of every id but the one
        joining the tuples); one the cache laid new records among the rows of
        (``pool_columns.SPLICED_FROM``), that listing with them laid among its own
        (``RecordIds.spliced``); the same pool (its token), that listing; any other,
        listed and checked whole."""
        columns = self.data.columns
        memory = process_memory(self.budget or 0)
        key = (LISTING_KIND, self.key[0])
        kept = None if memory is None else memory.get(key, LISTING_KIND, given=False)
        if isinstance(kept, _KeptListing) and kept.pool is columns.token:
            return kept.listing
        first = len(kept.listing.ids) if isinstance(kept, _KeptListing) else 0
        grown = isinstance(kept, _KeptListing) and vars(columns).get(GROWN_FROM) is kept.pool
        new = _spliced_places(columns, kept.pool) if isinstance(kept, _KeptListing) else None
        if grown and first <= len(columns.labelled):
            assert isinstance(kept, _KeptListing)
            ids = list(map(columns.ids.__getitem__, columns.labelled[first:].tolist()))
            more = tuple(judged_ids_of(ids, columns.key[first:]))
            listing = kept.listing.extended(more, _segments(columns, first), columns.judged)
        elif new is not None and len(columns.labelled) - len(new) == first:
            assert isinstance(kept, _KeptListing)
            rows = columns.labelled[new]
            ids = list(map(columns.ids.__getitem__, rows.tolist()))
            more = tuple(judged_ids_of(ids, columns.key[new]))
            segments = columns.agent.take_as(rows, _segment)
            listing = kept.listing.spliced(new, more, segments, columns.judged)
        else:
            named = judged_ids(columns, self.budget)
            listing = RecordIds(named, tuple(_segments(columns, 0)), columns.judged)
        if memory is not None:
            entry = _KeptListing(columns.token, listing)
            # The set of its ids the listing's check keeps: ~40-80 bytes an id.
            size = estimate_bytes(entry) + 64 * len(listing.ids)
            memory.put(key, LISTING_KIND, entry, size, "the listed records' ids")
        return listing


LISTING_KIND = "listed records"  # the store's key: (LISTING_KIND, data path)


@dataclass(frozen=True)
class _KeptListing:
    """A run's listing of its records, and the pool it lists (its token)."""

    pool: object
    listing: RecordIds


def _segments(columns: PoolColumns, first: int) -> list[str]:
    """The segment of each labelled record from the ``first`` on: the Genesis agent that
    wrote it, each agent's name said once, not once a record."""
    return columns.agent.take_as(columns.labelled[first:], _segment)


def _segment(agent: object) -> str:
    """A record's segment: the Genesis agent that wrote it ("-": none named)."""
    return "-" if agent is None else str(agent)


def _spliced_places(columns: PoolColumns, pool: object) -> np.ndarray | None:
    """Where the new labelled records are among ``columns``' labelled, when the record
    cache laid them among the rows of ``pool`` (its token; ``data.pool_splice``); None
    otherwise."""
    note = vars(columns).get(SPLICED_FROM)
    if note is None or note[0] is not pool:
        return None
    is_old = np.zeros(len(columns), dtype=np.bool_)
    is_old[note[1]] = True
    return np.flatnonzero(~is_old[columns.labelled])


_RUN_POOL: list[_RunPool] = []  # at most one: the last run's


def _run_pool(request: TrainRequest, options: TaskOptions) -> _RunPool:
    """The pool of ``request``'s run, read now unless a scoring of the same run (the same
    plan object, data path, options and agent) read it already."""
    checked = request.snapshot.data if request.snapshot is not None else None
    key = (str(request.data_path), options, request.agent)
    kept = _RUN_POOL[0] if _RUN_POOL else None
    if checked is not None and kept and kept.plan and kept.plan() is checked and kept.key == key:
        return kept
    cache = record_cache(request, checked.scan if checked is not None else None)
    # quarantined records kept where the judged run asks (its first read)
    data = read_pool(request, options, request.quarantine_path, cache)
    plan = None if checked is None else weakref.ref(checked)
    pool = _RunPool(plan, key, data, kept_numeric(request, cache))
    pool.budget = request.keep_in_memory_bytes
    if checked is not None:  # forgotten with the plan: a daemon thread keeps no old pool
        _RUN_POOL[:] = [pool]
        weakref.finalize(checked, _forget)
    return pool


def _forget() -> None:
    """A plan is gone: its pool with it, unless a later run's replaced it already."""
    if _RUN_POOL and (_RUN_POOL[0].plan is None or _RUN_POOL[0].plan() is None):
        _RUN_POOL.clear()


def score_records(checkpoint: Path, request: TrainRequest) -> RecordLosses:
    """``checkpoint``'s success log-loss and Brier score on the labelled records of the
    request's pool it asks for (``request.scoring_rows``: the judged run's watch and
    gate ask for a part), by judged id, segmented by Genesis agent."""
    if request.data_path is None:
        raise TrainRequestError(f"{request.agent}: judged models need a data path")
    pool = _run_pool(request, TaskOptions.from_mapping(request.options))
    data, columns, ids = pool.data, pool.data.columns, pool.ids
    # The rows asked for, among the labelled: the model's inputs are built for these alone
    # (or taken from those the run's first scoring built for every record).
    # By the rows the run asked as, where it asked by rows of this listing (an array it
    # cannot change; no list of Python ints and back), else as the request says.
    only = request.score_only
    asked = None if only is None else only.row_array(ids)
    if asked is None:
        asked = np.asarray(request.scoring_rows(ids), dtype=np.int64)
    try:
        # P(success) by the checkpoint's served weights (an ensemble's: its members' mean)
        predictor = _predictor(Path(checkpoint), request.keep_in_memory_bytes)
        logit = _logits(request, Path(checkpoint), predictor, pool, asked)
        p = torch.sigmoid(logit)
    except (KeyError, RuntimeError) as exc:  # not a world model this build can load
        raise ValueError(f"not a world-model checkpoint: {exc}") from None
    losses = record_losses(p, columns.success[asked])
    listing = vars(pool).get("listing")
    if isinstance(listing, RecordIds) and ids is listing.ids:  # its rows of a checked listing
        return RecordLosses.of_rows(listing, asked, losses, data.quarantined)
    rows = asked.tolist()
    named = at_rows(pool.segments, rows)
    return RecordLosses.of(at_rows(ids, rows), losses, named, data.quarantined)


def _predictor(checkpoint: Path, budget: int | None) -> WorldModelPredictor:
    """The checkpoint's predictor, built of its state (its checks: ``load_checkpoint``);
    in a resident process (``budget``: the request's ``keep_in_memory_bytes``) the one
    an earlier scoring built of the same bytes, for the last three checkpoints scored: the
    model a run serves is the candidate the run before it scored, and the predecessor its
    live watch scores is the model that run served (5-12 ms a build, issue 90). Its model
    and encoder are only read by a scoring."""
    with sharing_kept():  # its state only read: a resident process's kept one will do
        state = load_checkpoint(checkpoint)
    digest = checkpoint_digest(checkpoint)  # the judged run's, noted as it hashed the copy
    build = functools.partial(WorldModelPredictor.of_state, state)
    return kept_of_digest(process_memory(budget or 0), MODEL_KIND, digest, build, _model_bytes)


def _model_bytes(predictor: WorldModelPredictor) -> int:
    """The bytes of a predictor's weights."""
    return sum(t.nbytes for t in predictor.model.state_dict().values())


def _logits(
    request: TrainRequest,
    checkpoint: Path,
    predictor: WorldModelPredictor,
    pool: _RunPool,
    asked: np.ndarray,
) -> torch.Tensor:
    """The checkpoint's P(success) logits on the labelled records ``asked``: those its own
    run's evaluation computed (the gate's candidate: evaluated.py), else those this
    process kept of the same file on the same inputs (a resident process: kept_outputs.py),
    the rest by one forward over them alone. What a resident process computes, or takes
    from the evaluation, it keeps for the next scoring of that file."""
    columns = pool.data.columns
    budget = request.keep_in_memory_bytes
    # The candidate's own run evaluated these records with these weights: its logits,
    # no second encode or forward (the checkpoint read above all the same: its refusal
    # is the scoring's)
    logit = evaluated_logit(request, checkpoint, predictor.model, columns.judged[asked])
    if not budget:  # nothing kept: a forked run's, train's
        if logit is None:
            logit = _forward(predictor, columns, asked, pool.numeric_of(asked))
        return logit
    digest = checkpoint_digest(checkpoint)
    keys = pool.keys.of(asked, pool.numeric_of)
    kept = kept_logits(budget, digest)
    what = f"checkpoint {checkpoint.name} (sha256 {digest[:12]})"
    # Each record's labelled row beside its key: a kept logit of the same row and key is
    # taken there, no search (kept_outputs.RowLogits)
    if logit is not None:  # the evaluation's: kept for the next run that serves it
        fresh = np.ones(len(asked), bool) if kept is None else ~kept.find(keys, asked)[0]
        keep_logits(budget, digest, kept, keys.take(fresh), logit.numpy()[fresh], what,
                    asked[fresh])  # fmt: skip
        return logit
    hit, taken = (np.zeros(len(asked), bool), None) if kept is None else kept.find(keys, asked)
    missed = np.flatnonzero(~hit)
    out = torch.from_numpy(np.zeros(len(asked), np.float32) if taken is None else taken)
    if len(missed):
        numeric = pool.numeric_of(asked[missed])
        out[torch.from_numpy(missed)] = _forward(predictor, columns, asked[missed], numeric)
    keep_logits(budget, digest, kept, keys.take(missed), out.numpy()[missed], what, asked[missed])
    logged_reuse(what, int(hit.sum()), len(asked))
    return out


def _forward(
    predictor: WorldModelPredictor, columns: PoolColumns, asked: np.ndarray, numeric: torch.Tensor
) -> torch.Tensor:
    """The model's logits on the labelled records ``asked`` (``numeric``: their numeric
    rows): encoded, one chunked forward."""
    parts = Categorical.of_rows(columns, columns.labelled[asked])
    x = predictor.encoder.encode_parts(parts, numeric)
    with torch.no_grad():
        return forward_chunked(predictor.model, x).success_logit.float()


def record_ids(request: TrainRequest) -> RecordIds | None:
    """Every labelled record of the request's pool, by judged id and Genesis agent, as
    :func:`score_records` names them; None without the run's plan, whose pool the run's
    scorings share (the served model's would read it again)."""
    if request.data_path is None or request.snapshot is None or request.snapshot.data is None:
        return None
    return _run_pool(request, TaskOptions.from_mapping(request.options)).listing
