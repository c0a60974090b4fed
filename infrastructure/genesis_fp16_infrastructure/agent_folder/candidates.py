"""An agent's candidates: one folder per training run beside the served-model pointer,
each with its meta and the gate's verdict; how one is made, listed, read, judged by a
verdict no transition carries (rejected, held, undecided), and turned into the pointer's
entry. The transitions that change what is served are
:mod:`~genesis_fp16_infrastructure.agent_folder.transitions`, their removal
:mod:`~genesis_fp16_infrastructure.agent_folder.prune`.

::

    <checkpoint_dir>/candidates/<id>/    one training run's checkpoints
        candidate.json                   its data (digest, records) and request, when it began
        verdict.json                     the gate's verdict: promoted, rejected, inconclusive, ...
        ckpt-0000000120.pt ...

JSON only, no torch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from genesis_fp16_infrastructure.agent_folder import files, layout, outbox
from genesis_fp16_infrastructure.agent_folder.layout import CANDIDATE_META, VERDICT
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    CandidateMeta,
    Outcome,
    ServedEntry,
    Verdict,
)
from genesis_fp16_infrastructure.agent_folder.pointer import candidates_dir


def new_candidate(folder: Path, meta: Mapping[str, Any]) -> Path:
    """A fresh candidate folder named by the UTC time and the data digest, with its meta."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    digest = str(meta.get("fingerprint", ""))[:8] or "nodata"
    base = candidates_dir(folder) / f"{stamp}-{digest}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    meta = {**meta, "id": path.name, "created_at": utc_now()}
    files.write_json(CANDIDATE_META.at(path), CANDIDATE_META, meta)
    return path


def list_candidates(folder: Path) -> list[Path]:
    """Every candidate folder, oldest first (by the time in its meta, then by when its
    meta was written, then its name)."""
    root = candidates_dir(folder)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and os.path.lexists(CANDIDATE_META.at(p))]
    # An unusable meta is set aside (reported) as it is read; its candidate stays listed.
    # sorted() computes each key once: each meta is read once.
    return sorted(found, key=lambda p: (str(read_meta(p).created_at), _written_ns(p), p.name))


def _written_ns(candidate: Path) -> int:
    """When the candidate's meta was written, in ns: the meta's time is in whole seconds,
    and two fast runs make two candidates in one second (written once, at creation)."""
    try:
        return os.lstat(CANDIDATE_META.at(candidate)).st_mtime_ns
    except OSError:  # set aside as it was read: listed by its time and name alone
        return 0


def read_verdict(candidate: Path) -> Verdict:
    """The candidate's verdict; one without an outcome (``Verdict()``) while it has none
    (training), or when its file is unusable: set aside and reported (agent_folder.files)."""
    found = files.load(VERDICT.at(candidate), VERDICT, Verdict.from_json)
    return Verdict() if found is None else found


def read_meta(candidate: Path) -> CandidateMeta:
    """The candidate's meta (its data and request); empty when absent or unusable (set
    aside and reported, as :func:`read_verdict`)."""
    found = files.load(CANDIDATE_META.at(candidate), CANDIDATE_META, CandidateMeta.from_json)
    return CandidateMeta() if found is None else found


def write_verdict(candidate: Path, verdict: Mapping[str, Any]) -> None:
    """A verdict no transition of the pointer carries (rejected, held, undecided), then a
    rejection's or hold's event (staged before it: ``outbox.verdict_announced``).
    A promotion's and a rollback's go through the pointer (serve, rollback)."""
    decided = stamped(verdict)
    with outbox.verdict_announced(candidate, decided):  # in the outbox before it is logged
        files.write_json(VERDICT.at(candidate), VERDICT, decided)


def stamped(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """``verdict`` as a decision made now (its time), without a journal number."""
    kept = {k: v for k, v in verdict.items() if k != "journal_seq"}
    return {**kept, "decided_at": utc_now(), "decided_at_s": time.time()}


def newest_checkpoint(candidate: Path) -> Path | None:
    """The candidate's last checkpoint file (its served weights inside), or None."""
    return max(layout.list_checkpoints(Path(candidate)), default=None)


def candidate_entry(
    folder: Path, candidate: Path, checkpoint: Path, verdict: Verdict | None = None
) -> ServedEntry:
    """The pointer's entry for a candidate: its id, checkpoint (relative to ``folder``),
    data, precision and gate scores, from its meta and ``verdict`` (None: its verdict
    file's)."""
    meta = read_meta(candidate)
    judged = read_verdict(candidate) if verdict is None else verdict
    return ServedEntry(
        id=Path(candidate).name,
        checkpoint=str(Path(checkpoint).resolve().relative_to(Path(folder).resolve())),
        fingerprint=meta.fingerprint,
        records=meta.records,
        precision=judged.precision,
        scores=judged.candidate or {},
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


def utc_now() -> str:
    """Now, in UTC, as every record of the owner writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
