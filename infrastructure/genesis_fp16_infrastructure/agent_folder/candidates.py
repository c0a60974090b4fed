"""An agent's candidates: one folder per training run beside the served-model pointer,
each with its meta and the gate's verdict; how one is made, listed, read, judged by a
verdict no transition carries (rejected, held, undecided), turned into the pointer's
entry, and pruned. The transitions that change what is served are
:mod:`~genesis_fp16_infrastructure.agent_folder.transitions`.

::

    <checkpoint_dir>/candidates/<id>/    one training run's checkpoints
        candidate.json                   its data (digest, records) and request, when it began
        verdict.json                     the gate's verdict: promoted, rejected, inconclusive, ...
        data_manifest.json               the data files its run read (a plugin that keeps one)
        ckpt-0000000120.pt ...

Pruning (:func:`prune`): the candidates nobody may still name (neither served nor kept in
the pointer's history, nor a verdict the journal decided and its file does not say yet)
are removed, each by one rename out of ``candidates/``; the pointer's history is trimmed
to the last ``keep_served`` models (a ``trim`` transition).

The data manifest (``data_manifest.json``), kept beside a served model's checkpoint, says
what its run read, for a later run's plan to call the same files up to date without parsing
them (a plugin that keeps one: the retrain recipe's freshness writes and reads it). The
judged run renews it when it finds nothing new after reading (:func:`renew_data_manifest`):
the files changed (a copy, a quarantined file dropped in) but the served model knew every
record, so the next plan answers from the manifest instead of reading them again.

JSON only, no torch.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec

from genesis_fp16_infrastructure.agent_folder import files, layout
from genesis_fp16_infrastructure.agent_folder.files import last_write
from genesis_fp16_infrastructure.agent_folder.kept_record import Json, KeptRecord
from genesis_fp16_infrastructure.agent_folder.layout import (
    CANDIDATE_META,
    CANDIDATES_FOLDER,
    DATA_MANIFEST,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    CandidateMeta,
    Outcome,
    ServedEntry,
    ServedPointer,
    Verdict,
    read_verdict,
    utc_now,
)
from genesis_fp16_infrastructure.agent_folder.transaction import transaction
from genesis_fp16_infrastructure.agent_folder.transaction import (
    write_verdict as write_verdict,
)

UNFINISHED_MIN_DAYS = 1.0  # an unfinished candidate untouched this long is pruned
# Inconclusive candidates (issue 62: judged again as records arrive) kept whatever their
# age: the newest two; an older one is pruned as a rejected one is.
INCONCLUSIVE_KEEP = 2
MANIFEST_VERSION = 1


def new_candidate(folder: Path, meta: CandidateMeta | Mapping[str, Json]) -> Path:
    """A fresh candidate folder named by the UTC time and the data digest, with its meta
    (the record, or its JSON: ``ValueError`` in one line when it is not one)."""
    if not isinstance(meta, CandidateMeta):
        meta = CandidateMeta.from_json(meta)
    return make_candidate(folder, meta).path


def make_candidate(folder: Path, meta: CandidateMeta) -> KeptCandidate:
    """A fresh candidate (:func:`new_candidate`), as its meta was written: no verdict yet."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    digest = (meta.fingerprint or "")[:8] or "nodata"
    base = Path(folder) / CANDIDATES_FOLDER / f"{stamp}-{digest}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    named = msgspec.structs.replace(meta, id=path.name, created_at=utc_now())
    files.write_json(CANDIDATE_META.at(path), CANDIDATE_META, named.to_json())
    return KeptCandidate(path, named, Verdict())


def list_candidates(folder: Path) -> list[Path]:
    """Every candidate folder, oldest first (by the time in its meta, then by when its
    meta was written, then its name)."""
    return [path for path, _ in _listed(folder)]


@dataclass(frozen=True)
class KeptCandidate:
    """A candidate as one read of the folder found it: its folder, meta and verdict
    (``Verdict()`` while it has none). A judged run's phase reads them once
    (:func:`read_candidates`) and asks every question of the same records; a verdict its
    own transaction staged since is :meth:`decided` in place of the one read."""

    path: Path
    meta: CandidateMeta
    verdict: Verdict

    @property
    def name(self) -> str:
        return self.path.name

    def decided(self, verdict: Verdict) -> KeptCandidate:
        """This candidate with ``verdict``, as its transaction wrote it."""
        return replace(self, verdict=verdict)


def read_candidates(folder: Path) -> tuple[KeptCandidate, ...]:
    """Every candidate of ``folder``, oldest first (:func:`list_candidates`' order), each
    meta and verdict read once (an unusable one set aside and reported, read as empty)."""
    return tuple(KeptCandidate(path, meta, read_verdict(path)) for path, meta in _listed(folder))


def last_judged(
    candidates: Sequence[KeptCandidate], served_id: str | None, pinned: bool
) -> Path | None:
    """The newest candidate that continued ``served_id`` and was judged, when its records
    count as learned for the served model: it was not served (rejected, held,
    inconclusive, undecided, rolled back), or the served model is pinned (a promoted one
    was served, and a pin is never undone by training the same data again); None when
    the newest such candidate was promoted and no pin holds, or there is none.
    ``candidates``: the folder's, as the caller read them (a judged run's phase, the
    plan's data check): no read here."""
    for candidate in reversed(candidates):
        outcome = candidate.verdict.outcome
        if candidate.meta.continues != served_id or outcome is None:
            continue
        return candidate.path if outcome != Outcome.PROMOTED or pinned else None
    return None


def _listed(folder: Path) -> list[tuple[Path, CandidateMeta]]:
    """Every candidate folder with its meta, oldest first (:func:`list_candidates`)."""
    root = Path(folder) / CANDIDATES_FOLDER
    if not root.is_dir():
        return []
    # Each candidate's meta file named once: whether it is there, its record, its time.
    named = [(p, CANDIDATE_META.at(p)) for p in root.iterdir() if p.is_dir()]
    # An unusable meta is set aside (reported) as it is read; its candidate stays listed,
    # by its time and name alone (its meta's time read after: 0 once set aside).
    metas = [(p, _meta_in(meta), _written_ns(meta)) for p, meta in named if os.path.lexists(meta)]
    metas.sort(key=lambda m: (str(m[1].created_at), m[2], m[0].name))
    return [(path, meta) for path, meta, _ in metas]


def _written_ns(meta: Path) -> int:
    """When the candidate's meta (``meta``: its file) was written, in ns: the meta's time
    is in whole seconds, and two fast runs make two candidates in one second (written
    once, at creation)."""
    try:
        return os.lstat(meta).st_mtime_ns
    except OSError:  # set aside as it was read: listed by its time and name alone
        return 0


def read_meta(candidate: Path) -> CandidateMeta:
    """The candidate's meta (its data and request); empty when absent or unusable (set
    aside and reported, as :func:`read_verdict`)."""
    return _meta_in(CANDIDATE_META.at(candidate))


def _meta_in(path: Path) -> CandidateMeta:
    """The meta file at ``path`` (:func:`read_meta`)."""
    found = files.load(path, CANDIDATE_META, CandidateMeta.from_json)
    return CandidateMeta() if found is None else found


def newest_checkpoint(candidate: Path) -> Path | None:
    """The candidate's last checkpoint file (its served weights inside), or None."""
    return max(layout.list_checkpoints(Path(candidate)), default=None)


def candidate_entry(
    folder: Path,
    candidate: Path,
    checkpoint: Path,
    verdict: Verdict | None = None,
    meta: CandidateMeta | None = None,
) -> ServedEntry:
    """The pointer's entry for a candidate: its id, checkpoint (relative to ``folder``),
    data, precision and gate scores, from its ``meta`` and ``verdict`` (None: its files',
    read now)."""
    meta = read_meta(candidate) if meta is None else meta
    judged = read_verdict(candidate) if verdict is None else verdict
    return ServedEntry(
        id=Path(candidate).name,
        checkpoint=str(Path(checkpoint).resolve().relative_to(Path(folder).resolve())),
        fingerprint=meta.fingerprint,
        records=meta.records,
        precision=judged.precision,
        scores=judged.candidate,
        trained_at=meta.created_at,
    )


def promoted_candidates(folder: Path) -> list[ServedEntry]:
    """Pointer entries of the candidates the gate promoted whose checkpoint is intact,
    newest decision first: what a repair rebuilds the served model and history from."""
    found = []
    for candidate in list_candidates(folder):
        verdict = read_verdict(candidate)  # read once, for the entry too
        if verdict.outcome == Outcome.PROMOTED and newest_checkpoint(candidate) is not None:
            found.append((verdict.decided_at_s or 0.0, served_entry(folder, candidate, verdict)))
    return [entry for _, entry in sorted(found, key=lambda pair: -pair[0]) if entry is not None]


def served_entry(
    folder: Path, candidate: Path, verdict: Verdict | None = None
) -> ServedEntry | None:
    """A kept candidate's pointer entry, from its own records (``verdict``: its verdict,
    when read already): the checkpoint its verdict names (the newest file where the
    verdict names none: written before it did), and for final_fit=whole the split run's
    model the gate judged. None: it holds no checkpoint."""
    verdict = read_verdict(candidate) if verdict is None else verdict
    named = Path(candidate) / (verdict.checkpoint or "-")
    checkpoint = named if named.is_file() else newest_checkpoint(candidate)
    if checkpoint is None:
        return None
    entry = candidate_entry(folder, candidate, checkpoint, verdict)
    split = Path(candidate) / "split"
    judged = newest_checkpoint(split) if split.is_dir() else None
    if judged is None:
        return entry
    return msgspec.structs.replace(
        entry, judged=str(judged.resolve().relative_to(Path(folder).resolve()))
    )


def prune(
    folder: Path, keep_served: int, rejected_days: float, recover_first: bool = False
) -> tuple[list[Path], ServedPointer | None]:
    """Remove candidates neither served nor among the last ``keep_served`` served:
    rejected, undecided or inconclusive ones (but the newest ``INCONCLUSIVE_KEEP``
    inconclusive) older than ``rejected_days``, unfinished ones (no verdict) untouched
    for ``rejected_days`` and ``UNFINISHED_MIN_DAYS`` (a run cut short by its timeout
    every hour must find its candidate next time). Returns what was removed, and the
    pointer as it stands after (None: nothing served), read once in the same
    transaction: the daemon reads from it the changes no run reported, without a second read.
    ``recover_first``: :func:`~.transitions.recover`'s work first, on that same read (the
    daemon's after each run: what the run, killed or not, left to finish)."""
    with transaction(folder, settle=recover_first) as tx:  # nothing served meanwhile is removed
        pointer = tx.trim(keep_served)
        verdicts = {c: tx.verdict_of(c) for c in list_candidates(folder)}  # each read once
        inconclusive = [c.name for c, v in verdicts.items() if v.outcome == Outcome.INCONCLUSIVE]
        kept_ids = set(inconclusive[-INCONCLUSIVE_KEEP:])
        if pointer is not None:
            kept_ids |= {str(e.id) for e in [pointer.served, *pointer.history]}
            kept_ids |= set(tx.disagreeing(pointer))  # a verdict not yet rolled forward
        cutoff, now = time.time() - rejected_days * 86400, time.time()
        stale = [  # an up-to-date run killed mid-eval
            p
            for p in Path(folder).glob(".up-to-date-*")
            if p.is_dir() and last_write(p) < now - UNFINISHED_MIN_DAYS * 86400
        ]
        removed = [
            candidate
            for candidate, verdict in verdicts.items()
            if candidate.name not in kept_ids and _prunable(candidate, verdict, pointer, cutoff)
        ]
        tx.prune(removed, stale)
    return removed, pointer


def _prunable(
    candidate: Path, verdict: Verdict, pointer: ServedPointer | None, cutoff: float
) -> bool:
    """Whether nobody may still name ``candidate`` (neither served nor kept in history:
    the caller's check), whose verdict is ``verdict``: promoted and replaced, decided long
    ago, or unfinished and untouched. With no pointer at all a promoted one stays: a
    repair serves it again."""
    if verdict.outcome is None:  # unfinished and recent: the next run of its data resumes it
        return last_write(candidate) <= min(cutoff, time.time() - UNFINISHED_MIN_DAYS * 86400)
    if verdict.outcome == Outcome.PROMOTED:
        return pointer is not None
    return (verdict.decided_at_s or 0.0) <= cutoff  # a recent one kept for inspection


class RecordedCheckpoint(msgspec.Struct, frozen=True):
    """The checkpoint a data manifest vouches for, as its run left it (``os.stat``)."""

    path: str
    size: int
    mtime_ns: int


class DataManifestRecord(KeptRecord):
    """``data_manifest.json``, this version's: the request that asked for the run
    (``request``: agent, options, seed), its checkpoint, the data files it read
    (``manifest``: ``data.manifest.Manifest``'s saved JSON, read by its own
    ``from_json``) and its ``train --json`` result (``result``, a JSON object the reader
    decodes as ``TrainResult``). Every field is required: a record missing one, or with
    one of another type, is refused in one line and the file set aside (``files.load``);
    any other key is kept as read (``extra``) and written back::

        >>> r = DataManifestRecord.from_json({"version": 1, "request": {"seed": 0},
        ...     "checkpoint": {"path": "c.pt", "size": 1, "mtime_ns": 2},
        ...     "manifest": {"files": []}, "result": {"steps": 3}})
        >>> r.checkpoint.size, r.result["steps"]
        (1, 3)
        >>> DataManifestRecord.from_json({"version": 1, "request": {}})
        Traceback (most recent call last):
        ...
        ValueError: DataManifestRecord: Object missing required field `checkpoint`
    """

    version: int
    request: dict[str, Json]
    checkpoint: RecordedCheckpoint
    manifest: dict[str, Json]
    result: dict[str, Json]

    def vouching_for(self, manifest: Mapping[str, Json]) -> DataManifestRecord:
        """This record, vouching for the data files as ``manifest`` saves them now."""
        return msgspec.structs.replace(self, manifest=dict(manifest))


def read_data_manifest(folder: Path) -> DataManifestRecord | None:
    """The folder's record; None when absent, of another version, or unusable (set aside
    as ``data_manifest.json.unusable-*`` and reported: the run reads the pool)."""
    return files.load(DATA_MANIFEST.at(folder), DATA_MANIFEST, _data_manifest)


def _data_manifest(data: Json) -> DataManifestRecord | None:
    """A data manifest's record of this version (None for another: never set aside); one
    that does not fit raises ValueError and the file is set aside (``files.load``): a
    record with no result once failed the plan's check with a KeyError."""
    if not isinstance(data, dict):
        raise TypeError(f"a JSON {type(data).__name__}, not an object")
    if data.get("version") != MANIFEST_VERSION:
        return None
    return DataManifestRecord.from_json(data)


def write_data_manifest(folder: Path, record: DataManifestRecord) -> None:
    text = json.dumps(record.to_json(), sort_keys=True)
    files.write_bytes(DATA_MANIFEST.at(folder), DATA_MANIFEST, text.encode("utf-8"))


def renew_data_manifest(checkpoint: Path, manifest: Mapping[str, Json]) -> bool:
    """The record beside ``checkpoint`` now vouches for ``manifest`` (the files as this
    run's plan scanned them), when it is that checkpoint's record; False when there is
    none to renew."""
    folder = Path(checkpoint).parent
    record = read_data_manifest(folder)
    if record is None:
        return False
    if Path(record.checkpoint.path).resolve() != Path(checkpoint).resolve():
        return False
    write_data_manifest(folder, record.vouching_for(manifest))
    return True
