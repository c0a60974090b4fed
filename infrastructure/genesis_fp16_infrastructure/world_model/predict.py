"""The prediction API for Genesis: score attempts with an agent's latest trained world model.

::

    from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor, load_pool

    predictor = WorldModelPredictor.load(Path("state/agents/my_agent/checkpoints"))
    pool = load_pool(Path("data/trajectory_pools/my_agent/trajectory_pool.json"))
    p = predictor.predict_one(candidate_record, pool)  # a dict in the pool record shape
    p.success_probability, p.expected_score, p.outcome

The checkpoint is read with ``torch.load(weights_only=True)``, and the feature encoder
saved inside it encodes the attempts, so predictions after a restart equal those the
training process would make. The lineage comes from ``pool`` (:func:`load_pool`: parents'
scores and operators, grandparents, earlier siblings); a plain mapping id -> recorded
success_score gives the parents' scores only. A parent not found counts as unknown, as in
training. A candidate record without ``created_at`` is taken as created now, so every
scored sibling in the pool counts as earlier.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.agent_folder.pointer import candidates_dir, served_checkpoint
from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import OUTCOMES, AttemptInput, Trajectory
from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager, load_checkpoint
from genesis_fp16_infrastructure.training.run.early_stop import served_weights
from genesis_fp16_infrastructure.world_model.features import FeatureEncoder, PoolLike
from genesis_fp16_infrastructure.world_model.model import (
    ModelConfig,
    WorldModel,
    WorldModelEnsemble,
    WorldModelOutput,
    build_world_model,
)

STATE_KIND = "world_model"
STATE_VERSION = 1
# What a world-model checkpoint cannot resume or predict without: the fitted feature
# encoder and the model's shape (ModelConfig.to_dict()).
STATE_PARTS = ("encoder", "model")

AttemptLike = AttemptInput | Trajectory | Mapping[str, Any]

# How many activations (members x rows x hidden) a forward over many records holds at
# once: a scoring or an evaluation runs in chunks of that many rows. A whole held-out
# fifth in one forward (20,000 records x 5 members x 64 wide: 25 MB a layer) runs out of
# the CPU's cache; in chunks of ~3,300 rows the same forward took 0.17 s, not 0.29 s, on
# the 2-core host (issue 90). Each row's arithmetic is its own, but a matmul of fewer
# rows may block its sums otherwise: a chunk's logits can differ from the whole's in
# their last bit (measured: equal at 20,000 rows in chunks of 512 to 8,192).
# 1 << 19 (1,638 rows of the default 5 x 64 ensemble) rather than 1 << 20: 5-13% less
# over the held-out fifth of a 100,000 pool (19,548 rows: 38.4 -> 36.5 ms, 42.2 -> 37.0),
# 1-14% at 1,000,000 (196,000 rows), thread CPU, the same bits
# (benchmarks/results/chunk_rows_90_cpu-2-cores.md, benchmarks/chunk_rows.py).
CHUNK_ACTIVATIONS = 1 << 19
# ... but never fewer rows than this a chunk: a wide model's matmul of a few dozen rows
# is slower than the cache it saves (5 x 2,048 wide over 2,000 rows: 51 rows a chunk
# took 1,386 ms, 256 rows 1,055, and 1 << 20's 102 rows 1,116).
MIN_CHUNK_ROWS = 256
# Another device's chunks (a GPU's): the cache that halved the CPU's chunk is a CPU's, and
# halving it on a GPU doubles the forward's kernel launches. A GPU keeps the 1 << 20 its
# last measured runs used (the H200's of 2026-11-28); no GPU measured 1 << 19.
ACCELERATOR_CHUNK_ACTIVATIONS = 1 << 20


def chunk_rows(width: int, device: torch.device) -> int:
    """The rows of one chunk of a forward over many records on ``device``, for a model
    ``width`` activations wide a row (members x hidden)."""
    activations = CHUNK_ACTIVATIONS if device.type == "cpu" else ACCELERATOR_CHUNK_ACTIVATIONS
    return max(MIN_CHUNK_ROWS, activations // width)


def forward_chunked(
    model: nn.Module, x: torch.Tensor, per_member: bool = False
) -> WorldModelOutput:
    """``model(x)`` (``per_member``: an ensemble's every member) computed in chunks of
    rows (:func:`chunk_rows`: :data:`CHUNK_ACTIVATIONS` on a CPU, at least
    :data:`MIN_CHUNK_ROWS`), joined: what one forward gives, without its memory. Call it
    under ``torch.no_grad()``: it is for scoring, not training.

    >>> model = build_world_model(ModelConfig(in_features=4, members=2)).eval()
    >>> x = torch.randn(10, 4)
    >>> with torch.no_grad():
    ...     torch.equal(forward_chunked(model, x).success_logit, model(x).success_logit)
    True
    """
    config = getattr(model, "config", None) or getattr(
        getattr(model, "module", None), "config", None
    )  # a DDP or FSDP wrapper's: its module's
    members = config.members if isinstance(config, ModelConfig) else 1
    width = members * config.hidden if isinstance(config, ModelConfig) else 1
    rows = chunk_rows(width, x.device)
    if len(x) <= rows:
        return model(x, per_member=True) if per_member else model(x)
    if members == 1:
        parts = [model(c) for c in torch.split(x, rows)]
        return WorldModelOutput(*(torch.cat(part) for part in zip(*parts, strict=True)))
    # An ensemble's members joined along the rows, then their mean over all of them at
    # once, as one forward takes it: a mean of chunks of other widths may sum in another
    # order, a last bit apart.
    parts = [model(c, per_member=True) for c in torch.split(x, rows)]
    stacked = WorldModelOutput(*(torch.cat(part, dim=1) for part in zip(*parts, strict=True)))
    return stacked if per_member else WorldModelOutput(*(t.mean(0) for t in stacked))


def world_model_state(encoder: FeatureEncoder, config: ModelConfig, **info: Any) -> dict[str, Any]:
    """What a world-model checkpoint keeps beside the weights, as plain types."""
    return {
        "kind": STATE_KIND,
        "version": STATE_VERSION,
        "encoder": encoder.state_dict(),
        "model": config.to_dict(),
        **info,
    }


def read_world_model_state(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The world-model part of a loaded checkpoint; a :class:`CheckpointError` (a
    ValueError) when it holds something else or lacks a part that encoding or building
    the model needs (the encoder, the shape): ``CheckpointManager.load_latest`` then
    skips it with a warning naming it and tries the older one."""
    extra = checkpoint.get(keys.EXTRA) or {}
    if extra.get("kind") != STATE_KIND or extra.get("version") != STATE_VERSION:
        raise CheckpointError(
            f"checkpoint holds {extra.get('kind')!r} version {extra.get('version')!r}, "
            f"not a {STATE_KIND!r} version {STATE_VERSION}"
        )
    missing = [part for part in STATE_PARTS if not isinstance(extra.get(part), Mapping)]
    if missing:
        raise CheckpointError(
            f"the checkpoint's world-model state has no {' and no '.join(missing)}"
        )
    return dict(extra)


@dataclass(frozen=True)
class Prediction:
    """The world model's forecast for one attempt."""

    success_probability: float
    expected_score: float
    outcome: str
    outcome_probabilities: dict[str, float]


class WorldModelPredictor:
    """A trained world model with its feature encoder, in fp32 eval mode."""

    def __init__(
        self,
        model: WorldModel | WorldModelEnsemble,
        encoder: FeatureEncoder,
        checkpoint: Path | None = None,
    ) -> None:
        self.model = model.eval()
        self.encoder = encoder
        self.checkpoint = checkpoint

    @classmethod
    def load(cls, path: Path, device: str = "cpu") -> WorldModelPredictor:
        """Load a checkpoint file; or, from a folder, the model its served-model pointer
        names (``served.json``, agent_folder.pointer: the daemon's agent folders), and
        in a folder with no pointer (``train --checkpoint-dir``, one candidate's folder)
        its newest valid checkpoint. An unreadable pointer raises ServedPointerError."""
        path = Path(path)
        named = served_checkpoint(path) if path.is_dir() else None
        if named is not None:
            path = named
        elif path.is_dir() and candidates_dir(path).is_dir():
            raise FileNotFoundError(
                f"no model served from {str(path)!r} yet: its first candidate is training"
            )
        if path.is_dir():
            found = CheckpointManager(path).load_latest(lambda s, _: read_world_model_state(s))
            if found is None:
                raise FileNotFoundError(f"no valid world-model checkpoint in {str(path)!r}")
            state, path = found
        else:
            state = load_checkpoint(path)
        predictor = cls.of_state(state, path)
        predictor.model.to(device)
        return predictor

    @classmethod
    def of_state(cls, state: Mapping[str, Any], path: Path | None = None) -> WorldModelPredictor:
        """A loaded checkpoint's served weights (an ensemble's: its members' mean) and
        encoder, on the CPU; ValueError when it is not a world model's."""
        saved = read_world_model_state(state)
        model = build_world_model(ModelConfig.from_dict(saved["model"]))
        model.load_state_dict(served_weights(state))
        return cls(model, FeatureEncoder.from_state(saved["encoder"]), path)

    def predict(
        self, attempts: Sequence[AttemptLike], pool: PoolLike | None = None
    ) -> list[Prediction]:
        """Score a batch of attempts (pool-shaped dicts, Trajectory or AttemptInput)."""
        inputs = [_as_input(a) for a in attempts]
        x = self.encoder.encode(inputs, pool if pool is not None else {})
        device = next(self.model.parameters()).device
        with torch.no_grad():
            out = forward_chunked(self.model, x.to(device))
        success = torch.sigmoid(out.success_logit.float()).cpu().tolist()
        expected = torch.sigmoid(out.score_logit.float()).cpu().tolist()
        classes = torch.softmax(out.outcome_logits.float(), dim=-1).cpu().tolist()
        return [
            Prediction(
                success_probability=s,
                expected_score=e,
                outcome=OUTCOMES[max(range(len(OUTCOMES)), key=c.__getitem__)],
                outcome_probabilities=dict(zip(OUTCOMES, c, strict=True)),
            )
            for s, e, c in zip(success, expected, classes, strict=True)
        ]

    def predict_one(self, attempt: AttemptLike, pool: PoolLike | None = None) -> Prediction:
        """Score one attempt."""
        return self.predict([attempt], pool)[0]


def load_pool(path: Path) -> Pool:
    """Every record of a pool file or folder, for the lineage of the attempts to score
    (read as training reads it: the lineage needs no record's text)."""
    return read_trajectories(Path(path), keep_text=False).pool


def _as_input(attempt: AttemptLike) -> AttemptInput:
    if isinstance(attempt, AttemptInput):
        return attempt
    if isinstance(attempt, Trajectory):
        return attempt.to_input()
    record = dict(attempt)
    record.setdefault("trajectory_id", "candidate")
    record.setdefault("created_at", time.time())  # a candidate is about to run: now
    return Trajectory.model_validate(record).to_input()
