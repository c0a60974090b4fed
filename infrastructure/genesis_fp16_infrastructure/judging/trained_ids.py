"""The records a checkpoint says its model trained on (issue 68): :func:`trained_ids`,
read from its extra state (or the side file its arrays are kept in) and checked, and a
list it cannot read raised as :class:`TrainedIdsError` in one line; :func:`named_or_none`,
the served model's reading of it, where such a list names none; and
:func:`trained_on_gone`, whether such a list names a record the pool no longer holds (a
model that learned from it is not up to date, issue 93). A candidate's list that cannot
be read refuses its judging instead (``served.held_out_check``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from genesis_fp16_infrastructure.contract.judging import TRAINED_IDS
from genesis_fp16_infrastructure.contract.split import id_hashes, sorted_unique
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.training import checkpoint_keys
from genesis_fp16_infrastructure.training.checkpoint_arrays import with_arrays
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint, sharing_kept

logger = logging.getLogger(__name__)


class TrainedIdsError(ValueError):
    """A checkpoint's ``trained_ids`` that is there but names no records in a form the
    judged run reads (:func:`trained_ids`): one line saying what it is instead."""


def trained_ids(checkpoint: Path) -> np.ndarray | None:
    """The sorted id hashes of the records ``checkpoint``'s model trained on, as its task
    said (``extra_state()["trained_ids"]``: a list of the ids, each a str as the pool's
    ids are, or their 64-bit hashes as one 1-D int64 tensor, contract.judging); None when
    it says nothing (no such key, or None), or cannot be read (the plugin's own scoring
    reports that). Anything else there (a list of ints, an int32 or float32 tensor) raises
    :class:`TrainedIdsError`: a list the run cannot read is not a list of nothing, and a
    candidate that names nothing is judged on its training data.

    >>> _described([1, 2]), _described(torch.zeros(3, dtype=torch.int32))
    ('a list of int', 'a torch.int32 tensor of shape (3,)')
    """
    try:
        with sharing_kept():  # read, never changed: a resident process's kept state will do
            state = load_checkpoint(checkpoint)
    except (OSError, ValueError):
        return None
    try:  # kept in a side file beside it (checkpoint_arrays), checked against its name
        extra = with_arrays(state, checkpoint).get(checkpoint_keys.EXTRA)
    except CheckpointError as exc:
        raise TrainedIdsError(f"its trained_ids cannot be read: {exc}") from None
    value = extra.get(TRAINED_IDS) if isinstance(extra, dict) else None
    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.dim() == 1 and value.dtype == torch.int64:
        return _ascending(value.cpu().numpy().view(np.uint64))
    if isinstance(value, list | tuple) and all(isinstance(i, str) for i in value):
        return sorted_unique(id_hashes(value))
    raise TrainedIdsError(
        f"malformed trained_ids ({_described(value)}): the task's extra_state() names the "
        "records it trained on as a list of their ids (str) or one 1-D int64 tensor of "
        "their hashes, request.trained_ids(ids)"
    )


def named_or_none(checkpoint: Path, who: str) -> np.ndarray | None:
    """:func:`trained_ids` of ``checkpoint``, a list it cannot read said in one warning
    (``who``: whose model) and taken as naming none: a served model's (served before the
    judged run refused such a list), where the records it knew stand for it."""
    try:
        return trained_ids(checkpoint)
    except TrainedIdsError as exc:
        logger.warning(
            "%s: %s; taken as naming none (every record it knew may have been trained on)",
            who, exc,
        )  # fmt: skip
        return None


def trained_on_gone(named: np.ndarray | None, ids: np.ndarray) -> bool:
    """Whether a model trained on records (``named``, :func:`trained_ids`' sorted hashes)
    that are not among the current ``ids``: a file removed, or a record relabelled or
    edited (its old hash gone). A model that names none: not known, False.

    >>> named = np.array([1, 5], np.uint64)
    >>> trained_on_gone(named, np.array([5, 9, 1], np.uint64)), trained_on_gone(named, named[1:])
    (False, True)
    """
    return named is not None and not schema.known(named, sorted_unique(ids)).all()


def _ascending(hashes: np.ndarray) -> np.ndarray:
    """``sorted_unique(hashes)``: a copy of its own when they are sorted and distinct
    already, as a task's ``request.trained_ids`` keeps them (one pass where a sort of
    80,000 took 2.7 ms, twice a judged run; the state it came from may be kept, never
    changed).

    >>> _ascending(np.array([1, 5, 9], np.uint64)).tolist()
    [1, 5, 9]
    >>> _ascending(np.array([5, 1, 5], np.uint64)).tolist()
    [1, 5]
    """
    if bool((hashes[1:] > hashes[:-1]).all()):
        return hashes.copy()
    return sorted_unique(hashes)


def _described(value: object) -> str:
    """What a malformed ``trained_ids`` is, in a few words."""
    if isinstance(value, torch.Tensor | np.ndarray):
        kind = "numpy array" if isinstance(value, np.ndarray) else "tensor"
        return f"a {value.dtype} {kind} of shape {tuple(value.shape)}"
    if isinstance(value, list | tuple):
        kinds = sorted({type(i).__name__ for i in value})
        return f"a {type(value).__name__} of {' and '.join(kinds)}"
    return f"{type(value).__name__} {value!r:.40}"
