"""The SE-Darwin world model as a ``TrainingTask`` for ``fit()``
(``genesis_fp16_infrastructure.training.run.fit``).

The data is read once and evaluated one of two ways, chosen by the pool's size:

* **Held-out** (pools of 3,334 labelled records and more): split three ways by a hash of
  (seed, trajectory_id), so that the split does not depend on file order: a held-out part
  (the run's reported evaluation), and out of the rest a validation part (early
  stopping's yardstick) and the training part. Split sizes follow the pool
  (``split_fractions``): the held-out part aims at 1,000 records, at least 10% and at
  most 30% of the pool, so that its AUC is not mostly the split's luck (its 95% interval
  is reported next to it); validation takes the same share of what is left, at most 20%.
* **Cross-validated** (smaller pools, where 30% of the pool is under 1,000 records):
  the records are dealt into ``folds`` (5) folds by the same kind of hash, and the model
  is an ensemble of as many networks trained together, member k on every fold but k.
  Each record's out-of-fold prediction comes from the member that never trained on it:
  their loss is early stopping's yardstick and their AUC the reported evaluation, over
  every record of the pool. The served model is the members' mean, trained on all of
  the pool; no record is kept out of it. On 500-record pools this ranks fresh attempts
  0.06 AUC better than a held-out split (docs/se-darwin.md: 0.890 against 0.830).

The features are encoded with an encoder fitted on the training part (every record when
cross-validated), or the one saved in the checkpoint being resumed, and kept as tensors
on the training device.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn.functional import binary_cross_entropy_with_logits
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint, fingerprint
from genesis_fp16_infrastructure.data.readers import (
    DataTooLarge,
    FileCache,
    ReadResult,
    read_trajectories,
)
from genesis_fp16_infrastructure.data.schema import SCHEMA_VERSION, Example
from genesis_fp16_infrastructure.machine_memory import machine_memory_bytes
from genesis_fp16_infrastructure.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.training.run.early_stop import EarlyStopping
from genesis_fp16_infrastructure.world_model.features import (
    FeatureEncoder,
    PoolLike,
    numeric_columns,
)
from genesis_fp16_infrastructure.world_model.metrics import accuracy, auc_with_interval, brier, mae
from genesis_fp16_infrastructure.world_model.model import (
    ModelConfig,
    WorldModelOutput,
    build_world_model,
    stack_loop_optimizer_state,
    world_model_losses,
)
from genesis_fp16_infrastructure.world_model.predict import world_model_state

logger = logging.getLogger(__name__)


# What a run costs in resident memory per byte of pool file, at its peak, with room to
# spare. Measured since each file's records are kept as pre-attempt inputs rather than
# validated objects (issue 36): a generated 100,000-record pool (144 MiB, one file) peaked
# at 842 MiB (5.9x, ~240 MiB of it the imports) in a one-epoch `train`; as ten daily
# .jsonl files at 620 MiB (benchmarks/results/pool_scale_cpu-amd-epyc-2-cores.md). Before,
# 1,225 MiB (8.5x), and the factor was 10. The default max_pool_bytes is the run's memory
# limit (or the machine's memory) divided by it.
POOL_MEMORY_FACTOR = 7
# Named in the refusal, so that an operator sees where the factor comes from.
MEASURED_PEAK = (
    "5.9x on a generated 100,000-record pool, benchmarks/results/pool_scale_cpu-amd-epyc-2-cores.md"
)
MAX_POOL_SETTING = "GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_POOL_BYTES"


def default_max_pool_bytes(memory: int | None = None) -> int:
    """The pool bytes a run may read when the option is unset: ``memory`` (the run's
    memory limit; None: this machine's memory, or its cgroup limit) / POOL_MEMORY_FACTOR::

        default_max_pool_bytes(10 * 2**30) == 2**30
    """
    return (machine_memory_bytes() if memory is None else memory) // POOL_MEMORY_FACTOR


def read_pool(
    path: Path,
    options: TaskOptions,
    quarantine: Path | None = None,
    memory_limit: int | None = None,
    cache: FileCache | None = None,
) -> ReadResult:
    """The pool at ``path``, size-checked first against the options' ``max_pool_bytes``
    (unset: derived from ``memory_limit``, the run's, or the machine's memory); a pool
    over it is one :class:`TrainRequestError` line naming its size, the limit and the
    setting (train exits 2, the daemon logs one line)."""
    limit = options.max_pool_bytes
    if limit is None:
        memory = machine_memory_bytes() if memory_limit is None else memory_limit
        limit = default_max_pool_bytes(memory)
        whose = (
            "the run's memory limit (GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES)"
            if memory_limit is not None
            else "this machine's memory (or its cgroup limit)"
        )
        source = f"{whose}, {memory / 2**20:,.0f} MiB, / {POOL_MEMORY_FACTOR}"
    else:
        source = f"{MAX_POOL_SETTING}"
    try:
        # keep_text=False: the run needs each record's numbers, not its change's text
        return read_trajectories(
            path, quarantine=quarantine, max_bytes=limit or None, cache=cache, keep_text=False
        )
    except DataTooLarge as exc:
        raise TrainRequestError(
            f"{exc} (the limit is {source}); a run peaks at about {POOL_MEMORY_FACTOR}x its "
            f"pool's bytes in resident memory (measured {MEASURED_PEAK}). "
            f"Raise {MAX_POOL_SETTING} (the se_darwin option max_pool_bytes; 0: no limit) "
            "on a machine with the memory, or train on part of the pool"
        ) from None


@dataclass(frozen=True)
class TaskOptions:
    """Knobs of one SE-Darwin run; ``TrainRequest.options`` may set any of them."""

    preset: str = "default"
    hidden: int | None = None  # None: the preset's, narrower on small pools (_model_config)
    depth: int | None = None
    dropout: float | None = None
    batch_size: int | None = None  # None: 256, fewer on small pools (at least 8 steps an epoch)
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    eval_fraction: float | None = None  # None: sized by the pool (split_fractions)
    # Early stopping on the validation success log-loss (STOP_METRIC): validate every
    # epoch, or every `validate_every` steps when an epoch is longer; stop after
    # `patience` validations without improvement; `max_epochs` caps a run that gives
    # neither steps nor epochs.
    early_stopping: bool = True
    patience: int = 8
    validate_every: int = 50
    max_epochs: int = 100
    # What is served: "split", the best validated weights of the run on the training part;
    # "whole", a second model trained on every labelled record for the split run's best
    # step count (the reported eval stays the split model's; docs/se-darwin.md).
    final_fit: str = "split"
    # Evaluation: None picks by the pool's size (cross-validated under CROSS_VALIDATION_
    # BELOW records, held-out from there); True or False forces it. An explicit
    # eval_fraction or final_fit="whole" asks for a held-out split.
    cross_validation: bool | None = None
    folds: int = 5
    # The most bytes of pool files a run reads (checked before reading: parsed records
    # cost several times their bytes, all held at once). None: the run's memory limit
    # (TrainRequest.memory_limit_bytes; without one, this machine's memory or its cgroup
    # limit) / POOL_MEMORY_FACTOR; 0: no limit.
    max_pool_bytes: int | None = None

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> TaskOptions:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            raise TrainRequestError(
                f"unknown se_darwin option(s) {', '.join(unknown)}; "
                f"valid: {', '.join(sorted(known))}"
            )
        out = cls(**options)
        if out.final_fit not in FINAL_FITS:
            raise TrainRequestError(
                f"final_fit={out.final_fit!r}: choose from {', '.join(FINAL_FITS)}"
            )
        if out.cross_validation and (out.eval_fraction is not None or out.final_fit != "split"):
            raise TrainRequestError(
                "cross_validation=true trains on every record: eval_fraction and "
                "final_fit='whole' are held-out options; leave them out"
            )
        if out.folds < 2:
            raise TrainRequestError(f"folds={out.folds!r}: must be at least 2")
        if out.eval_fraction is not None and not 0.0 < out.eval_fraction < 1.0:
            raise TrainRequestError(f"eval_fraction={out.eval_fraction!r}: must be between 0 and 1")
        if out.max_pool_bytes is not None and out.max_pool_bytes < 0:
            raise TrainRequestError(
                f"max_pool_bytes={out.max_pool_bytes!r}: must be at least 0 (0: no limit)"
            )
        for name in ("batch_size", "patience", "validate_every", "max_epochs"):
            if getattr(out, name) is not None and getattr(out, name) < 1:
                raise TrainRequestError(f"{name}={getattr(out, name)!r}: must be at least 1")
        return out

    def cross_validated(self, examples: int) -> bool:
        """Whether a pool of ``examples`` labelled records trains a cross-validated ensemble."""
        if self.cross_validation is not None:
            return self.cross_validation
        if self.eval_fraction is not None or self.final_fit != "split":
            return False
        return examples < CROSS_VALIDATION_BELOW


class Batch(NamedTuple):
    x: torch.Tensor
    success: torch.Tensor
    score: torch.Tensor
    score_known: torch.Tensor
    outcome: torch.Tensor
    fold: torch.Tensor  # each record's fold when cross-validated, else 0

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device) for t in self))

    def take(self, index: torch.Tensor) -> Batch:
        return Batch(*(t[index] for t in self))

    def __len__(self) -> int:
        return int(self.x.shape[0])


DEFAULT_BATCH, MIN_BATCH = 256, 16
EVAL_TARGET = 1000  # held-out records for a stable AUC (about +-0.03 at 95%)
EVAL_BOUNDS = (0.1, 0.3)
VALIDATION_MAX = 0.2
# The most validation records (issue 36): the early-stopping yardstick, the success
# log-loss, has a standard error of about 0.6 / sqrt(n) (0.004 at 20,000 records, far below
# the improvements patience waits for); validation reports it as success_bce_se. A
# 1,000,000-record pool validated on 10% of its rest (90,000 records) spent more time
# validating than training between two validations.
VALIDATION_CAP = 20_000
# Early stopping watches the validation log-loss of success, not the three heads' total:
# success is what the model is for, and on 500-record pools the total's minimum comes
# epochs before success's (mean held-out AUC over 40 pools 0.822 stopping on the total,
# 0.841 on success; benchmarks/world_model_quality.py at c9d5b15, on held-out splits).
STOP_METRIC = "success_bce"
FINAL_FITS = ("split", "whole")
SMALL_POOL, SMALL_POOL_HIDDEN = 2000, 32  # training records under which the default is narrower
# Under this many labelled records a 30% held-out part holds fewer than EVAL_TARGET, and
# the pool is cross-validated instead (module docstring).
CROSS_VALIDATION_BELOW = round(EVAL_TARGET / EVAL_BOUNDS[1]) + 1


def is_held_out(trajectory_id: str, seed: int, fraction: float, salt: str = "") -> bool:
    """The deterministic split: a stable hash of (seed, id), independent of file order."""
    return _id_hash(trajectory_id, seed, salt) / 2**64 < fraction


def _id_hash(trajectory_id: str, seed: int, salt: str) -> int:
    """A stable 64-bit hash of (seed, salt, id): the held-out split's and the folds'."""
    key = f"{seed}:{salt}{trajectory_id}"
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def split_fractions(examples: int, eval_fraction: float | None = None) -> tuple[float, float]:
    """(held-out share of the pool, validation share of the rest) for a pool this size.

    >>> split_fractions(500), split_fractions(5000), split_fractions(50000)
    ((0.3, 0.2), (0.2, 0.2), (0.1, 0.1))
    >>> split_fractions(1_000_000)  # validation capped at VALIDATION_CAP records
    (0.1, 0.0222)
    """
    low, high = EVAL_BOUNDS
    if eval_fraction is None:
        eval_fraction = min(high, max(low, EVAL_TARGET / max(examples, 1)))
    rest = examples * (1 - eval_fraction)
    validation = min(VALIDATION_MAX, max(low, EVAL_TARGET / max(rest, 1)))
    # Past VALIDATION_CAP records a larger sample only costs: each validation runs the
    # model over all of it, every `validate_every` steps. The rest trains.
    validation = min(validation, VALIDATION_CAP / max(rest, 1))
    return round(eval_fraction, 4), round(validation, 4)


def to_batch(
    encoder: FeatureEncoder,
    examples: Sequence[Example],
    pool: PoolLike,
    folds: Sequence[int] | None = None,
    numeric: torch.Tensor | None = None,
) -> Batch:
    """Encode examples, their labels and their folds into one batch of tensors
    (``numeric``: the examples' ``numeric_columns``, when the caller has them)."""
    x = encoder.encode([e.attempt for e in examples], pool, numeric)
    return Batch(
        x=x,
        success=torch.tensor([float(e.label.success) for e in examples]),
        score=torch.tensor([e.label.score if e.label.score is not None else 0.0 for e in examples]),
        score_known=torch.tensor([e.label.score is not None for e in examples]),
        outcome=torch.tensor([e.label.outcome_index for e in examples], dtype=torch.long),
        fold=torch.tensor(folds if folds is not None else [0] * len(examples), dtype=torch.long),
    )


class Split(NamedTuple):
    train: list[Example]
    validation: list[Example]
    held_out: list[Example]
    eval_fraction: float
    validation_fraction: float
    folds: tuple[int, ...] = ()  # cross-validated: each record's fold, in train's order
    fold_count: int = 0


def split_examples(data: ReadResult, seed: int, eval_fraction: float | None = None) -> Split:
    """Held-out, validation and training parts, each by a hash of (seed, id)."""
    fraction, validation = split_fractions(len(data.examples), eval_fraction)
    held, rest = _cut(data.examples, seed, fraction)
    val, train = _cut(rest, seed, validation, "validation:")
    if not train or not held or not val:
        raise TrainRequestError(
            f"{len(data.examples)} labelled example(s) cannot be split into train, "
            f"validation and held-out parts (eval_fraction={fraction}); add data"
        )
    return Split(train, val, held, fraction, validation)


def choose_split(
    data: ReadResult, options: TaskOptions, seed: int, saved: Mapping[str, Any] | None = None
) -> Split:
    """Cross-validated folds or the held-out split, by the options and the pool's size;
    a resumed run keeps its checkpoint's choice (a pool that grew past the threshold goes
    on as it began), unless ``cross_validation`` explicitly asks for the other."""
    cross = options.cross_validated(len(data.examples))
    folds = options.folds
    if saved is not None:
        members = int(saved["model"].get("members", 1))
        asked = options.cross_validation
        if asked is not None and asked != (members > 1):
            raise TrainRequestError(
                f"cannot resume this checkpoint: it holds {members} network(s), and "
                f"cross_validation={str(asked).lower()} asks for {folds if asked else 1}; "
                "start a fresh checkpoint folder"
            )
        if members > 1 and folds != members:
            raise TrainRequestError(
                f"cannot resume this checkpoint: it holds {members} networks, one per fold, "
                f"and this run asks for folds={folds}; start a fresh checkpoint folder"
            )
        if cross != (members > 1):
            kinds = ("held-out", "cross-validated")
            logger.info(
                "resuming a %s checkpoint: the run stays %s (this pool alone would be %s)",
                kinds[members > 1],
                kinds[members > 1],
                kinds[cross],
            )
        cross = members > 1
    return (
        fold_split(data, seed, folds)
        if cross
        else split_examples(data, seed, options.eval_fraction)
    )


def fold_split(data: ReadResult, seed: int, folds: int) -> Split:
    """Every record in each part, dealt into ``folds`` folds (see ``assign_folds``)."""
    everything = list(data.examples)
    if len(everything) < folds:
        raise TrainRequestError(
            f"{len(everything)} labelled example(s) cannot be dealt into {folds} folds; add data"
        )
    dealt = assign_folds([e.trajectory_id for e in everything], seed, folds)
    return Split(everything, everything, everything, 0.0, 0.0, tuple(dealt), folds)


def assign_folds(ids: Sequence[str], seed: int, folds: int) -> list[int]:
    """Each id's fold, from a hash of (seed, id) alone: independent of file order, and a
    record keeps its fold as the pool grows (a resumed member never trains on a record
    it was scored on). Fold sizes vary as a draw does (500 records: 100 +- 9)."""
    return [_id_hash(trajectory_id, seed, "fold:") % folds for trajectory_id in ids]


def _cut(
    examples: Sequence[Example], seed: int, fraction: float, salt: str = ""
) -> tuple[list[Example], list[Example]]:
    """(the examples ``is_held_out`` picks, the others), hashing each id once."""
    picked: list[Example] = []
    others: list[Example] = []
    for e in examples:
        (picked if is_held_out(e.trajectory_id, seed, fraction, salt) else others).append(e)
    return picked, others


class SEDarwinTask:
    """Everything ``fit()`` needs to train the SE-Darwin world model on one dataset."""

    def __init__(
        self,
        data: ReadResult,
        options: TaskOptions,
        seed: int,
        device: str = "cpu",
        saved: Mapping[str, Any] | None = None,
        split: Split | None = None,
        seen: DataFingerprint | None = None,
    ) -> None:
        self.options = options
        self.seed = seed
        self.eval_seconds = 0.0  # spent in evaluate() and validate(): the run's eval phase
        # Every labelled record read (held-out ones too), kept in each checkpoint: the next
        # scheduled run compares its pool with it (genesis_fp16_infrastructure.data.fingerprint).
        self.seen = seen if seen is not None else fingerprint(data.examples)
        self.split = split = split or choose_split(data, options, seed, saved)
        self.members = max(1, split.fold_count)
        train, held = split.train, split.held_out
        # The unscaled numeric features of every record, computed once: each part takes its
        # rows, and the drift report and the promotion gate take them after the run
        # (take_numeric_rows), instead of working them out again.
        position = {id(e): i for i, e in enumerate(data.examples)}
        self._numeric_rows: torch.Tensor | None = None

        def numeric(part: Sequence[Example]) -> torch.Tensor:
            if self._numeric_rows is None:
                attempts = [e.attempt for e in data.examples]
                self._numeric_rows = numeric_columns(attempts, data.pool)
            rows = [position.get(id(e)) for e in part]
            if any(i is None for i in rows):  # not the pool's own records: worked out here
                return numeric_columns([e.attempt for e in part], data.pool)
            return self._numeric_rows[rows]

        if saved is not None:  # resuming: encode exactly as the checkpointed run did
            try:
                self.encoder = FeatureEncoder.from_state(saved["encoder"])
            except ValueError as exc:  # e.g. a checkpoint from before encoder version 2
                raise TrainRequestError(f"cannot resume this checkpoint: {exc}") from exc
            self.config = ModelConfig.from_dict(saved["model"])
        else:
            self.encoder = FeatureEncoder.fit(
                [e.attempt for e in train],
                data.pool,
                [e.label.success for e in train],
                numeric=numeric(train),
            )
            # A member trains on all folds but one: its width follows that many records.
            member_records = len(train) * (self.members - 1) // self.members or len(train)
            self.config = _model_config(
                options, self.encoder.n_features, member_records, self.members
            )
        self.pool = data.pool
        encoded: dict[int, Batch] = {}  # by list: the whole-pool task's parts are one list

        def batch(part: Sequence[Example]) -> Batch:
            if id(part) not in encoded:
                folds = split.folds if split.fold_count and part is train else None
                encoded[id(part)] = to_batch(
                    self.encoder, part, data.pool, folds, numeric(part)
                ).to(device)
            return encoded[id(part)]

        self.train_data = batch(train)
        self.validation_data = batch(split.validation)
        self.eval_data = batch(held)
        ids = sorted({e.trajectory_id for e in (*train, *split.validation)})
        self.data_key = hashlib.blake2b("\n".join(ids).encode(), digest_size=8).hexdigest()
        if self.cross_validated:
            logger.info(
                "se_darwin task: %d examples in %d folds (cross-validated), %d features, model %s",
                len(train),
                self.members,
                self.encoder.n_features,
                self.config,
            )
            return
        logger.info(
            "se_darwin task: %d train, %d validation, %d held-out examples, %d features, model %s",
            len(train),
            len(split.validation),
            len(held),
            self.encoder.n_features,
            self.config,
        )

    def take_numeric_rows(self) -> torch.Tensor | None:
        """The unscaled numeric features of every record of the task's data, in its order
        (None when the task did not need them); the task keeps no reference afterwards."""
        rows, self._numeric_rows = self._numeric_rows, None
        return rows

    @classmethod
    def from_path(
        cls,
        path: Path,
        options: TaskOptions,
        seed: int,
        device: str = "cpu",
        quarantine: Path | None = None,
        saved: Mapping[str, Any] | None = None,
    ) -> tuple[SEDarwinTask, ReadResult]:
        data = read_pool(path, options, quarantine)
        return cls(data, options, seed, device, saved), data

    @property
    def cross_validated(self) -> bool:
        return self.members > 1

    def on_whole_pool(self, data: ReadResult, device: str = "cpu") -> SEDarwinTask:
        """A task training on every labelled record of ``data`` (``final_fit="whole"``).

        Its encoder is fitted on all of them; the model's shape and the batch size are
        this task's, so that a step count found here means the same there. Its validation
        and held-out parts are its training records: its own metrics are not a measure.
        """
        everything = list(data.examples)
        pinned = replace(
            self.options,
            hidden=self.config.hidden,
            depth=self.config.depth,
            dropout=self.config.dropout,
            batch_size=self.batch_size,
            cross_validation=False,
        )
        split = Split(everything, everything, everything, 0.0, 0.0)
        return SEDarwinTask(data, pinned, self.seed, device, split=split, seen=self.seen)

    def build_model(self) -> nn.Module:
        return build_world_model(self.config)

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        device = next(model.parameters()).device.type
        optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=self.options.learning_rate,
            weight_decay=self.options.weight_decay,
            fused=device in ("cpu", "cuda"),
            # Step counters on the device, so the whole step can be a CUDA graph
            # (cuda_graph); the same arithmetic as without. CPU steps cannot be captured.
            capturable=device == "cuda",
        )
        # Checkpoints of the loop-layout ensemble (one WorldModel per member) resume.
        optimizer.register_load_state_dict_pre_hook(stack_loop_optimizer_state)
        return [optimizer]

    def build_schedulers(self, optimizers: Sequence[Optimizer]) -> Sequence[LRScheduler]:
        return ()

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
        for start, end in _chunks(len(order), self.batch_size):
            index = order[start:end].to(self.train_data.x.device)
            yield self.train_data.take(index), len(index)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """The three heads' loss; cross-validated, the sum of each member's on the records
        outside its fold (a member's gradient is what it would be trained alone)."""
        labels = (batch.success, batch.score, batch.score_known, batch.outcome)
        if not self.cross_validated:
            return world_model_losses(model(batch.x), *labels).total
        out: WorldModelOutput = model(batch.x, per_member=True)  # through any DDP/FSDP wrapper
        # Every member's loss at once: row k keeps the records outside fold k.
        members = torch.arange(self.members, device=batch.fold.device).unsqueeze(1)
        return world_model_losses(out, *labels, weight=batch.fold != members).total.sum()

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Held-out metrics (out-of-fold when cross-validated); the AUC with its 95%
        interval and the number of records it is measured on."""
        start = time.perf_counter()
        try:
            return _metrics(self._predict(model, self.eval_data), self.eval_data)
        finally:
            self.eval_seconds += time.perf_counter() - start

    def validate(self, model: nn.Module) -> dict[str, float]:
        """The same metrics on the validation part: early stopping's yardstick."""
        start = time.perf_counter()
        try:
            return _metrics(self._predict(model, self.validation_data), self.validation_data)
        finally:
            self.eval_seconds += time.perf_counter() - start

    def _predict(self, model: nn.Module, data: Batch) -> WorldModelOutput:
        """The model's output; cross-validated, each record's from the member that did not
        train on it."""
        if not self.cross_validated:
            return model(data.x)
        out: WorldModelOutput = model(data.x, per_member=True)
        fold = data.fold.unsqueeze(0)
        return WorldModelOutput(
            out.success_logit.gather(0, fold).squeeze(0),
            out.score_logit.gather(0, fold).squeeze(0),
            out.outcome_logits.gather(
                0, fold.unsqueeze(-1).expand(1, *out.outcome_logits.shape[1:])
            ).squeeze(0),
        )

    def extra_state(self) -> dict[str, Any]:
        return world_model_state(
            self.encoder,
            self.config,
            agent="se_darwin",
            data_schema_version=SCHEMA_VERSION,
            split={
                "seed": self.seed,
                "eval_fraction": self.split.eval_fraction,
                "validation_fraction": self.split.validation_fraction,
                "train_records": len(self.train_data),
                "folds": self.split.fold_count,  # 0: held-out
            },
            data=self.seen.state_dict(),
        )

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        if state.get("encoder") != self.encoder.state_dict():
            raise TrainRequestError(
                "the checkpoint's feature encoder differs from this run's; resume with the "
                "checkpoint's encoder (SEDarwinTask(saved=...)) or start a fresh checkpoint folder"
            )


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
