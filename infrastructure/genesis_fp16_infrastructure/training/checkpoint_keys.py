"""The keys of a checkpoint file, in one place, with the schema version they belong to.

A checkpoint is one ``dict`` saved with ``torch.save`` and loaded with
``torch.load(weights_only=True)``; everything under these keys is plain Python values,
tensors and state dicts, never a custom class. Bump :data:`SCHEMA_VERSION` whenever a key
changes meaning; the loader refuses files of another version.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

SCHEMA = "schema_version"  # int, == SCHEMA_VERSION
MODEL = "model"  # model.state_dict()
OPTIMIZER = "optimizer"  # list of optimizer.state_dict(), in the task's order
SCHEDULER = "scheduler"  # list of scheduler.state_dict(), may be empty
SCALER = "scaler"  # LossScaler.state_dict(): always present, also in fp32 and bf16 runs
PRECISION = "precision"  # {"requested", "used", "reason"}
STEP = "step"  # optimizer steps taken so far, skipped ones included
EPOCH = "epoch"  # the epoch the next batch comes from
BATCH = "batch"  # batches of that epoch already consumed
RNG = "rng"  # see genesis_fp16_infrastructure.training.rng.capture_rng_state
RNG_PER_RANK = "rng_per_rank"  # data-parallel runs: every rank's RNG state, by rank (optional)
CONFIG = "config"  # the resolved training config, as a plain dict
STATS = "stats"  # the trainer's run counters (steps, skipped steps, samples, ...)
EXTRA = "extra"  # task state such as a feature encoder: plain types and tensors only
EARLY_STOP = "early_stop"  # EarlyStopTracker.state_dict(), best weights included (optional)
# The run that wrote it (optional): {"steps", "epochs"} as asked, {"target_step",
# "target_epoch"} it aims at, and "complete" (False while under way or stopped early).
RUN = "run"

REQUIRED = (SCHEMA, MODEL, OPTIMIZER, SCHEDULER, SCALER, PRECISION, STEP, RNG, CONFIG)
