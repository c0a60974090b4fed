"""The SE-Darwin world model as a ``TrainingTask`` for ``fit()``
(``genesis_fp16_infrastructure.training.run.fit``).

The data is read once and evaluated one of two ways, chosen by the pool's size:

* **Held-out** (pools of 3,334 labelled records and more): split three ways by a hash of
  (seed, trajectory_id), so that the split does not depend on file order: a held-out part
  (the run's reported evaluation), and out of the rest a validation part (early
  stopping's yardstick) and the training part. Split sizes follow the pool
  (``split_fractions``): the held-out part aims at 1,000 records, at least 10% and at
  most 30% of the pool, so that its AUC is not mostly the split's luck (its 95% interval
  is reported next to it); validation takes the same share of what is left, at most 20%
  and at most ``split.VALIDATION_CAP`` (2,000) records.
  The model is an ensemble of ``members`` (5) networks trained together, each on the
  whole training part, and served as their mean: one fresh network's log-loss on a
  Genesis agent's few hundred judged records moves by about the gate's margin from fit to
  fit, so a candidate on clean growth was held back as worse on an agent the served
  model knew (issue 93; docs/se-darwin.md, "Clean growth").
* **Cross-validated** (smaller pools, where 30% of the pool is under 1,000 records):
  the records are dealt into ``folds`` (5) folds by the same kind of hash, and the model
  is an ensemble of as many networks trained together, member k on every fold but k.
  Each record's out-of-fold prediction comes from the member that never trained on it:
  their loss is early stopping's yardstick and their AUC the reported evaluation, over
  every record of the pool. The served model is the members' mean, trained on all of
  the pool; no record is kept out of it. On 500-record pools this ranks fresh attempts
  0.06 AUC better than a held-out split (docs/se-darwin.md: 0.890 against 0.830).

The features are encoded with an encoder fitted on the training part (every record when
cross-validated), the one saved in the checkpoint being resumed, or, on a later run whose
pool only grew a little, the served model's (``encoder_choice``: issue 90), and kept as
tensors on the training device, as one :class:`Batch` of tensors per part of the pool. In
a resident run process every labelled record's encoded row is kept too
(``world_model.kept_encoded``): a later run with the same encoder encodes only what is new
or changed, and its training part is rows of the kept ones (:class:`Part`), gathered a
block of batches at a time as the run reads them, never copied out whole.
:func:`probe_setup` gives the precision probe the same world model, loss and a few real
batches.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn.functional import binary_cross_entropy_with_logits
from torch.optim import Optimizer

from genesis_fp16_infrastructure.contract.judging import TRAINED_IDS
from genesis_fp16_infrastructure.contract.plugin_api import ProbeSetup, TrainRequestError
from genesis_fp16_infrastructure.contract.split import sorted_unique
from genesis_fp16_infrastructure.data.fingerprint import (
    DataChange,
    DataFingerprint,
    fingerprint_of,
)
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.schema import SCHEMA_VERSION
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain.encoder_choice import (
    CHECKPOINT,
    FITTED,
    SERVED,
    served_encoder,
)
from genesis_fp16_infrastructure.recipes.retrain.evaluated import weights_digest
from genesis_fp16_infrastructure.recipes.retrain.kept_split import KeptSplit
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.split import (
    Split,
    choose_split,
    judged_held_out,
)
from genesis_fp16_infrastructure.training.checkpoint_arrays import PER_RECORD
from genesis_fp16_infrastructure.training.run.early_stop import EarlyStopping
from genesis_fp16_infrastructure.training.run.task import index_to, to_device
from genesis_fp16_infrastructure.world_model.features import (
    Categorical,
    FeatureEncoder,
    numeric_rows,
)
from genesis_fp16_infrastructure.world_model.kept_encoded import KeptEncoded
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric
from genesis_fp16_infrastructure.world_model.metrics import accuracy, auc_with_interval, brier, mae
from genesis_fp16_infrastructure.world_model.model import (
    HEAD_MODULES,
    TRUNK_MODULES,
    Labels,
    ModelConfig,
    WorldModelOutput,
    build_world_model,
    stack_loop_optimizer_state,
    world_model_losses,
)
from genesis_fp16_infrastructure.world_model.predict import forward_chunked, world_model_state

logger = logging.getLogger(__name__)


DEFAULT_BATCH, MIN_BATCH = 256, 16
# Early stopping watches the validation log-loss of success, not the three heads' total:
# success is what the model is for, and on 500-record pools the total's minimum comes
# epochs before success's (mean held-out AUC over 40 pools 0.822 stopping on the total,
# 0.841 on success; benchmarks/world_model_quality.py at c9d5b15, on held-out splits).
STOP_METRIC = "success_bce"
SMALL_POOL, SMALL_POOL_HIDDEN = 2000, 32  # training records under which the default is narrower
_PROBE_BATCHES = 9
GATHER_BATCHES = 16  # an epoch's batches gathered at once (train_batches)
_PROBE_SAMPLE_COUNT = 3000


class Batch(NamedTuple):
    x: torch.Tensor
    success: torch.Tensor
    score: torch.Tensor
    score_known: torch.Tensor
    outcome: torch.Tensor
    fold: torch.Tensor  # each record's fold when cross-validated, else NO_FOLD

    def take(self, index: torch.Tensor) -> Batch:
        """The rows ``index`` of every field, in its order: one ``index_select`` a field
        (advanced indexing, ``t[index]``, took 5x as long for the features at 100,000
        records: 1.7 ms against 0.34 for a block of 16,384 rows; the same rows, bit for bit)."""
        return Batch(*(t.index_select(0, index) for t in self))

    def rows(self, start: int, end: int) -> Batch:
        """Rows ``start:end`` of every field, as views (no kernel, no copy)."""
        return Batch(*(t[start:end] for t in self))

    def __len__(self) -> int:
        return int(self.x.shape[0])


NO_FOLD = -1  # a record of no fold: every member of an ensemble trains on it


class Part:
    """A part of the pool (the training part) as the rows ``index`` of a batch of more
    records (``rows``: a resident run process's kept encoded pool, ``world_model.
    kept_encoded``), or a batch of its own (``index`` None). It stands for
    ``rows.take(index)`` and is never copied out: :meth:`take` gathers a block of its
    rows straight from ``rows`` (a record that moved into the part as validation's share
    shrank, or a new one, moves no row), the same rows in the same order, bit for bit.

    >>> rows = Batch(*(torch.arange(5.0) for _ in Batch._fields))
    >>> Part(rows, torch.tensor([4, 1, 3])).take(torch.tensor([2, 0])).x.tolist()
    [3.0, 4.0]
    """

    __slots__ = ("index", "rows")

    def __init__(self, rows: Batch, index: torch.Tensor | None = None) -> None:
        self.rows, self.index = rows, index

    def take(self, order: torch.Tensor) -> Batch:
        """The part's rows ``order`` (places in the part), in that order."""
        return self.rows.take(order if self.index is None else self.index.index_select(0, order))

    def batch(self) -> Batch:
        """The part as one batch of its own (a copy, when it is rows of a larger one)."""
        return self.rows if self.index is None else self.rows.take(self.index)

    @property
    def device(self) -> torch.device:
        return self.rows.x.device

    def __len__(self) -> int:
        return len(self.rows) if self.index is None else int(self.index.shape[0])


def batch_of(
    x: torch.Tensor, labels: Labels, folds: Sequence[int] | np.ndarray | None = None
) -> Batch:
    """Encoded features ``x``, the same records' labels and folds (none: ``NO_FOLD``), as
    one batch."""
    n = len(labels.success)
    if folds is None:  # not a list of n: building one took 25 ms at 100,000 records
        fold = torch.full((n,), NO_FOLD, dtype=torch.long)
    else:
        fold = torch.as_tensor(folds, dtype=torch.long).reshape(n)
    return Batch(x, *labels, fold)


class WorldModelStep:
    """A world model's step: its model (``config``, ensemble members included), AdamW and
    loss. :class:`WorldModelTask` trains it on data; a fault bundle keeps its
    ``replay_spec()`` and rebuilds it without data (the bundle holds the step's batches)::

        task = WorldModelStep.from_spec(bundle["rebuild"])
    """

    def __init__(self, config: ModelConfig, learning_rate: float, weight_decay: float) -> None:
        self.config, self.learning_rate, self.weight_decay = config, learning_rate, weight_decay

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> WorldModelStep:
        return cls(
            ModelConfig.from_dict(dict(spec["model"])),
            float(spec.get("learning_rate", TaskOptions.learning_rate)),
            float(spec.get("weight_decay", TaskOptions.weight_decay)),
        )

    def replay_spec(self) -> dict[str, Any]:
        """What a fault bundle keeps to rebuild this step without its data: the model's
        configuration and the optimizer's settings."""
        return {
            "model": self.config.to_dict(),
            "learning_rate": self.learning_rate,
            "weight_decay": self.weight_decay,
        }

    def build_model(self) -> nn.Module:
        return build_world_model(self.config)

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        """AdamW over ``model``."""
        device = next(model.parameters()).device.type
        optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=self.learning_rate,
            weight_decay=self.weight_decay,
            fused=device in ("cpu", "cuda"),
            # Step counters on the device, so the whole step can be a CUDA graph
            # (cuda_graph); the same arithmetic as without. CPU steps cannot be captured.
            capturable=device == "cuda",
        )
        # Checkpoints of the loop-layout ensemble (one WorldModel per member) resume.
        optimizer.register_load_state_dict_pre_hook(stack_loop_optimizer_state)
        return [optimizer]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """The three heads' loss; over one member, the sum of each member's on the records
        outside its fold (a member's gradient is what it would be trained alone)."""
        labels = (batch.success, batch.score, batch.score_known, batch.outcome)
        members = self.config.members
        if members <= 1:
            return world_model_losses(model(batch.x), *labels).total
        out: WorldModelOutput = model(batch.x, per_member=True)  # through any DDP/FSDP wrapper
        # Every member's loss at once: row k keeps the records outside fold k.
        rows = torch.arange(members, device=batch.fold.device).unsqueeze(1)
        return world_model_losses(out, *labels, weight=batch.fold != rows).total.sum()


# The per-record arrays of its extra state: kept in a side file beside each checkpoint,
# written once per pool, not pickled, hashed and copied with the model (checkpoint_arrays).
PER_RECORD_ARRAYS = [TRAINED_IDS, "data/ids", "data/labelled"]


class WorldModelTask(WorldModelStep):
    """Everything ``fit()`` needs to train an agent's world model (SE-Darwin's by default)
    on one dataset."""

    def __init__(
        self,
        data: ReadResult,
        options: TaskOptions,
        seed: int,
        device: str = "cpu",
        saved: Mapping[str, Any] | None = None,
        split: Split | None = None,
        seen: DataFingerprint | None = None,
        agent: str = "se_darwin",
        kept: KeptNumeric | None = None,
        served: Mapping[str, Any] | None = None,
        change: DataChange | None = None,
    ) -> None:
        self.agent = agent  # whose model: kept in the checkpoint, named in the log
        self.options = options
        self.seed = seed
        self.eval_seconds = 0.0  # spent in evaluate() and validate(): the run's eval phase
        # The last evaluate()'s held-out logits and the digest of the weights that
        # computed them (_measure): the gate's scoring takes them (evaluated.py)
        self.held_out_evaluation: tuple[torch.Tensor, str] | None = None
        # Every labelled record read (held-out ones too), kept in each checkpoint: the next
        # scheduled run compares its pool with it (genesis_fp16_infrastructure.data.fingerprint).
        self.seen = seen if seen is not None else fingerprint_of(data.columns)
        memory = None if kept is None else kept.memory
        # In a resident run process the split's draws are kept for the next run
        # (kept_split): only the new records are drawn, and their hashes merged.
        drawing = None if kept is None or memory is None else KeptSplit(memory, str(kept.path))
        self.split = split = split or choose_split(data, options, seed, saved, drawing)
        train = split.train
        columns = data.columns
        # The unscaled numeric features of every example, computed once from the read's
        # columns (issue 36: no object per record): each part takes its rows, and the drift
        # report and the promotion gate take them after the run (take_numeric_rows). With
        # ``kept``, only the records new or changed since the kept pool's are worked out
        # (issue 90: world_model.kept_numeric), the same numbers bit for bit.
        self.kept = kept
        numeric = numeric_rows(columns, columns.labelled) if kept is None else kept.rows(columns)
        self._numeric_rows: torch.Tensor | None = numeric
        # How the encoder came (encoder_choice): extra.encoder, and why.
        self.encoder_use, self.encoder_reason = CHECKPOINT, "resumed"
        if saved is not None:  # resuming: encode exactly as the checkpointed run did
            try:
                self.encoder = FeatureEncoder.from_state(saved["encoder"])
            except ValueError as exc:  # e.g. a checkpoint from before encoder version 2
                raise TrainRequestError(f"cannot resume this checkpoint: {exc}") from exc
            config = ModelConfig.from_dict(saved["model"])
        else:
            reused, self.encoder_reason = served_encoder(
                served, change, split, columns, options, seed
            )
            self.encoder_use = SERVED if reused is not None else FITTED
            self.encoder = reused or FeatureEncoder.fit_parts(
                Categorical.of_rows(columns, columns.labelled[train]),
                numeric.index_select(0, torch.from_numpy(train)),  # freed after the fit
                columns.success[train],
            )
            # A member trains on all folds but one: its width follows that many records. A
            # held-out run's members each train on the whole training part.
            members = split.fold_count or options.members
            member_records = (
                len(train) * (members - 1) // members if split.fold_count else len(train)
            )
            config = _model_config(options, self.encoder.n_features, member_records, members)
        super().__init__(config, options.learning_rate, options.weight_decay)
        # In a resident run process every labelled record's encoded row is kept for the
        # next run of the same encoder (kept_encoded): only what is new or changed is
        # encoded, and each part is rows of the pool's (the training part is never copied
        # out: Part). Else each part is encoded on its own.
        self.kept_encoded: KeptEncoded | None = None
        if kept is not None and memory is not None:
            self.kept_encoded = KeptEncoded(memory, str(kept.path))
        if self.kept_encoded is not None:
            assert kept is not None
            train_part, validation_data, eval_data = _kept_parts(
                self.kept_encoded, self.encoder, columns, numeric, kept.stamp, split, device
            )
        else:
            train_part, validation_data, eval_data = _encoded_parts(
                self.encoder, columns, numeric, split, device
            )
        self.train_data: Part = train_part
        self.validation_data: Batch = validation_data
        self.eval_data: Batch = eval_data
        # The ids it trains on (training and validation), the checkpoint's "trained_ids"
        # (contract.judging): the judged run checks none is held out. Kept as their
        # hashes, one tensor: each checkpoint saves it, and each judged run loads it (as
        # 100,000 strings, 0.7 s a load). Early stopping's record holds on these records
        # alone: their distinct id hashes (since issue 36; the ids' text, sorted, before: a
        # checkpoint of then starts a new record once). Sorted here, or merged (kept_split).
        sorted_known = None if drawing is None else drawing.known(split)
        if sorted_known is None:
            known = np.concatenate((train, split.validation))
            judged = sorted_unique(columns.judged[known])
            distinct = sorted_unique(columns.id_hash[columns.labelled[known]])
        else:
            judged, distinct = sorted_known
        self.trained_ids = torch.from_numpy(judged.view(np.int64))
        self.data_key = hashlib.blake2b(distinct.astype("<i8").tobytes(), digest_size=8).hexdigest()
        validation, held = len(split.validation), len(split.held_out)
        parts = (
            f"{len(train)} examples in {self.config.members} folds (cross-validated)"
            if self.cross_validated
            else f"{len(train)} train, {validation} validation, {held} held-out examples"
        )
        logger.info(
            "%s task: %s, %d features, model %s, encoder %s (%s)",
            self.agent,
            parts,
            self.encoder.n_features,
            self.config,
            self.encoder_use,
            self.encoder_reason,
        )

    def take_numeric_rows(self) -> torch.Tensor | None:
        """The unscaled numeric features of every record of the task's data, in its order
        (None once taken); the task keeps no reference afterwards."""
        rows, self._numeric_rows = self._numeric_rows, None
        return rows

    @property
    def cross_validated(self) -> bool:
        """Members by fold, each scored out of fold; a held-out ensemble is not."""
        return self.config.members > 1 and self.split.fold_count > 0

    def on_whole_pool(self, data: ReadResult, device: str = "cpu") -> WorldModelTask:
        """A task training on every labelled record of ``data`` the judged run does not
        hold out (``final_fit="whole"``).

        Its encoder is fitted on all of them; the model's shape and the batch size are
        this task's, so that a step count found here means the same there. Its validation
        and held-out parts are its training records: its own metrics are not a measure.
        """
        rows = np.flatnonzero(~judged_held_out(data))
        pinned = replace(
            self.options,
            hidden=self.config.hidden,
            depth=self.config.depth,
            dropout=self.config.dropout,
            batch_size=self.batch_size,
            cross_validation=False,
        )
        split = Split(rows, rows, rows, 0.0, 0.0, hash=self.split.hash)
        return WorldModelTask(
            data, pinned, self.seed, device, split=split, seen=self.seen, agent=self.agent,
            kept=self.kept,
        )  # fmt: skip

    @property
    def steps_per_epoch(self) -> int:
        return len(_chunks(len(self.train_data), self.batch_size))

    @property
    def batch_size(self) -> int:
        """The option, or 256 cut down so a small pool still takes 8 steps an epoch."""
        if self.options.batch_size is not None:
            return self.options.batch_size
        return max(MIN_BATCH, min(DEFAULT_BATCH, len(self.train_data) // 8))

    def early_stopping(self, stop: bool = True) -> EarlyStopping:
        """Validate each epoch (every ``validate_every`` steps when an epoch is longer);
        ``stop=False`` keeps and serves the best weights but never ends the run early."""
        every = min(self.steps_per_epoch, self.options.validate_every)
        patience = self.options.patience if stop else None
        return EarlyStopping(STOP_METRIC, "min", patience, every, key=self.data_key)

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Batch, int]]:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.train_data), generator=generator)
        # One upload an epoch: a batch's slice moved on its own was a pageable copy, and
        # that waits for the step before it (a host sync every step on a GPU).
        order = index_to(order, self.train_data.device)
        # The epoch's rows gathered ``GATHER_BATCHES`` batches at a time, in its order: six
        # index kernels a block (seven for rows of the kept pool: Part), not a step, and
        # only the blocks the run reads (a 200-step run on a 1,000,000-record pool read a
        # fifth of the epoch it gathered: 0.95 s). 16, not 64: a run's last block is mostly
        # unread (200 steps at 100,000 records gathered 256 batches in blocks of 64, 208
        # in blocks of 16). A batch is a slice of its block, the same rows in the same order
        # as a gather of its slice of the order.
        chunks = _chunks(len(order), self.batch_size)
        for first in range(0, len(chunks), GATHER_BATCHES):
            block = chunks[first : first + GATHER_BATCHES]
            low, high = block[0][0], block[-1][1]
            shuffled = self.train_data.take(order[low:high])
            for start, end in block:
                yield shuffled.rows(start - low, end - low), end - start

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Held-out metrics (out-of-fold when cross-validated); the AUC with its 95%
        interval and the number of records it is measured on."""
        return self._measure(model, self.eval_data)

    def validate(self, model: nn.Module) -> dict[str, float]:
        """The same metrics on the validation part: early stopping's yardstick."""
        return self._measure(model, self.validation_data)

    def _measure(self, model: nn.Module, data: Batch) -> dict[str, float]:
        """The metrics on ``data``, the time they take counted in ``eval_seconds``; on the
        held-out part of a held-out split, its success logits and the digest of the weights
        that computed them kept (``held_out_evaluation``:
        the last evaluation's, the run's served weights' once fit() ends)."""
        start = time.perf_counter()
        try:
            out = self._predict(model, data)
            if data is self.eval_data and not self.cross_validated:
                logit = out.success_logit.detach().float().cpu()
                self.held_out_evaluation = logit, weights_digest(model)
            return _metrics(out, data)
        finally:
            self.eval_seconds += time.perf_counter() - start

    def _predict(self, model: nn.Module, data: Batch) -> WorldModelOutput:
        """The model's output; cross-validated, each record's from the member that did not
        train on it."""
        if not self.cross_validated:
            return forward_chunked(model, data.x)
        out = forward_chunked(model, data.x, per_member=True)
        record = (data.fold, torch.arange(len(data), device=data.fold.device))
        return WorldModelOutput(*(member_by_record[record] for member_by_record in out))

    def extra_state(self) -> dict[str, Any]:
        return world_model_state(
            self.encoder,
            self.config,
            agent=self.agent,
            data_schema_version=SCHEMA_VERSION,
            split={
                "seed": self.seed,
                "eval_fraction": self.split.eval_fraction,
                "validation_fraction": self.split.validation_fraction,
                "train_records": len(self.train_data),
                "folds": self.split.fold_count,  # 0: held-out
                "hash": self.split.hash,  # split.SPLIT_HASH: how records were drawn
            },
            data=self.seen.state_dict(),
        ) | {TRAINED_IDS: self.trained_ids, PER_RECORD: PER_RECORD_ARRAYS}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        if state.get("encoder") != self.encoder.state_dict():
            raise TrainRequestError(
                "the checkpoint's feature encoder differs from this run's; resume with the "
                "checkpoint's encoder (WorldModelTask(saved=...)) or start a fresh checkpoint "
                "folder"
            )


def _folds(split: Split, part: np.ndarray) -> Sequence[int] | None:
    """The folds of ``part``'s records when cross-validated (the training part's), else
    None (``NO_FOLD``)."""
    return split.folds if split.fold_count and part is split.train else None


def _encoded_parts(
    encoder: FeatureEncoder,
    columns: PoolColumns,
    numeric: torch.Tensor,
    split: Split,
    device: str,
) -> tuple[Part, Batch, Batch]:
    """The split's training, validation and held-out parts, each encoded on its own (a
    part that is another's array, as a whole-pool or cross-validated split's are, once)."""
    # The encoder's rows for each distinct categorical value, once for every part:
    # the parts' values are the pool's (Categorical.of_rows shares them).
    tables = encoder.tables(Categorical.of_rows(columns, columns.labelled[:0]))
    encoded: dict[int, Batch] = {}  # by array: the whole-pool task's parts are one

    def batch(part: np.ndarray) -> Batch:
        if id(part) not in encoded:
            categorical = Categorical.of_rows(columns, columns.labelled[part])
            x = encoder.encode_parts(categorical, numeric, torch.from_numpy(part), tables)
            labels = Labels.of_rows(columns, part)
            encoded[id(part)] = to_device(batch_of(x, labels, _folds(split, part)), device)
        return encoded[id(part)]

    return Part(batch(split.train)), batch(split.validation), batch(split.held_out)


def _kept_parts(
    kept: KeptEncoded,
    encoder: FeatureEncoder,
    columns: PoolColumns,
    numeric: torch.Tensor,
    stamp: np.ndarray | None,
    split: Split,
    device: str,
) -> tuple[Part, Batch, Batch]:
    """The split's parts as rows of every labelled record's, the kept encoded rows taken
    (``kept.pool``): the training part as their rows (no copy), the validation and
    held-out parts gathered (the model runs over them whole), the held-out part's
    encoded rows on the host grown from the last run's (``kept.part``)."""
    x = kept.pool(encoder, columns, numeric, stamp)
    folds = None
    if split.fold_count:  # each training record's fold, at its place in the pool
        folds = np.full(len(columns.labelled), NO_FOLD, np.int64)
        folds[split.train] = split.folds
    rows = to_device(batch_of(x, Labels.of_rows(columns, slice(None)), folds), device)
    index: dict[int, torch.Tensor] = {}  # by array: the whole-pool task's parts are one
    taken: dict[int, Batch] = {}

    def at(part: np.ndarray) -> torch.Tensor:
        if id(part) not in index:
            index[id(part)] = to_device(torch.from_numpy(part), device)
        return index[id(part)]

    def batch(part: np.ndarray) -> Batch:
        if id(part) in taken:
            return taken[id(part)]
        if part is split.held_out and part is not split.train and device == "cpu":
            # The held-out part grows at its end with the pool: its encoded rows are the
            # kept ones but for the new records' (kept.part), the rest gathered.
            labels = (t.index_select(0, at(part)) for t in rows[1:])
            taken[id(part)] = Batch(kept.part(x, part), *labels)
        else:
            taken[id(part)] = rows.take(at(part))
        return taken[id(part)]

    return Part(rows, at(split.train)), batch(split.validation), batch(split.held_out)


def _model_config(
    options: TaskOptions, n_features: int, train_examples: int, members: int = 1
) -> ModelConfig:
    """The preset with the options' overrides; the default preset is narrower on small pools.

    Measured on generated pools (benchmarks/world_model_quality.py): with under 2,000
    training records, hidden 64 ranks held-out attempts worse than hidden 32 (it fits the
    few hundred records' noise before validation notices); from a few thousand
    records on the two agree, and 64 has room for the larger pools.
    """
    names = ("hidden", "depth", "dropout")
    overrides: dict[str, Any] = {k: v for k in names if (v := getattr(options, k)) is not None}
    overrides["members"] = members
    if options.preset == "default" and options.hidden is None and train_examples < SMALL_POOL:
        overrides["hidden"] = SMALL_POOL_HIDDEN
    return ModelConfig.preset(options.preset, n_features, **overrides)


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    """Batch bounds over ``n`` rows; a tail under half a batch joins the batch before it
    (a step on a handful of examples is mostly noise: one record was a whole step)."""
    bounds = [(start, min(start + size, n)) for start in range(0, n, size)]
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < size / 2:
        bounds[-2:] = [(bounds[-2][0], n)]
    return bounds


def _metrics(out: WorldModelOutput, data: Batch) -> dict[str, float]:
    parts = world_model_losses(out, data.success, data.score, data.score_known, data.outcome)
    success_p = torch.sigmoid(out.success_logit.float())
    expected = torch.sigmoid(out.score_logit.float())
    value, low, high = auc_with_interval(success_p, data.success)
    per_record = binary_cross_entropy_with_logits(
        out.success_logit.float(), data.success, reduction="none"
    )
    return {
        "loss": float(parts.total),
        "success_bce": float(parts.success),
        # its standard error over these records: how far early stopping can trust it
        "success_bce_se": float(per_record.std() / len(data) ** 0.5) if len(data) > 1 else 0.0,
        "score_mse": float(parts.score),
        "outcome_ce": float(parts.outcome),
        "auc": value,
        "auc_ci_low": low,
        "auc_ci_high": high,
        "brier": brier(success_p, data.success),
        "score_mae": mae(expected, data.score, data.score_known),
        "outcome_accuracy": accuracy(out.outcome_logits.float(), data.outcome),
        "examples": float(len(data)),
    }


def probe_setup(data_path: Path | None, seed: int, agent: str) -> ProbeSetup:
    """The world model, its loss and a few real batches, for the precision probe.

    It probes one network (never a cross-validated ensemble: its members are the
    same network, and its FP32 islands are named by the single model's modules)."""
    options = TaskOptions(cross_validation=False, members=1)
    if data_path is None:
        with tempfile.TemporaryDirectory() as tmp:
            path = write_pool(Path(tmp), _PROBE_SAMPLE_COUNT, seed, agent=agent)
            data = read_trajectories(path)
    else:
        data = read_trajectories(Path(data_path))
    task = WorldModelTask(data, options, seed, agent=agent)
    batches = [b for b, _ in task.train_batches(0, seed)][:_PROBE_BATCHES]

    def build_model() -> torch.nn.Module:
        torch.manual_seed(seed)
        return task.build_model()  # one WorldModel: cross_validation=False

    return ProbeSetup(
        build_model=build_model,
        loss=task.loss,
        batches=batches,
        components={"heads": list(HEAD_MODULES), "trunk": list(TRUNK_MODULES)},
        learning_rate=options.learning_rate,
    )
