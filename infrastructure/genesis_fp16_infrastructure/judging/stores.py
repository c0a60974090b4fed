"""What a judged run keeps in a candidate's folder, as numpy arrays through the agent
folder's bounded reader and atomic writer (agent_folder.files):

* ``judged_ids.npz``: the sorted hashes of the record ids the model was trained or judged
  on (the ones it *knew*): the live watch scores only records that neither the served
  model nor its predecessor knew, and a run whose records the served model all knew has
  nothing to learn;
* ``judged-live-<predecessor id>.npz``: the live watch's records in arrival order (id
  hashes, segments, and per loss column ``served/<metric>`` and ``previous/<metric>``,
  NaN where a record was not scored on that column), so each record counts once.

An id is hashed to 64 bits by :func:`~.split.id_hashes`, the held-out split's hash too. A
file that cannot be read is set aside and reported (agent_folder.files); the reader then
goes on as if there were none.

>>> ids = np.array([7, 3], dtype=np.uint64)
>>> bool(known(ids, np.sort(ids)).all())
True
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.candidates import (
    list_candidates,
    read_meta,
    read_verdict,
)
from genesis_fp16_infrastructure.agent_folder.layout import JUDGED_IDS, JUDGED_WATCH, StateFile
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Outcome
from genesis_fp16_infrastructure.data.schema import find_ids
from genesis_fp16_infrastructure.judging.split import sorted_unique

# A watch record's segment (the plugin's RecordLosses.segments: se_darwin's Genesis agent),
# cut to this many characters; "" where the plugin declares none, or a store written
# before segments were kept.
SEGMENT_CHARS = 64


def known(ids: np.ndarray, sorted_known: np.ndarray) -> np.ndarray:
    """Which of ``ids`` are in ``sorted_known`` (sorted): a boolean per id."""
    return find_ids(sorted_known, ids)[1]


def last_judged(folder: Path, served_id: str | None, pinned: bool) -> Path | None:
    """The newest candidate that continued ``served_id`` and was judged, when its records
    count as learned for the served model: it was not served (rejected, held,
    inconclusive, undecided, rolled back), or the served model is pinned (a promoted one
    was served, and a pin is never undone by training the same data again); None when
    the newest such candidate was promoted and no pin holds, or there is none."""
    for candidate in reversed(list_candidates(folder)):
        outcome = read_verdict(candidate).outcome
        if read_meta(candidate).continues != served_id or outcome is None:
            continue
        return candidate if outcome != Outcome.PROMOTED or pinned else None
    return None


def read_known_ids(candidate: Path) -> np.ndarray | None:
    """The ids the candidate's model knew (sorted hashes); None: no file, or unusable."""
    arrays = _read(JUDGED_IDS.at(candidate), JUDGED_IDS)
    return None if arrays is None else np.sort(arrays["ids"].astype(np.uint64))


def write_known_ids(candidate: Path, ids: np.ndarray) -> None:
    _write(JUDGED_IDS.at(candidate), JUDGED_IDS, {"ids": sorted_unique(ids.astype(np.uint64))})


def read_watch(path: Path, primary: str) -> dict[str, np.ndarray]:
    """The watch's records so far (none: absent, or unusable and set aside); a store
    written before loss columns (``served``, ``previous``: the column watched then) as
    column ``primary``'s, one before segments with every record unsegmented."""
    arrays = _read(path, JUDGED_WATCH) or {"ids": np.zeros(0, dtype=np.uint64)}
    for side in ("served", "previous"):
        if side in arrays:
            arrays[f"{side}/{primary}"] = arrays.pop(side)
    arrays.setdefault("segments", np.full(len(arrays["ids"]), "", dtype="<U1"))
    return arrays


def extend_watch(
    kept: Mapping[str, np.ndarray], new: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """``kept``'s records, then ``new``'s; a column one side lacks is NaN there."""

    def part(arrays: Mapping[str, np.ndarray], name: str) -> np.ndarray:
        return arrays[name] if name in arrays else np.full(len(arrays["ids"]), np.nan)

    return {k: np.concatenate([part(kept, k), part(new, k)]) for k in {**kept, **new}}


def write_watch(path: Path, kept: Mapping[str, np.ndarray]) -> None:
    _write(path, JUDGED_WATCH, kept)


def _read(path: Path, file: StateFile) -> dict[str, np.ndarray] | None:
    """Every array of the file, ``ids`` among them."""
    try:
        raw = files.read_bytes(path, file.limit)  # a regular file, within its bound
        if raw is None:
            return None
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            arrays = {name: np.asarray(data[name]) for name in ("ids", *data.files)}
    # UnusableStateFile is an OSError; a torn zip (a write cut short) raises BadZipFile.
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        files.set_aside(path, file, f"{path}: {exc}")
        return None
    if len({len(a) for a in arrays.values()}) != 1 or any(a.ndim != 1 for a in arrays.values()):
        files.set_aside(path, file, f"{path}: arrays of unequal length or shape")
        return None
    return arrays


def _write(path: Path, file: StateFile, arrays: Mapping[str, np.ndarray]) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **dict(arrays))  # type: ignore[arg-type]
    files.write_bytes(path, file, buffer.getvalue())
