"""The live watch: the served model against its predecessor on the records that came after.

Every labelled record that arrives after a model is served carries an outcome that
neither it nor the model served before it (its *predecessor*, the pointer's
``history[0]``) trained on. Each run that finds such records scores them first, with both
models, before it plans a candidate:

* the new records are those in neither model's pool (by id hash) and not scored by this
  watch before; they are appended, in arrival (file) order, to the watch's record of
  this pair, ``live-<predecessor id>.npz`` beside the served checkpoint (id hashes, both
  models' P(success), labels, and each record's segment: the Genesis agent that made
  it), so each record is counted once, in one fixed order. A store written before
  segments were kept is read as one segment (``UNSEGMENTED``), never refused. The
  store is a state file like any other: at most ``MAX_RECORDS`` records (checked on the
  members' headers before a byte is decoded), finite scores only (a NaN would poison
  every figure); a damaged one is set aside, reported once, and the watch starts again;
* the running figures over every record scored so far (records, both models' AUC and
  log-loss, and the paired per-record log-loss difference, served − predecessor, with
  its anytime-valid bounds) are written into the served entry of ``served.json`` as
  ``live``; they go into the history with it when it is replaced;
* the test (:mod:`~genesis_fp16_infrastructure.judging.sequential`, per segment by
  :mod:`~genesis_fp16_infrastructure.judging.segments`): when the lower bound of the mean
  difference passes ``MARGIN`` (the gate's own log-loss margin), over all records (at
  ``ALPHA / 2``) or over one Genesis agent's (at ``ALPHA / 32``), the served model is
  worse than its predecessor by more than the margin, at ``ALPHA`` over its whole watch
  and all its segments, however many runs looked. A model much worse for one agent is
  found from that agent's records, not from a mean its other agents dilute. The figures
  add the evidence so far (an e-value: ``1 / alpha`` decides), the records still needed
  to decide at the margin, and the A/A self-test's false-rollback rate on this watch's
  own records. Unless the operator pinned it, the predecessor is
  served again (:func:`~agent_folder.lifecycle.rollback`), and the dropped
  candidate's verdict becomes ``rolled_back`` with reason ``live_regression`` and these
  figures; the gate's ``newest`` set (:mod:`.judge_sets`) then judges later candidates
  on the records after it. A pinned model is never replaced: the report says ``held``.

Probabilities are clipped to ``[CLIP, 1 - CLIP]`` for the watch's log-losses, which
bounds each difference by ``SPAN`` nats: the test needs bounded differences.

>>> report = watch(root, data.columns, "se_darwin")  # doctest: +SKIP
>>> report["difference"], report["lower"], report["rolled_back"]  # doctest: +SKIP
"""

from __future__ import annotations

import io
import logging
import math
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import LIVE_WATCH
from genesis_fp16_infrastructure.agent_folder.lifecycle import (
    ServedPointer,
    ServedPointerError,
    read_pointer,
)
from genesis_fp16_infrastructure.contract.agent_snapshot import AgentSnapshot
from genesis_fp16_infrastructure.data.fingerprint import held_in
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.judging.segments import judge, self_test
from genesis_fp16_infrastructure.judging.watch import decide
from genesis_fp16_infrastructure.recipes.retrain import gate
from genesis_fp16_infrastructure.training.checkpoint import CheckpointError, load_checkpoint

logger = logging.getLogger(__name__)

ALPHA = 0.05  # a false rollback's probability over one model's whole watch, at most
MARGIN = gate.MARGIN_LOG_LOSS  # nats: worse than the predecessor by more than this
CLIP = 0.01  # P(success) clipped to [CLIP, 1 - CLIP] for the watch's log-losses
SPAN = math.log((1 - CLIP) / CLIP)  # |served − predecessor| per record, at most (4.6)
_ARRAYS = ("ids", "served", "previous", "labels", "segment")
_DTYPES = {
    "ids": np.int64,
    "served": np.float32,
    "previous": np.float32,
    "labels": np.float32,
    "segment": np.int32,  # the record's segment: an index into the names member
}
_NAMES = "segment_names"  # the segments' names (the Genesis agents), first seen first
# A name is cut to NAME_CHARS; past MAX_NAMES names, records join the last one: the
# names member stays small whatever the records say (the watch's slots are fewer still).
NAME_CHARS, MAX_NAMES = 64, 1024
_NAME_DTYPE = np.dtype(f"<U{NAME_CHARS}")
UNSEGMENTED = "(none)"  # the segment of a record with no agent, and of an older store's
# A store holds 24 bytes a record (an int64 id, three float32s, an int32 segment): 10^7
# records are 240 MB decoded, a fourth of the layout's file bound (LIVE_WATCH.limit) and
# far past any pool the watch has scored (benchmarks/live_watch.py: thousands). A
# compressed file is small whatever it declares, so the decoded size is checked on each
# member's header.
MAX_RECORDS = 10_000_000


def watch(
    root: Path,
    columns: PoolColumns,
    agent: str,
    numeric: torch.Tensor | None = None,
    snapshot: AgentSnapshot | None = None,
) -> dict[str, Any] | None:
    """Score the new records (module docstring) and update the served model's figures;
    roll back on a live regression. Returns the report (``live`` of the run's extra),
    or None when there is nothing to watch: no predecessor, a model whose data or
    checkpoint is unknown (logged), or no new record. ``numeric``: the read's numeric
    features (``gate.pool_numeric`` of ``columns.labelled``), if known; ``snapshot``: the
    pointer as the job's plan read it (None: read now)."""
    pair = _pair(root, agent, snapshot)
    if pair is None:
        return None
    pointer, served, previous = pair
    ids = columns.id_hash[columns.labelled]
    store = Path(root) / str(pointer.served["checkpoint"])
    store = LIVE_WATCH.at(store.parent, str(pointer.history[0].get("id")))
    kept = _read_store(store)
    assert served.pool_ids is not None and previous.pool_ids is not None
    new = ~held_in(ids, served.pool_ids) & ~held_in(ids, previous.pool_ids)
    new &= ~held_in(ids, np.sort(kept["ids"]))
    if not new.any():
        return None
    picked = np.flatnonzero(new)
    rows = None if numeric is None else numeric[torch.from_numpy(new)]
    records = gate.Records.of_columns(columns, picked, rows)
    names, codes = _segments_of(kept[_NAMES], columns.agent.take(columns.labelled[picked]))
    scored = {
        "ids": ids[picked],
        "served": served.success_probability(records, False).numpy().astype(np.float32),
        "previous": previous.success_probability(records, False).numpy().astype(np.float32),
        "labels": records.labels.numpy().astype(np.float32),
        "segment": codes,
    }
    scored, refused = _usable(scored, MAX_RECORDS - len(kept["ids"]))
    if refused:
        logger.warning(
            "%s: live watch: %d new record(s) not scored into %s (%s)", agent, *refused, store
        )
    if not len(scored["ids"]):
        return None
    kept = {k: np.concatenate([kept[k], scored[k]]) for k in _ARRAYS}
    kept[_NAMES] = names
    _write_store(store, kept)
    figures = {**figures_of(kept), "against": pointer.history[0].get("id")}
    figures["new_records"] = len(scored["ids"])
    return _decide(root, agent, str(pointer.served.get("id")), figures)


def _segments_of(known: np.ndarray, agents: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The store's segment names with the new records' agents added (first seen first),
    and each new record's index into them. A record with no agent is ``UNSEGMENTED``."""
    names = [str(n) for n in known.tolist()]
    index = {n: i for i, n in enumerate(names)}
    codes = np.empty(len(agents), dtype=np.int32)
    for i, agent in enumerate(agents):
        name = UNSEGMENTED if agent is None or agent == "" else str(agent)[:NAME_CHARS]
        if name not in index and len(names) < MAX_NAMES:
            index[name] = len(names)
            names.append(name)
        codes[i] = index.get(name, MAX_NAMES - 1)
    return np.array(names, dtype=_NAME_DTYPE), codes


def _usable(
    scored: dict[str, np.ndarray], room: int
) -> tuple[dict[str, np.ndarray], tuple[int, str] | None]:
    """The new records the store takes: those with finite scores (a NaN would poison every
    running figure, and served.json with it), at most ``room`` of them (the store's
    bound: the watch of one pair then stops growing). Also how many were left out, why."""
    finite = np.ones(len(scored["ids"]), dtype=np.bool_)
    for key in ("served", "previous", "labels"):
        finite &= np.isfinite(scored[key])
    keep = np.flatnonzero(finite)[: max(room, 0)]
    if len(keep) == len(finite):
        return scored, None
    why = f"{int((~finite).sum())} NaN or infinite, the store holds at most {MAX_RECORDS}"
    picked = {k: v if k == _NAMES else v[keep] for k, v in scored.items()}
    return picked, (len(finite) - len(keep), why)


def figures_of(kept: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The running figures of a watch's records (``_ARRAYS``, in arrival order)."""
    labels = torch.from_numpy(np.asarray(kept["labels"], dtype=np.float32))
    losses = {}
    aucs: dict[str, float | None] = {}
    for side in ("served", "previous"):
        p = np.clip(np.asarray(kept[side], dtype=np.float64), CLIP, 1 - CLIP)
        y = labels.numpy().astype(np.float64)
        losses[side] = -(y * np.log(p) + (1 - y) * np.log1p(-p))
        scores = gate.score(torch.from_numpy(p), labels)[0]
        aucs[side] = None if math.isnan(scores.auc) else round(scores.auc, 6)
    d = losses["served"] - losses["previous"]
    names = _names(kept)
    judged = judge(d, names, SPAN, MARGIN, ALPHA)
    return {
        "records": judged["records"],
        "served_auc": aucs["served"],
        "previous_auc": aucs["previous"],
        "served_log_loss": round(float(losses["served"].mean()), 6),
        "previous_log_loss": round(float(losses["previous"].mean()), 6),
        "difference": judged["difference"],
        "lower": judged["lower"],
        "upper": judged["upper"],
        "margin": MARGIN,
        "alpha": ALPHA,
        "evidence": judged["evidence"],
        "records_needed": judged["records_needed"],
        "segments": judged["segments"],
        # seeded by the record count: a run's figures are reproducible from the store
        "self_test": self_test(d, names, SPAN, MARGIN, ALPHA, seed=len(d)),
        "regression": judged["regression"],
    }


def _names(kept: Mapping[str, np.ndarray]) -> np.ndarray:
    """Each kept record's segment name (its Genesis agent)."""
    known = np.asarray(kept.get(_NAMES, np.array([UNSEGMENTED], dtype=_NAME_DTYPE)))
    codes = np.asarray(kept["segment"], dtype=np.int64)
    if len(known) == 0:
        known = np.array([UNSEGMENTED], dtype=_NAME_DTYPE)
    return known[np.minimum(codes, len(known) - 1)]


def _decide(root: Path, agent: str, watched: str, figures: dict[str, Any]) -> dict[str, Any]:
    """The judged watch's decision (judging.watch.decide), with this watch's log-loss line."""
    return decide(root, agent, watched, figures, _detail)


def _detail(figures: Mapping[str, Any]) -> str:
    return (
        f"live regression: log-loss {figures['served_log_loss']:.4f} vs its predecessor's "
        f"{figures['previous_log_loss']:.4f} on {figures['records']} new record(s), at least "
        f"{figures['lower']:.4f} worse (anytime, {1 - figures['alpha']:.0%}), margin "
        f"{figures['margin']}"
    )


def _pair(
    root: Path, agent: str, snapshot: AgentSnapshot | None
) -> tuple[ServedPointer, gate.ScoredModel, gate.ScoredModel] | None:
    """The pointer, the served model and its predecessor, ready to score; None (logged
    where it is not simply the first model) when there is no pair to watch."""
    try:
        pointer = read_pointer(root) if snapshot is None else snapshot.pointer
    except ServedPointerError:
        return None  # the run refuses it next, in one line (served_model.served_model)
    if pointer is None or not pointer.history:
        return None
    models = []
    for entry in (pointer.served, pointer.history[0]):
        path = Path(root) / str(entry.get("checkpoint"))
        try:
            model = gate.ScoredModel(load_checkpoint(path))
        except (CheckpointError, ValueError, OSError) as exc:
            logger.warning(
                "%s: live watch off: model %s unreadable: %s", agent, entry.get("id"), exc
            )
            return None
        if model.pool_ids is None:
            logger.warning("%s: live watch off: model %s's data is unknown", agent, entry.get("id"))
            return None
        models.append(model)
    return pointer, models[0], models[1]


def _read_store(path: Path) -> dict[str, np.ndarray]:
    """The watch's records so far; none when the file is absent or unusable: set aside and
    reported once (agent_folder.files), the watch then starts again on the records
    neither model trained on. Read through the hardened reader (a regular file within
    the layout's bound), then decoded only after every member's header passed
    :func:`_check_header`: the bound is on the decoded size, not the file's."""
    empty = {k: np.zeros(0, dtype=_DTYPES[k]) for k in _ARRAYS}
    empty[_NAMES] = np.zeros(0, dtype=_NAME_DTYPE)
    try:
        raw = files.read_bytes(path, LIVE_WATCH.limit)
        if raw is None:
            return empty
        return _decode_store(raw)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        # UnusableStateFile is a ValueError; a zlib.error (a torn deflate stream) is not.
        why = f"{path}: {exc}"
    except zlib.error as exc:
        why = f"{path}: a damaged compressed member ({exc})"
    files.set_aside(path, LIVE_WATCH, f"live watch store unusable, watch restarted: {why}")
    return empty


def _decode_store(raw: bytes) -> dict[str, np.ndarray]:
    """The arrays of a store's bytes, each header checked before its data is read."""
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        names = sorted(archive.namelist())
        # a store written before segments holds the first four: one segment, never refused
        arrays = _ARRAYS if len(names) > len(_ARRAYS) - 1 else _ARRAYS[:-1]
        members = [*arrays, _NAMES] if arrays == _ARRAYS else list(arrays)
        if names != sorted(f"{k}.npy" for k in members):
            raise ValueError(f"holds {names[:8]}, not the arrays {[*_ARRAYS, _NAMES]}")
        lengths = set()
        for key in members:
            with archive.open(f"{key}.npy") as member:
                length = _check_header(key, member)
            if key != _NAMES:  # the names are as many as the segments, not the records
                lengths.add(length)
        if len(lengths) != 1:
            raise ValueError(f"arrays of unequal length {sorted(lengths)}")
        kept = {}
        for key in members:
            with archive.open(f"{key}.npy") as member:
                kept[key] = np.lib.format.read_array(member, allow_pickle=False)
    scores = np.concatenate([kept[k] for k in ("served", "previous", "labels")])
    if not np.isfinite(scores).all():
        raise ValueError("a score or label that is NaN or infinite")
    if _NAMES not in kept:  # the older store's records: one segment, UNSEGMENTED
        kept["segment"] = np.zeros(len(kept["ids"]), dtype=np.int32)
        kept[_NAMES] = np.array([UNSEGMENTED], dtype=_NAME_DTYPE)
    elif len(kept["ids"]) and not 0 <= kept["segment"].min() <= kept["segment"].max() < max(
        len(kept[_NAMES]), 1
    ):
        raise ValueError(f"a segment outside the {len(kept[_NAMES])} names")
    return kept


def _check_header(key: str, member: IO[bytes]) -> int:
    """The element count an array member's header declares, after checking it against the
    writer's layout: 1-D, its dtype, at most ``MAX_RECORDS``. Reads the header only."""
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
    else:
        raise ValueError(f"{key}: .npy format {version}, not 1.0 or 2.0")
    if len(shape) != 1:
        raise ValueError(f"{key}: shape {shape}, not one dimension")
    expected, bound = (
        (_NAME_DTYPE, MAX_NAMES) if key == _NAMES else (np.dtype(_DTYPES[key]), MAX_RECORDS)
    )
    if dtype != expected:
        raise ValueError(f"{key}: dtype {dtype}, not {expected}")
    if shape[0] > bound:
        what = "names" if key == _NAMES else "records"
        raise ValueError(f"{key}: {shape[0]} {what}, over the bound of {bound}")
    return int(shape[0])


def _write_store(path: Path, kept: Mapping[str, np.ndarray]) -> None:
    """Write the watch's records, in the layout :func:`_read_store` accepts; a NaN or
    infinite score, or more than ``MAX_RECORDS``, is refused (ValueError): the store is
    never written in a form its reader sets aside."""
    arrays = {k: np.ascontiguousarray(kept[k], dtype=_DTYPES[k]) for k in _ARRAYS}
    if len({len(v) for v in arrays.values()}) != 1 or len(arrays["ids"]) > MAX_RECORDS:
        raise ValueError(f"{path}: {len(arrays['ids'])} records, unequal or over {MAX_RECORDS}")
    if not all(np.isfinite(arrays[k]).all() for k in ("served", "previous", "labels")):
        raise ValueError(f"{path}: a score or label that is NaN or infinite")
    names = np.ascontiguousarray(kept[_NAMES], dtype=_NAME_DTYPE)
    if len(names) > MAX_NAMES or (len(arrays["segment"]) and arrays["segment"].max() >= len(names)):
        raise ValueError(f"{path}: a segment outside the {len(names)} names")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, **{_NAMES: names})  # type: ignore[arg-type]
    files.write_bytes(path, LIVE_WATCH, buffer.getvalue())
