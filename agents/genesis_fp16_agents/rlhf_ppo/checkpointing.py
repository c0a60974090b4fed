"""Saving and resuming a PPO run through the core's atomic, weights_only checkpoints.

The core :class:`Trainer` state (policy + critic master weights, optimizer, scaler, step,
RNG) is stored as is; the PPO-specific state goes under the ``extra`` key: the frozen
reference weights, the iteration count, the rollout sampler's generator and the preset.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from genesis_fp16_agents.rlhf_ppo.engine import PPOEngine
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys

REFERENCE = "reference"
ITERATIONS = "iterations"
GENERATOR = "generator"
SAMPLER = "sample_generator"  # {"device": "cuda", "state": ByteTensor}
PRESET = "preset"

logger = logging.getLogger(__name__)


def save_engine(engine: PPOEngine, directory: Path, keep: int = 3) -> Path:
    """Write the engine's state atomically under ``directory``; returns the file."""
    state = engine.trainer.state_dict()
    state[keys.CONFIG] = {
        **state[keys.CONFIG],
        "ppo": _plain(dataclasses.asdict(engine.cfg)),
        "preset": engine.preset.as_dict(),
    }
    state[keys.EXTRA] = ppo_state(engine)
    return CheckpointManager(directory, keep=keep).save(state)


def ppo_state(engine: PPOEngine) -> dict[str, Any]:
    """The PPO state outside the core Trainer (checkpoint ``extra``, guard snapshots).

    The tensors alias the live reference weights: copy before keeping them.
    """
    return {
        REFERENCE: engine.reference_fp32.state_dict(),  # fp32: the exact initial policy
        ITERATIONS: engine.iterations,
        GENERATOR: engine.gen.get_state(),
        SAMPLER: {"device": engine.sample_gen.device.type, "state": engine.sample_gen.get_state()},
        PRESET: engine.preset.name,
    }


def load_ppo_state(engine: PPOEngine, extra: dict[str, Any]) -> None:
    """Restore :func:`ppo_state` into ``engine`` and re-sync its rollout copy."""
    engine.reference_fp32.load_state_dict(extra[REFERENCE])
    engine.reference.load_state_dict(extra[REFERENCE])  # copy_ rounds to its dtype
    engine.iterations = int(extra[ITERATIONS])
    engine.gen.set_state(extra[GENERATOR])
    _restore_sampler(engine, extra.get(SAMPLER))
    engine.sync_rollout()


def _restore_sampler(engine: PPOEngine, saved: dict[str, Any] | None) -> None:
    """Put the sampling stream back, when it was saved on this kind of device.

    A checkpoint written before the stream had its own generator, or on another kind of
    device (a generator's state is not portable between CPU and CUDA), leaves the stream
    at its seed: the run goes on, but not bit for bit, and the log says so."""
    here = engine.sample_gen.device.type
    if saved is not None and saved.get("device") == here:
        engine.sample_gen.set_state(saved["state"])
        return
    found = "no sampling stream" if saved is None else f"a {saved.get('device')} stream"
    logger.info(
        "rlhf_ppo: the checkpoint holds %s; sampling on %s restarts from its seed", found, here
    )


def resume_engine(engine: PPOEngine, directory: Path) -> Path | None:
    """Load the newest valid checkpoint into ``engine``; None when there is none."""
    found = CheckpointManager(directory).load_latest()
    if found is None:
        return None
    state, path = found
    engine.trainer.load_state_dict(state)
    load_ppo_state(engine, state.get(keys.EXTRA, {}))
    return path


def _plain(value: Any) -> Any:
    """Dataclass dicts hold only ints, floats, strings and nested dicts: weights_only-safe."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
