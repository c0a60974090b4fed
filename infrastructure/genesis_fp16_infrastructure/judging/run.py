"""One run of any plugin: :func:`run_plugin`, the one call that trains an agent.

A plugin that declares judged models (contract.judging: the scaffold's, se_darwin,
rlhf_ppo) gets a judged run (:func:`run_judged`); any other plugin's ``train`` runs as it
is, and serves its newest checkpoint. The daemon (in a child or a thread), ``genesis-fp16
train``, ``check-agent`` and the run tracker's example all call :func:`run_plugin`.

A judged run, in the agent's checkpoint folder (``request.checkpoint_dir``), is four
phases over one :class:`JudgedState`; each phase that changes the served model's
lifecycle does so in one transaction (``agent_folder.transaction``: the pointer's lock
and the settling of what a killed writer left once, one commit):

1. **served**: the served model (the pointer's, :mod:`.served`, read in the run's first
   transaction unless the plan read it) scores the current records (those the run needs,
   when its plugin lists them); a pointer that cannot be followed refuses the run in one
   line (``TrainRequestError``) naming the repair; a folder written before the pointer
   existed adopts its newest checkpoint;
2. **watch**: the live watch (:mod:`.watch`) scores the records that came after the
   served model and its predecessor, and writes its figures or rolls the served model
   back (one transaction);
3. **candidate**: one a run cut short on the same request left (:mod:`.unfinished`),
   else, when the served model already knew every current record (and the plugin's
   records are its training data, the run is not forced and asks the options the served
   model was trained with), nothing to learn: ``up_to_date``, no candidate; else a new
   one (``new_candidate``) into which, with ``resume``, the served checkpoint is copied
   first; the plugin's resume continues what it holds. The phase reads the folder's
   candidates once and decides before it writes: the candidates cut short it does not
   continue are closed, and a kept inconclusive one judged again (issue 62), in one
   transaction;
4. **gate** (:mod:`.questions`, :mod:`.gate`): the candidate and the served model on the
   same records, paired (a run stopped before its end writes no verdict: the next run
   continues it); after the watch rolled a model back to the served one, on the records
   newer than that model too (``newest``); the first model is served as it is; a
   promotion waits for the operator's pin (``held``); the verdict file holds the figures,
   ``judged_ids.npz`` the records the model knew. The verdict (:mod:`.verdict`: decided,
   then staged) and the promotion it decides are one transaction: the verdict file, then
   the pointer.

**Records neither model trained on** (issue 68; the plugin's side: contract.judging).
The run reads the candidate's list of the records it trained on: one that names a
held-out record, or names none where the served model's did, is refused in one line
(its verdict ``undecided``, never served). The gate compares the two models on the
held-out records the served model did not train on either (a model that names none:
every record it knew), set ``held_out``; a served model that names nothing and knew no
judged records may know them, and the verdict says so. A plugin whose checkpoints name
nothing is judged on every current record (set ``current``, "on training data"); one
whose records are evaluation episodes (``records_are_training_data = False``) on all
of them, as ``current``.

**The checkpoint scored** (issue 69). ``score_records`` is handed a private copy of the
checkpoint, whose digest is checked after scoring (:mod:`.served`): a plugin that
changed it fails the run in one line, nothing is served, and the originals are as they
were (a candidate's verdict ``undecided``).

Pruning the history is the daemon's, after every run of any agent with a pointer
(``prune.prune`` with its settings), so a judged run prunes nothing itself. The
result carries the gate's report (``result.gate``) and the watch's (``result.live``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from genesis_fp16_infrastructure.agent_folder.candidates import (
    KeptCandidate,
    last_judged,
    make_candidate,
    newest_checkpoint,
    read_candidates,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_figures import finite
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    CandidateMeta,
    Outcome,
)
from genesis_fp16_infrastructure.agent_folder.transaction import (
    Committed,
    recording,
    transaction,
)
from genesis_fp16_infrastructure.contract.judging import JudgedPlugin, judging_of
from genesis_fp16_infrastructure.contract.plugin_api import (
    AgentPlugin,
    Capabilities,
    TrainRequestError,
)
from genesis_fp16_infrastructure.contract.record_losses import RecordLosses
from genesis_fp16_infrastructure.contract.reports import (
    CommittedChange,
    GateReport,
    LiveReport,
    TrainResult,
)
from genesis_fp16_infrastructure.contract.split import ScoreOnly, drawn_with
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.errors import ExecutionError
from genesis_fp16_infrastructure.judging import id_lookups, stores
from genesis_fp16_infrastructure.judging.questions import decide_scored
from genesis_fp16_infrastructure.judging.ranks import Tell, ranked
from genesis_fp16_infrastructure.judging.scoring_copy import (
    CheckpointChangedError,
    copy_checkpoint,
    losses_of,
    sweep_copies,
)
from genesis_fp16_infrastructure.judging.served import (
    LISTED,
    Served,
    held_out_check,
)
from genesis_fp16_infrastructure.judging.unfinished import decide_unfinished
from genesis_fp16_infrastructure.judging.up_to_date import judged_phases, nothing_new, up_to_date
from genesis_fp16_infrastructure.judging.verdict import Decided, undecided
from genesis_fp16_infrastructure.judging.watch import rolled_back_to, watch
from genesis_fp16_infrastructure.kept_in_memory import process_memory
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training.checkpoint_load import reusing_loads
from genesis_fp16_infrastructure.training.distributed import rank_and_world

logger = logging.getLogger(__name__)


def run_plugin(
    plugin: AgentPlugin,
    request: TrainRequest,
    capabilities: Capabilities | None = None,
    split_salt: str | None = None,
) -> TrainResult:
    """Train ``plugin`` as ``request`` asks: a judged run when it declares judged models
    (as the loader's ``capabilities`` of it say, else read here), its own ``train``
    otherwise. When the plan's data check (``request.snapshot``) found
    nothing changed since the served model's run, its up-to-date result, and nothing
    read (the daemon answers it before starting a child; ``train`` and others here).
    A ``cuda_graph`` or ``compile`` of the request that the run cannot honour
    (``ExecutionError``) is the request's refusal, a ``TrainRequestError`` with its line.
    ``split_salt``: the run under another draw of the held-out split (check-agent's
    ``trains_only_on_rows_kept``; :func:`~.split.drawn_with`), never a daemon's."""
    # A resident run process's memory store, for every agent's run (its calibration
    # record, its data's records): the daemon gives the budget; 0, train's, keeps nothing.
    memory = process_memory(request.keep_in_memory_bytes or 0)
    if memory is not None:
        memory.begin_run()  # what this run uses is not evicted during it
    check = request.snapshot.data if request.snapshot is not None else None
    if check is not None and check.up_to_date is not None:
        return TrainResult.from_json(check.up_to_date)
    judged = judging_of(plugin) if capabilities is None else capabilities.judged
    try:
        with contextlib.nullcontext() if split_salt is None else drawn_with(split_salt):
            return plugin.train(request) if judged is None else run_judged(plugin, judged, request)
    except ExecutionError as exc:
        raise TrainRequestError(str(exc)) from exc


def run_judged(plugin: AgentPlugin, judged: JudgedPlugin, request: TrainRequest) -> TrainResult:
    """One judged run (module docstring); the result carries the gate's report and the
    live watch's (``live``). Under torchrun, rank 0 judges and every rank trains in the
    candidate folder rank 0 made (:func:`~.ranks.ranked`)."""
    rank, world = rank_and_world()
    # The agent's folder has one judged run at a time (rank 0's): another process that
    # writes it is refused at once, in one line naming it (CheckpointFolderBusy).
    owner = CheckpointManager(request.checkpoint_dir) if rank == 0 else None
    if owner is not None:
        # What a writer killed midway left is settled by the run's first transaction, as
        # it reads the pointer, before the run reads its candidates (phase 1, ``Served``);
        # a run with the plan's snapshot reads no state file for it (the daemon recovers
        # at its start and after each run, with the prune's one read).
        owner.claim(f"{request.agent} judged run (agent folder {request.checkpoint_dir})")
    try:
        with recording() as committed:  # what each phase's transaction did, reported
            if world == 1:
                result = _judged_run(plugin, judged, request, committed)
            else:
                judge = partial(_judged_run, plugin, judged, request, committed)
                result = ranked(request, rank, judge, plugin.train)
        return replace(result, transitions=_transitions(committed))
    finally:
        if owner is not None:
            owner.release()


def _transitions(committed: list[Committed]) -> tuple[CommittedChange, ...]:
    """The journal entries the run's transactions committed, oldest first, as the run
    reports them (the daemon's promotion and rollback counters read these)."""
    entries = (e for done in committed for e in done.entries)
    return tuple(CommittedChange(e.seq, e.kind, e.reason) for e in entries)


@dataclass
class JudgedState:
    """One judged run's state, as its phases fill it in: what its transactions committed
    so far (``committed``, oldest first), the served model (1), what the live watch
    found (2), the folder's candidates as phase 3 read them (each meta and
    verdict once, with the verdicts its own transactions wrote since) and what they say
    of a model the watch rolled back (``rolled_back``: the records it knew, asked once
    of them for every verdict the run decides, :func:`~.watch.rolled_back_to`), the
    candidate to train and whether it only finishes (3), or the run's result when there
    is nothing to learn (``done``)."""

    request: TrainRequest
    started: float  # time.monotonic() at the run's start
    committed: list[Committed]
    served: Served
    live: LiveReport | None = None
    candidates: tuple[KeptCandidate, ...] = ()
    rolled_back: np.ndarray | None = None
    candidate: KeptCandidate | None = None
    finishes: bool | None = None
    done: TrainResult | None = None

    @property
    def folder(self) -> Path:
        return Path(self.request.checkpoint_dir)


def _judged_run(
    plugin: AgentPlugin,
    judged: JudgedPlugin,
    request: TrainRequest,
    committed: list[Committed],
    tell: Tell | None = None,
) -> TrainResult:
    """The judged run itself, in four phases over one :class:`JudgedState` (module
    docstring); each phase that changes the lifecycle commits one transaction
    (``agent_folder.transaction``), recorded in ``committed`` as it commits. ``tell``:
    what the other ranks must know (None: alone, none to tell, and the up-to-date result
    is not encoded for them)."""
    state = _served(judged, request, committed)
    _watched(state)
    _candidate(state)
    if state.done is not None:
        if tell is not None:
            tell(("done", state.done.to_json()))
        return state.done
    assert state.candidate is not None
    before = time.monotonic() - state.started  # the served model scored and watched
    if tell is not None:
        tell(("train", (str(state.candidate.path), state.finishes)))
    trained = replace(request, checkpoint_dir=state.candidate.path, finishes=state.finishes)
    return _gated(state, plugin.train(trained), before)


def _served(judged: JudgedPlugin, request: TrainRequest, committed: list[Committed]) -> JudgedState:
    """1. The served model, its pointer read in the run's first transaction (what a
    killed writer left settled; ``Served``), scored on the current records."""
    started = time.monotonic()
    sweep_copies(Path(request.checkpoint_dir))  # a killed run's copies, before any scoring
    return JudgedState(request, started, committed, Served(judged, request))


def _watched(state: JudgedState) -> None:
    """2. The live watch (a transaction when it writes its figures or rolls back); after
    a rollback, the model served again, as the watch's transaction committed it (no
    read of the pointer), scored."""
    served = state.served
    state.live = None if served.pointer is None else watch(state.request, served)
    if state.live is not None and state.live.rolled_back:
        rolled = state.committed[-1]  # the watch's: the rollback its report says it committed
        assert rolled.entries and rolled.entries[-1].kind == "rollback", rolled
        again = Served(served.plugin, state.request, rolled)  # the predecessor
        again.read_seconds += served.read_seconds  # the run's reads of its data, both listings
        state.served = again


def _candidate(state: JudgedState) -> None:
    """3. The candidate to train: one cut short on this same request (finished first,
    whatever is new), else, when there is something to learn, a new one (with the
    served checkpoint, for a resume); else the run's up-to-date result (``done``). The
    folder's candidates are read once, here, and every question of this phase and the
    gate's is asked of them (``state.candidates``)."""
    request, served = state.request, state.served
    digest = _data_digest(request.data_path)  # the data's files: a kept verdict's, the meta's
    meta = _meta(request, served, digest)
    # Read, decide, then one commit: the folder's candidates read once; the candidates cut
    # short that are not continued closed and a kept inconclusive one judged again (issue
    # 62: before training), both decided before anything is written; their verdicts (and
    # a promotion the judging decides) staged in the phase's one transaction.
    taken = decide_unfinished(meta, read_candidates(state.folder))
    state.candidates = taken.candidates
    asks = taken.candidate is None and served.losses is not None and not request.forced
    # What an unforced run may be up to date against, besides the served model.
    last = last_judged(state.candidates, served.id, _pinned(served)) if asks else None
    if served.losses is not None:  # the gate's set ``newest``, for every verdict below
        state.rolled_back = rolled_back_to(state.candidates, served.id)
    kept = _rejudge_kept(state, digest) if asks else None
    rejudged = None
    if taken.closing or kept is not None:
        with transaction(state.folder) as tx:  # the closes first, as they were decided
            taken.stage(tx)
            report = None if kept is None else kept.stage(tx)
        if report is not None and report.outcome != Outcome.INCONCLUSIVE:
            rejudged = report  # decided: no step to train
    if asks:
        learned = None
        if rejudged is None:
            learned = nothing_new(served, request, state.candidates, last)
        if rejudged is not None or learned is not None:
            seconds = time.monotonic() - state.started
            state.done = up_to_date(request, served, seconds, state.live, rejudged, learned)
            return
    # A continued candidate that had ended (killed after its last save, before its
    # verdict) is judged as it is: its run trains no step more (RunSpec.finishes).
    state.finishes = taken.candidate is not None or None
    if taken.candidate is not None:
        state.candidate = next(c for c in state.candidates if c.path == taken.candidate)
        return
    state.candidate = make_candidate(state.folder, meta)
    if served.checkpoint is not None and request.resume:  # the resume continues the served
        copy_checkpoint(served.checkpoint, state.candidate.path)


def _gated(state: JudgedState, result: TrainResult, before: float) -> TrainResult:
    """4. The gate's verdict on the trained candidate (its transaction: the verdict and
    the promotion it decides), and the run's result with it; ``before``: the seconds
    of phases 1-3."""
    assert state.candidate is not None
    gate = _judge(state, result)
    return replace(
        result,
        gate=gate,
        rejected=gate.outcome == Outcome.REJECTED,
        live=state.live,
        phases=judged_phases(
            result.phases, state.served.read_seconds, before + gate.seconds, gate.seconds
        ),
        wall_seconds=round(result.wall_seconds + before + gate.seconds, 6),
    )


def _pinned(served: Served) -> bool:
    """Whether the served model is pinned (a promoted candidate then counts as learned:
    ``candidates.last_judged``)."""
    return served.pointer is not None and served.pointer.pinned is not None


def _meta(request: TrainRequest, served: Served, digest: str) -> CandidateMeta:
    """The candidate's record of what it was trained from (``digest``: the data's)."""
    return CandidateMeta(
        fingerprint=digest,
        records=None if served.losses is None else len(served.records.ids),
        continues=served.id if request.resume else None,
        data_path=None if request.data_path is None else str(request.data_path),
        seed=request.seed,
        options=request.recorded_options(),
    )


def _data_digest(path: Path | None) -> str:
    """What the data files were (their names, sizes and times), hashed: the candidate's
    name says which data it trained on, without reading the data."""
    if path is None:
        return "nodata"
    root = Path(path)
    found = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for file in found:
        info = file.stat()
        digest.update(f"{file}:{info.st_size}:{info.st_mtime_ns};".encode())
    return digest.hexdigest()


def _judge(state: JudgedState, result: TrainResult) -> GateReport:
    """The gate's verdict on the trained candidate, in one direction: scored, decided
    (nothing written), the records it knows written (:func:`_write_known`), then its
    verdict and the promotion it decides, in one transaction."""
    request, served, kept = state.request, state.served, state.candidate
    assert kept is not None
    candidate, started = kept.path, time.monotonic()
    used = result.precision_used  # every verdict below names the run's precision
    checkpoint = newest_checkpoint(candidate)
    if result.stopped_early and result.failure is None and checkpoint is not None:
        why = "not judged yet: stopped before its end; the next run continues it (no verdict)"
        return GateReport(Outcome.UNDECIDED, why, precision=used, candidate_id=candidate.name)
    if result.failure is not None or checkpoint is None:
        why = result.failure_detail or result.failure or "the run wrote no checkpoint"
        return undecided(candidate, checkpoint, f"not judged: {why}", started, used)
    # What it is judged on, as its verdict records it: the data's files as the scoring
    # finds them, and its run's figures reported beside its losses.
    digest, reported = _data_digest(request.data_path), _reported(result.eval)
    with reusing_loads():  # the checkpoint unpickled once: the records it names, scored
        held_out, refusal = held_out_check(request, served, checkpoint)
        if refusal is not None:
            undecided(candidate, checkpoint, refusal, started, used)
            raise TrainRequestError(refusal)
        try:
            losses = losses_of(served.plugin, checkpoint, request, _judged_ids(held_out, served))
        except CheckpointChangedError as exc:  # its own file intact: undecided, never served
            undecided(candidate, checkpoint, str(exc), started, used)
            raise
    scored = (kept, checkpoint, held_out, losses)
    rolled_back = state.rolled_back  # asked of the candidates as phase 3 read them
    decided = decide_scored(request, served, rolled_back, scored, started, used, digest, reported)
    _write_known(state, candidate, losses)  # before the verdict: a served model has them
    with transaction(state.folder) as tx:  # the verdict, and the promotion it decides
        return decided.stage(tx)


def _write_known(state: JudgedState, candidate: Path, losses: RecordLosses) -> None:
    """The records the scored ``candidate`` knows (:func:`_known_after`), written to it
    (``judged_ids.npz``) for the runs that judge against it."""
    served, budget = state.served, state.request.keep_in_memory_bytes
    knows = _known_after(served, losses, budget)
    # The next run's listing begins with these records, every one known to this
    # candidate: kept for its lookup if it serves this one (id_lookups.listed_known, checked)
    listed = losses if served.losses is None else served.records
    stores.write_known_ids(candidate, knows, budget, (LISTED, listed.id_hashes))  # sorted there


def _rejudge_kept(state: JudgedState, digest: str) -> Decided | None:
    """Issue 62: the newest candidate kept ``inconclusive`` against the model still
    served, judged again on the current records when the data (``digest``) changed since,
    before any step is trained: its verdict decided, for the phase's transaction to stage
    (decided, promoted, rejected or held, the run trains nothing; still inconclusive, its
    verdict is updated and the run trains as usual). None: none to judge again. Asked of
    a scored served model's unforced run, of the candidates the phase read."""
    request, served = state.request, state.served
    for kept in reversed(state.candidates):
        candidate, verdict = kept.path, kept.verdict
        if verdict.outcome != Outcome.INCONCLUSIVE:
            continue
        checkpoint = newest_checkpoint(candidate)
        stale = verdict.served_id != served.id or verdict.judged_on == digest
        if stale or checkpoint is None:
            return None
        logger.info("%s: judging kept candidate %s again", request.agent, candidate.name)
        started = time.monotonic()
        held_out, refusal = held_out_check(request, served, checkpoint)
        if refusal is not None:  # kept before its list was read as refused: not judged again
            logger.warning("%s; not judged again", refusal)
            return None
        losses = losses_of(served.plugin, checkpoint, request, _judged_ids(held_out, served))
        said = verdict.candidate  # its run's, as its first verdict kept it
        reported = _reported(None if said is None else said.reported)
        scored = (kept, checkpoint, held_out, losses)
        used = verdict.precision
        rolled_back = state.rolled_back
        return decide_scored(request, served, rolled_back, scored, started, used, digest, reported)
    return None


def _known_after(served: Served, losses: RecordLosses, budget: int | None = None) -> np.ndarray:
    """The records the candidate knows: the served model's, and those of this run's data,
    the ones the served model was scored on before it trained (records that came while
    it trained are new to it: the next run learns them). The first model knows the
    records it was scored on: sorted in an order kept (``budget``: the request's) for
    the next run's listing of them, which begins with them (``id_lookups.ranked``)."""
    if served.losses is None:
        order = id_lookups.ranked(LISTED, losses.id_hashes, budget)
        return losses.id_hashes if order is None else losses.id_hashes[order]
    ids = served.records.id_hashes
    # Those it did not know (``knew``: worked out once, for the data check) merged into
    # those it knew, sorted already: no sort of the whole pool's ids.
    return ids if served.known is None else stores.merged(served.known, ids[~served.knew])


def _judged_ids(held_out: bool, served: Served) -> tuple[str, ...] | ScoreOnly | None:
    """The ids of the records the gate compares the two models on, as the served model's
    scoring found them (the only ones both are scored on; by their rows in its listing
    where it has them: ``Served.judged_asked``): the candidate is scored on these alone;
    None: on every record (a first model, or judged on all)."""
    return None if served.losses is None or not held_out else served.judged_asked


def _reported(figures: Mapping[str, float] | None) -> dict[str, float]:
    """What a run's evaluation (or a kept verdict's ``reported`` scores) reports beside the
    losses: its ``auc`` (se_darwin's), when a finite number."""
    value = finite(figures.get("auc")) if isinstance(figures, Mapping) else None
    return {} if value is None else {"auc": round(value, 6)}
