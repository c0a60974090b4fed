"""Saving and resuming a PPO run through the core's atomic, weights_only checkpoints.

The core :class:`Trainer` state (policy + critic master weights, optimizer, scaler, step,
RNG) is stored as is; the PPO-specific state goes under the ``extra`` key: the frozen
reference weights, the iteration count, the rollout sampler's generator and the preset.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from genesis_fp16_agents.rlhf_ppo.engine import PPOEngine
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys

REFERENCE = "reference"
ITERATIONS = "iterations"
GENERATOR = "generator"
SAMPLER = "sample_generator"  # {"device": "cuda", "state": ByteTensor}
PRESET = "preset"

logger = logging.getLogger(__name__)


def save_engine(
    engine: PPOEngine, directory: Path, run: Mapping[str, Any] | None = None, keep: int = 3
) -> Path:
    """Write the engine's state atomically under ``directory``, with the record of the
    ``run`` that wrote it (``checkpoint_keys.RUN``, :func:`run_record`); returns the file."""
    state = engine.trainer.state_dict()
    if run is not None:
        state[keys.RUN] = dict(run)
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


class Resumed(NamedTuple):
    """The checkpoint a run resumed, and the record of the run that wrote it (None from a
    checkpoint written before runs were recorded)."""

    path: Path
    run: Mapping[str, Any] | None


def resume_engine(engine: PPOEngine, directory: Path) -> Resumed | None:
    """Load the newest valid checkpoint into ``engine``; None when there is none."""
    found = CheckpointManager(directory).load_latest()
    if found is None:
        return None
    state, path = found
    engine.trainer.load_state_dict(state)
    load_ppo_state(engine, state.get(keys.EXTRA, {}))
    run = state.get(keys.RUN)
    return Resumed(path, run if isinstance(run, Mapping) else None)


def run_record(
    resumed: Resumed | None, steps: int | None, epochs: int | None, start: int, budget: int
) -> dict[str, Any]:
    """The record of a run from step ``start`` (``checkpoint_keys.RUN``, as fit() keeps
    it): its target is ``budget`` steps on, unless the checkpoint it resumes is an
    interrupted run's (stopped by the daemon or Ctrl-C) asked for the same budget and short
    of its target, which this run then finishes: a restart costs time, not steps.
    ``complete`` is set when the run ends (save_engine)."""
    saved = resumed.run if resumed is not None else None
    target = start + budget
    if (
        saved is not None
        and saved.get("complete") is False
        and (saved.get("steps"), saved.get("epochs")) == (steps, epochs)
        and isinstance(saved.get("target_step"), int)
        and start < saved["target_step"]
    ):
        target = saved["target_step"]
        logger.info("rlhf_ppo: finishing an interrupted run toward its own step %d", target)
    return {"steps": steps, "epochs": epochs, "target_step": target, "target_epoch": None}


def _plain(value: Any) -> Any:
    """Dataclass dicts hold only ints, floats, strings and nested dicts: weights_only-safe."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
