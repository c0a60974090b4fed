"""Up to date without a parse: the served model's data manifest, kept beside it.

A finished SE-Darwin run writes ``data_manifest.json`` into its candidate's folder: the
data files it read (size, mtime, content digest: ``genesis_fp16_infrastructure.data.manifest``),
the request that asked for it (agent, options, seed), the candidate's checkpoint (path,
size, mtime) and its ``train --json`` result. A later run's plan asks :func:`check_data`
once, which reads the record beside the served checkpoint (the pointer's); when the
request is the same, the served checkpoint is the one recorded (the candidate was
promoted, and is still served) and the data files hold the same bytes (by digest, format
and read order, whatever their names: ``Manifest.same_content``), the run ends
``up_to_date`` at once: no record parsed,
no task built, no torch tensor made, and the daemon starts no child for it
(``genesis_fp16/jobs/agent_job.py``). Anything else (no manifest, another request, a file
added, removed or changed, a checkpoint written since) returns None and the run reads
the pool as before, where the data fingerprint decides (a file rewritten with other
bytes but the same records is still up to date there, and its manifest is renewed).

    check = check_data(request)  # check.scan: the files as the run reads them
    if check.up_to_date is not None:
        return check.up_to_date  # the served model's stored eval, steps 0, up_to_date
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from genesis_fp16_infrastructure.agent_folder import candidates
from genesis_fp16_infrastructure.agent_folder.candidates import (
    DataManifestRecord,
    RecordedCheckpoint,
)
from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.layout import RECORD_CACHE_FOLDER
from genesis_fp16_infrastructure.agent_folder.pointer import (
    ServedPointer,
    checkpoint_of,
    read_pointer,
)
from genesis_fp16_infrastructure.contract.agent_snapshot import DataCheck
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.manifest import RACY_NS, Manifest, ScanReport, scan_files
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.errors import DataError, ServedPointerError
from genesis_fp16_infrastructure.judging.unfinished import unfinished_candidates
from genesis_fp16_infrastructure.kept_in_memory import process_memory
from genesis_fp16_infrastructure.record_codec import ReportError

logger = logging.getLogger(__name__)


def record_cache(request: TrainRequest, manifest: Manifest | None) -> RecordCache | None:
    """The per-file record cache of this agent's state folder, for the files ``manifest``
    vouches for (genesis_fp16_infrastructure.data.record_cache); its stale entries pruned. None
    without a manifest (under torchrun: each rank reads the pool itself)."""
    if manifest is None:
        return None
    folder = Path(request.state_dir) / RECORD_CACHE_FOLDER / request.agent
    # A resident run process's memory keeps what this read takes (kept_in_memory)
    cache = RecordCache(folder, manifest, process_memory(request.keep_in_memory_bytes or 0))
    cache.prune()  # entries of bytes no current file holds: a rewritten or removed file
    return cache


def save_record(
    request: TrainRequest, manifest: Manifest | None, result: TrainResult, trained: Path | None
) -> None:
    """Keep what the next run needs to know nothing changed, in the candidate's folder
    beside its checkpoint ``trained``: read only while that checkpoint is served. A run
    that ended (not stopped) records, whatever its budget: a budget sizes a run on new
    data, and the same data is up to date after it."""
    if manifest is None or trained is None or result.stopped_early:
        return
    checkpoint = Path(trained)
    stat = os.stat(checkpoint)
    record = DataManifestRecord(
        version=candidates.MANIFEST_VERSION,
        request=request_key(request),
        checkpoint=RecordedCheckpoint(str(checkpoint), stat.st_size, stat.st_mtime_ns),
        manifest=manifest.to_json(prefixes=False),
        # The live watch's report is this run's: an up-to-date run never reports it again.
        result={**result.to_json(), "live": None},
    )
    candidates.write_data_manifest(Path(request.checkpoint_dir), record)


def check_data(request: TrainRequest) -> DataCheck:
    """The data files scanned once, before the run reads them (a file written during the
    read then differs from the scan, and the next run looks again), and the up-to-date
    verdict they give: a result when nothing changed since the served model's run, else
    None (the run then reads the pool and decides in full). Costs a stat per data file, a
    hash of those whose size or mtime moved (the record's digests vouch for the rest),
    and one small JSON file; never imports torch. The served-model pointer is the
    request's snapshot's when it has one (read once by the plan), else read here."""
    start = time.perf_counter()
    if request.data_path is None:
        return DataCheck(None)
    pointer, served = _served(request)
    folder = None if served is None else served.parent
    record = None if folder is None else candidates.read_data_manifest(folder)
    before = Manifest.from_json(record.manifest) if record is not None else None
    try:
        manifest, report = scan_files(Path(request.data_path), before)
    except DataError:
        return DataCheck(None)  # the read that follows reports a missing path or an empty folder
    logger.info(
        "data manifest: %d file(s), %d hashed (%d bytes), %d unchanged by size and mtime",
        len(manifest.files),
        report.hashed,
        report.hashed_bytes,
        report.reused,
    )
    if record is None or not _may_be_up_to_date(request, record, served):
        return DataCheck(manifest)
    judged, stored = None, record.result
    if not manifest.same_content(before):
        found = _read_by_the_last_judged(request, pointer, manifest)
        if found is not None:  # its data report: the records as they are now
            judged, stored = found[0], {**stored, "data": found[1].get("data")}
        else:
            logger.info(
                "data manifest: the files changed (%s); the run reads the data, its records decide",
                files_changed(before, manifest),
            )
            return DataCheck(manifest)
    if (report.hashed or judged) and folder is not None:  # trust these files next time
        candidates.write_data_manifest(
            folder, record.vouching_for(manifest.to_json(prefixes=False))
        )
    seconds = time.perf_counter() - start
    why = judged or _unchanged(len(manifest.files), report.hashed, _racy(before, manifest, report))
    logger.info("%s: up to date by the data manifest, %s: no step to take", request.agent, why)
    try:
        verdict = _up_to_date_result(request, stored, seconds, report.hashed, why)
    except ReportError as exc:  # kept by an older version, or damaged: read the pool
        logger.warning("data manifest: its result is unreadable (%s); the run reads the pool", exc)
        return DataCheck(manifest)
    return DataCheck(manifest, verdict.to_json())


def _read_by_the_last_judged(
    request: TrainRequest, pointer: ServedPointer | None, manifest: Manifest
) -> tuple[str, Mapping[str, Json]] | None:
    """Why the files are nothing new although the served model's run read others: they
    hold the bytes the newest candidate judged against the served model read, and that
    candidate was not served (rejected, held, inconclusive, rolled back) or a pin holds
    the served model (the operator rolled back from it). The judged run would score the
    pool only to find every record learned or judged already (``judging.run``, its
    nothing-new rule): the plan answers instead, and no child starts. None: another
    candidate, other bytes, another request, or a forced run. With the why, that
    candidate's recorded result (its data report counts the records as they are)."""
    if request.forced:
        return None  # a forced run trains all the same
    if pointer is None:
        return None
    folder = Path(request.checkpoint_dir)
    kept = candidates.read_candidates(folder)
    last = candidates.last_judged(kept, str(pointer.served.id), pointer.pinned is not None)
    record = None if last is None else candidates.read_data_manifest(last)
    if last is None or record is None or not same_request(record.request, request_key(request)):
        return None
    if not manifest.same_content(Manifest.from_json(record.manifest)):
        return None
    return (
        f"nothing new: the {len(manifest.files)} data file(s) hold the bytes candidate "
        f"{last.name} was trained and judged on (it is not the served model)"
        + (" (the served model is pinned)" if pointer.pinned is not None else ""),
        record.result,
    )


def _racy(before: Manifest | None, after: Manifest, report: ScanReport) -> int:
    """The files hashed again that nobody touched: their size, mtime, ctime, inode and
    bytes are what the last scan saw, and they were hashed only because they were
    written within ``RACY_NS`` of it (an mtime that close cannot vouch for the bytes)."""
    old = {f.path: f for f in before.files} if before is not None else {}
    unmoved = sum(old.get(f.path) == f for f in after.files)  # FileState's six fields
    return unmoved - report.reused


def _unchanged(files: int, hashed: int, racy: int = 0) -> str:
    """Why a manifest says up to date, for the run's outcome (``last_run``, ``status``):
    of the files ``hashed`` again, which were touched or rewritten and which (``racy``)
    only written moments before the last scan.

    >>> _unchanged(2, 2, racy=1).split(" (")[1]
    '2 hashed again: 1 touched or rewritten; 1 untouched, written within 2 s before the last scan, too soon to trust its mtime)'
    """  # noqa: E501
    if not hashed:
        return f"nothing new: the {files} data file(s) are unchanged"
    why = [f"{hashed - racy} touched or rewritten"] if hashed > racy else []
    if racy:
        why.append(
            f"{racy} untouched, written within {RACY_NS // 10**9} s before the last scan, "
            "too soon to trust its mtime"
        )
    return (
        f"nothing new: the {files} data file(s) hold the bytes the served model's run "
        f"read ({hashed} hashed again: {'; '.join(why)})"
    )


def files_changed(before: Manifest | None, after: Manifest, named: int = 3) -> str:
    """Which files were added, removed or changed from ``before`` to ``after``, the first
    ``named`` of each by name, for the log line that sends the run to read them.

    >>> from genesis_fp16_infrastructure.data.manifest import FileState
    >>> old = Manifest((FileState("d/a.json", 1, 1, "x"),), 0)
    >>> touched, dropped = FileState("d/a.json", 1, 2, "x"), FileState("d/b.jsonl", 1, 1, "y")
    >>> files_changed(old, Manifest((touched, dropped), 0))
    '1 added: b.jsonl'
    """
    old = {f.path: f.digest for f in before.files} if before is not None else {}
    new = {f.path: f.digest for f in after.files}
    parts = []
    for label, paths in (
        ("added", sorted(new.keys() - old.keys())),
        ("removed", sorted(old.keys() - new.keys())),
        ("changed", sorted(p for p in new.keys() & old.keys() if new[p] != old[p])),
    ):
        if paths:
            names = ", ".join(Path(p).name for p in paths[:named])
            more = f" (+{len(paths) - named} more)" if len(paths) > named else ""
            parts.append(f"{len(paths)} {label}: {names}{more}")
    return "; ".join(parts) or "none"


def _may_be_up_to_date(
    request: TrainRequest, record: DataManifestRecord, served: Path | None
) -> bool:
    """The record answers for this run: it resumes, is not a forced budget, asks what the
    recorded run asked, the served checkpoint (the pointer's) is the recorded one, and no
    candidate was cut short (the judged run continues it, or closes it)."""
    if not request.resume:
        return False
    if request.forced and (request.steps is not None or request.epochs is not None):
        return False  # a forced run trains its budget on unchanged data too
    if not same_request(record.request, request_key(request)):
        logger.info("data manifest: recorded for another request; the run reads the pool")
        return False
    if not _served_checkpoint_unchanged(record.checkpoint, served):
        logger.info("data manifest: the served checkpoint changed since; the run reads the pool")
        return False
    if unfinished_candidates(Path(request.checkpoint_dir)):  # judging.unfinished's to decide
        logger.info("data manifest: a candidate cut short waits to be continued; the run reads")
        return False
    return True


def request_key(request: TrainRequest) -> dict[str, Json]:
    """What a recorded run must share with this one: agent, options and seed. Not the
    data path: the records decide (their fingerprint; the manifest lists the files by
    path), so the same records read from a folder instead of its one file, or from a
    path moved, are up to date, and a file dropped into the folder is a change only when
    it brings a record the served model has not seen."""
    return {"agent": request.agent, "options": request.recorded_options(), "seed": request.seed}


def same_request(recorded: Json, key: Mapping[str, Json]) -> bool:
    """Whether a recorded request (a manifest's, a candidate's) is ``key``: a record
    written when the key held the data path is compared without it.

    >>> key = {"agent": "se_darwin", "options": {}, "seed": 0}
    >>> same_request({**key, "data_path": "/state/agents/se_darwin/data/pool.json"}, key)
    True
    >>> same_request({**key, "seed": 1}, key)
    False
    """
    if not isinstance(recorded, Mapping):
        return False
    return {k: v for k, v in recorded.items() if k != "data_path"} == dict(key)


def _up_to_date_result(
    request: TrainRequest, stored: Mapping[str, Json], seconds: float, hashed: int, why: str
) -> TrainResult:
    served = TrainResult.from_json(stored)
    data = served.data
    if data is not None:
        data = dataclasses.replace(
            data,
            change="unchanged",
            previous_records=data.records,
            new=0,
            removed=0,
            relabelled=0,
            checked_by="manifest",
            files_hashed=hashed,
        )
    # The trained run's measurements, not this one's: its peak memory by phase, its
    # record cache's counts (and its calibration, below); and the copies of the typed
    # fields a record kept before issue 53.
    dropped = ("peak_rss_mib", "record_cache", *_COPIES)
    extra = {k: v for k, v in served.extra.items() if k not in dropped}
    # The precision the settings ask now: the served model's run asked its own (a
    # rollback to fp32 since must not read "up_to_date in bf16", for the old reason).
    return dataclasses.replace(
        served,
        precision_requested=request.precision.requested,
        precision_used=request.precision.without_steps(served.precision_used),
        precision_reason=f"{request.precision_reason}; up to date, no step taken "
        f"(the served model was trained in {served.precision_used})",
        steps=0,
        skipped_steps=0,
        samples_per_second=0.0,
        wall_seconds=seconds,
        stopped_early=False,
        demotions=(),
        up_to_date=True,
        up_to_date_against=why,  # the run's outcome says why (last_run, `status`)
        extra=extra,
        data=data,
        # The trained run's drift is its own, of the records new to it: a run that found
        # nothing new measured none (a judged run's up_to_date reports none either), and
        # the page and the drift gauges must not count it again.
        drift=None,
        phases={"check": round(seconds, 6)},
        precision_calibration=None,
    )


_COPIES = ("data", "phases", "gate", "drift", "early_stop", "precision_calibration")


def _served(request: TrainRequest) -> tuple[ServedPointer | None, Path | None]:
    """The served-model pointer, as the plan read it (the request's snapshot) or now, and
    the checkpoint it names; None for either when there is none or it is unusable (the
    run reads the pool, and reports it)."""
    folder, snapshot, pointer = Path(request.checkpoint_dir), request.snapshot, None
    try:  # a snapshot's pointer is None where it cannot be followed (its pointer_error)
        pointer = read_pointer(folder) if snapshot is None else snapshot.pointer
        return pointer, None if pointer is None else checkpoint_of(folder, pointer)
    except (OSError, ServedPointerError):
        return pointer, None


def _served_checkpoint_unchanged(recorded: RecordedCheckpoint, served: Path | None) -> bool:
    """The recorded checkpoint is still there, unchanged, and still the one the
    served-model pointer names (agent_folder.transitions; a promotion, a rollback or an
    unreadable pointer: the run reads the pool)."""
    path = Path(recorded.path)
    try:
        stat = os.stat(path)
    except OSError:
        return False
    if (stat.st_size, stat.st_mtime_ns) != (recorded.size, recorded.mtime_ns):
        return False
    return served is not None and served.resolve() == path.resolve()
