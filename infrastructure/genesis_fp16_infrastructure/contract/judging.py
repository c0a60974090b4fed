"""Judged models: the contract's one optional capability (API version 3).

A plugin that can say how well a checkpoint does on each of its records gets the whole
served-model lifecycle from the library (``genesis_fp16_infrastructure.judging``): every
run trains a candidate in a folder of its own, a gate serves it only when it is shown no
worse than the served model on the same records, a live watch rolls the served model back
when records that arrive later show it worse than the one before it, and the operator's
``genesis-fp16 model list/promote/rollback/unpin`` work on it. It declares::

    class MyAgent:
        api_version = 3
        judging_version = 1      # this module's JUDGING_VERSION
        loss_span = 1.0          # each record's loss is clipped to [0, loss_span]

        def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
            ...                  # the checkpoint's loss on each record the request names

**Judged on records neither model trained on.** The judged run holds out a fifth of the
records, chosen by a stable hash of each record's id
(:data:`~genesis_fp16_infrastructure.contract.split.HELD_OUT`: a record keeps its side as
the pool grows), and the gate compares the candidate with the served model on those
alone. The plugin keeps its side of that bargain in two lines: its ``train`` trains on
the rows ``request.training_rows(ids)`` keeps, and its task's
``extra_state()`` includes ``"trained_ids"`` (:data:`TRAINED_IDS`) for the ids it trains
on, so that every checkpoint says what its model learned: ``request.trained_ids(ids)``,
their 64-bit hashes as one int64 tensor, or the list of the
ids themselves (a checkpoint holding 100,000 ids as strings takes 0.4-0.7 s to load on a
2-core CPU, the tensor milliseconds).
The judged run reads that after training: a candidate that names a held-out record, or
names none where the served model did, is refused in one line and never served. Records
a served model trained on are left out of the comparison too (a model that names none:
every record it knew). A plugin whose checkpoints name nothing (one written before this) is still
judged, on its training data, and its verdicts say so. The run asks for some records
only where it needs no more (``request.score_only``: the candidate's on the gate's
records, the watch's predecessor's on the new ones, and the served model's on both when
the plugin lists its records unscored, :class:`ListsRecords`): a plugin may score the
rows ``request.scoring_rows(ids)`` names alone, or every record, judged the same.

**Loss columns.** ``score_records`` may return several named columns of per-record
losses (a mapping; se_darwin: ``log_loss`` and ``brier``), naming one ``primary`` (the
figure shown where one is). The gate judges every column, and promotes only a candidate
shown no worse on each; the live watch rolls back on any (docs/judging.md). A plain
list is one column named ``loss``, as before columns were: same ``judging_version``.

The loader asks :func:`judging_of` whether a plugin is judged; a declaration half there
is refused in one line:

>>> class Scorer:
...     api_version, judging_version, loss_span = 3, JUDGING_VERSION, 1.0
...     def score_records(self, checkpoint, request):
...         return RecordLosses.of(["a", "b"], [0.5, 0.25])
>>> judging_of(Scorer()) is not None
True
>>> class Unspanned:
...     api_version, judging_version = 3, JUDGING_VERSION
...     def score_records(self, checkpoint, request): ...
>>> judging_of(Unspanned())
Traceback (most recent call last):
...
TypeError: Unspanned: loss_span None is not a positive finite number
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

# A judged plugin's optional declarations (judged_declarations.py), named here too: what a
# plugin and the judged run import.
from genesis_fp16_infrastructure.contract.judged_declarations import (  # noqa: F401
    DEFAULT_RELATIVE_MARGIN,
    DeclaresMargin,
    DeclaresMarginFloor,
    DeclaresRecords,
    _is_number,
    judging_margin,
    records_are_training_data,
)
from genesis_fp16_infrastructure.contract.model_weights import model_weights  # noqa: F401

# What a plugin returns (record_losses.py), the capability's values: named here for the
# protocols below and the module's example.
from genesis_fp16_infrastructure.contract.record_losses import RecordIds, RecordLosses

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.contract.train_request import TrainRequest

JUDGING_VERSION = 1
TRAINED_IDS = "trained_ids"  # the task's extra_state key: the ids (str) it trains on


@runtime_checkable
class JudgedPlugin(Protocol):
    """What a plugin declares to be judged (module docstring)."""

    judging_version: int
    loss_span: float

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        """``checkpoint``'s loss on each record of ``request.data_path``."""
        ...


@runtime_checkable
class ListsRecords(Protocol):
    """A judged plugin that lists its current records without scoring them: the judged
    run then scores the served model only on the records its gate and watch need (the
    held-out ones and those it did not know), not on every one."""

    def record_ids(self, request: TrainRequest) -> RecordIds | None:
        """The id (and segment) of each record of ``request.data_path``, as
        ``score_records`` names them; None: not listed (a read of its own would cost more
        than it saves), every record is scored."""
        ...


def judging_of(plugin: object) -> JudgedPlugin | None:
    """``plugin`` when it declares the judged-model capability, else None (it is not
    judged: it serves its newest checkpoint). A plugin of
    api_version 2 is never judged. A declaration that is half there, or of another
    judging version, raises TypeError naming what is wrong (the loader refuses it)."""
    if getattr(plugin, "api_version", None) == 2 or not hasattr(plugin, "score_records"):
        return None
    name = getattr(plugin, "name", type(plugin).__name__)
    version = getattr(plugin, "judging_version", None)
    if version != JUDGING_VERSION:
        raise TypeError(
            f"{name}: judging_version {version!r}, this genesis-fp16 supports {JUDGING_VERSION}"
        )
    span = getattr(plugin, "loss_span", None)
    if not _is_number(span) or not 0 < span < math.inf:
        raise TypeError(f"{name}: loss_span {span!r} is not a positive finite number")
    margin = getattr(plugin, "judging_margin", None)
    margins = margin.values() if isinstance(margin, Mapping) else [margin]
    if margin is not None and not all(_is_number(m) for m in margins):
        raise TypeError(f"{name}: judging_margin {margin!r:.80} is not a number, or a map of them")
    floor = getattr(plugin, "judging_margin_floor", None)
    floors = floor.values() if isinstance(floor, Mapping) else [floor]
    if floor is not None and not all(_is_number(f) and 0 <= f < math.inf for f in floors):
        raise TypeError(
            f"{name}: judging_margin_floor {floor!r:.80} is not a finite number of 0 or "
            "more, or a map of them"
        )
    if not callable(plugin.score_records) or not isinstance(plugin, JudgedPlugin):
        raise TypeError(f"{name}: score_records is not a method")
    return plugin
