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
(:data:`~genesis_fp16_infrastructure.judging.split.HELD_OUT`: a record keeps its side as
the pool grows), and the gate compares the candidate with the served model on those
alone. The plugin keeps its side of that bargain in two lines: its ``train`` trains on
the rows ``request.training_rows(ids)`` keeps (:func:`training_rows`), and its task's
``extra_state()`` includes ``"trained_ids"`` (:data:`TRAINED_IDS`), the list of the ids
it trains on, so that every checkpoint says what its model learned. The judged run reads
that after training: a candidate that names a held-out record, or names none where the
served model did, is refused in one line and never served. Records a served model
trained on are left out of the comparison too (a model that names none: every record it
knew). A plugin whose checkpoints name nothing (one written before this) is still
judged, on its training data, and its verdicts say so.

>>> training_rows([f"r{i}" for i in range(8)])  # "r4" is held out
[0, 1, 2, 3, 5, 6, 7]
>>> losses = RecordLosses.of(["a", "b"], [0.5, 0.25])
>>> losses.mean()
0.375
>>> RecordLosses.of(["a", "a"], [0.5, 0.25])
Traceback (most recent call last):
...
genesis_fp16_infrastructure.contract.judging.RecordLossesError: RecordLosses: id 'a' twice
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from genesis_fp16_infrastructure.judging.split import HELD_OUT

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.contract.train_request import TrainRequest

JUDGING_VERSION = 1
TRAINED_IDS = "trained_ids"  # the task's extra_state key: the ids (str) it trains on
DEFAULT_RELATIVE_MARGIN = 0.05  # of the reference model's mean loss, when no margin is declared


class RecordLossesError(ValueError):
    """Scores a plugin returned that cannot be judged: one line naming what is wrong."""


@dataclass(frozen=True)
class RecordLosses:
    """One checkpoint's loss on each record (lower is better), by the record's stable id.

    ``ids``: one non-empty string per record, the same for the same record in every run
    (a hash of its line, an episode's seed): the gate pairs two models by it, the watch
    tells new records from known ones by it. ``losses``: finite floats. ``segments``:
    an optional key per record (a task, a source file) for reports. ``quarantined``:
    the malformed records the plugin's read set aside (a run that takes no step reports
    them as its own: the read that scored the served model is that run's only read).
    """

    ids: tuple[str, ...]
    losses: tuple[float, ...]
    segments: tuple[str, ...] | None = None
    quarantined: int = 0

    def __post_init__(self) -> None:
        # Copied here, then checked: a list the plugin passed and changes later (inf, an
        # id short or twice) changes nothing that was checked.
        try:
            object.__setattr__(self, "ids", tuple(self.ids))
            object.__setattr__(self, "losses", tuple(self.losses))
            if self.segments is not None:
                object.__setattr__(self, "segments", tuple(self.segments))
        except TypeError as exc:
            raise RecordLossesError(f"RecordLosses: a field is not a sequence ({exc})") from None
        if len(self.ids) != len(self.losses):
            raise RecordLossesError(
                f"RecordLosses: {len(self.ids)} ids but {len(self.losses)} losses"
            )
        if self.segments is not None and len(self.segments) != len(self.ids):
            raise RecordLossesError(
                f"RecordLosses: {len(self.segments)} segments for {len(self.ids)} records"
            )
        seen: set[str] = set()
        for index, (id_, loss) in enumerate(zip(self.ids, self.losses, strict=True)):
            if not isinstance(id_, str) or not id_:
                raise RecordLossesError(f"RecordLosses: id {index} is {id_!r}, not a string")
            if id_ in seen:
                raise RecordLossesError(f"RecordLosses: id {id_!r} twice")
            seen.add(id_)
            if isinstance(loss, bool) or not isinstance(loss, float) or not math.isfinite(loss):
                raise RecordLossesError(
                    f"RecordLosses: loss of {id_!r} is {loss!r}, not a finite float"
                )
            if loss < 0.0:  # clipped to 0, all-negative losses would promote on "0 vs 0"
                raise RecordLossesError(
                    f"RecordLosses: loss of {id_!r} is {loss!r}; losses are 0 or more"
                )
        count = self.quarantined
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise RecordLossesError(f"RecordLosses: quarantined is {count!r:.40}, not a count")
        for index, segment in enumerate(self.segments or ()):
            if not isinstance(segment, str):
                raise RecordLossesError(
                    f"RecordLosses: segment {index} is {segment!r:.40}, not a string"
                )

    @classmethod
    def of(
        cls,
        ids: Iterable[str],
        losses: Iterable[float],
        segments: Iterable[str] | None = None,
        quarantined: int = 0,
    ) -> RecordLosses:
        """From any sequences (a list, a numpy array): losses become Python floats."""
        try:
            values = tuple(float(v) for v in losses)
        except (TypeError, ValueError) as exc:
            raise RecordLossesError(f"RecordLosses: a loss is not a number ({exc})") from None
        kept = None if segments is None else tuple(segments)
        return cls(tuple(ids), values, kept, quarantined)

    def take(self, keep: Sequence[bool]) -> RecordLosses:
        """The records where ``keep`` (one flag per record, in order) is true."""
        rows = [i for i, k in enumerate(keep) if k]
        segments = None if self.segments is None else tuple(self.segments[i] for i in rows)
        kept = tuple(self.ids[i] for i in rows), tuple(self.losses[i] for i in rows)
        return RecordLosses(*kept, segments, self.quarantined)

    def mean(self) -> float:
        """The mean loss (NaN for no record)."""
        return math.fsum(self.losses) / len(self.losses) if self.losses else math.nan


@runtime_checkable
class JudgedPlugin(Protocol):
    """What a plugin declares to be judged (module docstring)."""

    judging_version: int
    loss_span: float

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        """``checkpoint``'s loss on each record of ``request.data_path``."""
        ...


@runtime_checkable
class DeclaresMargin(Protocol):
    """A judged plugin's own margin: the loss difference tolerated against a reference
    model (:func:`judging_margin`), instead of a share of its mean loss."""

    judging_margin: float | None


@runtime_checkable
class DeclaresRecords(Protocol):
    """``records_are_training_data = False``: the scored records are evaluation episodes,
    none of them trained on (:func:`records_are_training_data`)."""

    records_are_training_data: bool


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
    if not isinstance(span, int | float) or isinstance(span, bool) or not 0 < span < math.inf:
        raise TypeError(f"{name}: loss_span {span!r} is not a positive finite number")
    margin = getattr(plugin, "judging_margin", None)
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, int | float)):
        raise TypeError(f"{name}: judging_margin {margin!r} is not a number")
    if not callable(plugin.score_records) or not isinstance(plugin, JudgedPlugin):
        raise TypeError(f"{name}: score_records is not a method")
    return plugin


def judging_margin(plugin: object, reference_mean: float) -> float:
    """The loss difference tolerated against a reference model whose mean loss (clipped)
    is ``reference_mean``: the plugin's ``judging_margin``, else
    :data:`DEFAULT_RELATIVE_MARGIN` of that mean.

    >>> class Agent: ...
    >>> judging_margin(Agent(), 0.4)
    0.02
    """
    declared = plugin.judging_margin if isinstance(plugin, DeclaresMargin) else None
    if declared is not None:
        return float(declared)
    return round(DEFAULT_RELATIVE_MARGIN * max(reference_mean, 0.0), 12)


def model_weights(checkpoint: Path) -> dict[str, Any]:
    """The model's weights (its ``state_dict``) in ``checkpoint``, checked as a resume
    checks them (digest, schema, finite weights), for ``score_records`` to load into a
    fresh model; a :class:`~genesis_fp16_infrastructure.training.CheckpointError` (a
    ValueError: the judged run reports it in one line) when it cannot be read."""
    from genesis_fp16_infrastructure.training import checkpoint_keys
    from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint

    return dict(load_checkpoint(Path(checkpoint))[checkpoint_keys.MODEL])


def records_are_training_data(plugin: object) -> bool:
    """Whether ``plugin``'s scored records are what it trains on (the default): then a
    run on records the served model all knew has nothing to learn."""
    return not isinstance(plugin, DeclaresRecords) or bool(plugin.records_are_training_data)


def training_rows(ids: Sequence[str]) -> list[int]:
    """The rows of ``ids`` (a plugin's records, by their stable ids, in its order) that a
    judged plugin may train on: every record the held-out split does not hold out (what
    ``TrainRequest.training_rows`` answers)."""
    return np.flatnonzero(~HELD_OUT.of_ids(ids)).tolist()
