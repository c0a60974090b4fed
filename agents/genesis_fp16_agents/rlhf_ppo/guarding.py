"""The precision guard for a PPO run: check at iteration boundaries, roll back, demote.

``rlhf_ppo`` runs its own PPO loop instead of ``fit()``, so it drives the core
:class:`~genesis_fp16_infrastructure.training.run.guard.PrecisionGuard` itself, through the engine's
Trainer:

- every update's loss goes through ``guard.watch_loss`` (the engine's ``loss_hook``);
- the guard checks at the end of the first PPO iteration at or after each
  ``check_interval`` optimizer steps, and once more at the end of the run. Checks and
  snapshots sit on iteration boundaries because mid-iteration PPO state (the rollout
  batch, its advantages) is not kept; a spotless check snapshots the Trainer (model,
  optimizer, scaler, step, RNG) and the PPO state (reference weights, iteration count,
  the rollout sampler's generator);
- the divergence trigger is turned off, with a warning naming ``divergence_factor``:
  the PPO loss hovers around zero, so its ratio to a moving average is noise;
- on a trigger the run rebuilds the engine in the next precision of the ladder, as the
  preset of :data:`DEMOTED_PRESETS`, with the run's loss-scaler config (the first
  engine's ``scaler_config``), loads the snapshot and runs on to the same target. The
  rollback and its record are ``fit()``'s own
  (:func:`~genesis_fp16_infrastructure.training.run.demotion.demote_run`).

    >>> DEMOTED_PRESETS["bf16"], DEMOTED_PRESETS["fp32"]
    ('mixed_recommended', 'fp32_baseline')
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from genesis_fp16_agents.rlhf_ppo.checkpointing import load_ppo_state, ppo_state
from genesis_fp16_agents.rlhf_ppo.engine import PPOEngine
from genesis_fp16_agents.rlhf_ppo.presets import PRESETS, ComponentPrecision
from genesis_fp16_infrastructure.contract.reports import Demotion
from genesis_fp16_infrastructure.training import GuardConfig, PrecisionPolicy, Trainer
from genesis_fp16_infrastructure.training.run.demotion import demote_run
from genesis_fp16_infrastructure.training.run.guard import PrecisionGuard, Snapshot

logger = logging.getLogger(__name__)

# The preset a demoted run continues in, by the guard's next precision: bf16 takes the
# recommended mix (fp32 value head and KL, the components bf16 hurts most), fp32 the
# baseline. A rollout_precision override is not carried over: it may be what failed.
DEMOTED_PRESETS = {"fp32": "fp32_baseline", "bf16": "mixed_recommended", "fp16": "fp16_all"}

EngineFactory = Callable[[ComponentPrecision, PrecisionPolicy], PPOEngine]


class GuardedEngine:
    """A :class:`PPOEngine` watched by a precision guard; ``engine`` changes on demotion.

    ``rebuild(preset, policy)`` builds a fresh engine (same config, seed, device and
    callbacks) in a demoted preset::

        run = GuardedEngine(engine, GuardConfig(), rebuild)
        while not done:
            engine.iteration(...)
            if run.check():
                run.demote()  # run.engine is now the next precision's, rolled back
    """

    def __init__(self, engine: PPOEngine, config: GuardConfig, rebuild: EngineFactory) -> None:
        config = _without_divergence(config)
        self.engine = engine
        self.guard = PrecisionGuard(config, lambda: ppo_state(self.engine))
        self.demotions: list[Demotion] = []
        self.presets = [engine.preset.name]
        self._rebuild = rebuild
        # The run's, kept from the first engine: a rebuilt engine's own may be a default.
        self._scaler = engine.scaler_config
        self._interval = config.check_interval
        per_iteration = engine.cfg.steps_per_iteration
        if self._interval % per_iteration:
            # At the default nobody asked for this interval: a note, not a warning.
            said = logger.warning if _chosen(config, "check_interval") else logger.debug
            said(
                "precision guard: check_interval=%d is not a multiple of the %d optimizer "
                "steps of a PPO iteration; rlhf_ppo checks at the first iteration boundary "
                "after each %d steps",
                self._interval,
                per_iteration,
                self._interval,
            )
        engine.loss_hook = self.guard.watch_loss
        self.guard.start(engine.trainer, engine.iterations, 0)
        self._checked = engine.trainer.step_count

    def check(self, final: bool = False) -> bool:
        """At an iteration boundary: check if an interval ended (or ``final``); True on trouble."""
        step = self.engine.trainer.step_count
        if not final and step // self._interval <= self._checked // self._interval:
            return False
        self._checked = step
        # final_check() checks the steps since the previous check whatever the step number;
        # after_step() would check only on exact multiples of check_interval.
        return self.guard.final_check(self.engine.trainer, self.engine.iterations, 0) is not None

    def demote(self) -> PPOEngine:
        """Roll back to the guard's snapshot in the next precision's preset; the new engine.

        The rollback itself is ``fit()``'s (:func:`demote_run`): the same policy, record
        and guard restart; only the engine around the trainer is rlhf_ppo's own."""
        old = self.engine

        def rebuild(policy: PrecisionPolicy) -> Trainer:
            self.engine = self._rebuild(PRESETS[DEMOTED_PRESETS[policy.name]], policy)
            self.engine.loss_hook = self.guard.watch_loss
            return self.engine.trainer

        def restore(_: Trainer, snapshot: Snapshot) -> None:
            load_ppo_state(self.engine, snapshot.extra)  # reference, iterations, sampler

        _, record = demote_run(self.guard, old.trainer, self._scaler, rebuild, restore)
        engine = self.engine
        logger.warning(
            "rlhf_ppo: preset %s -> %s, rolled back to iteration %d (step %d)",
            old.preset.name,
            engine.preset.name,
            engine.iterations,
            engine.trainer.step_count,
        )
        self.demotions.append(record)
        self.presets.append(engine.preset.name)
        self._checked = engine.trainer.step_count
        return engine


def _without_divergence(config: GuardConfig) -> GuardConfig:
    """The config minus the divergence trigger, which a PPO loss cannot feed (warned)."""
    if config.divergence_factor is None:
        return config
    # The clipped surrogate of whitened advantages hovers around zero and changes sign,
    # so "mean > factor x moving average" fires on noise: clean fp16 runs "diverged".
    # The default factor is off here by design (docs/precision-guard.md); one an operator
    # set is worth a warning, since it does nothing.
    said = logger.warning if _chosen(config, "divergence_factor") else logger.debug
    said(
        "precision guard: divergence_factor=%g is not used by rlhf_ppo (its PPO loss "
        "hovers around zero, so a ratio to its moving average is noise); the scaler, "
        "non-finite-loss and overflow-rate triggers still apply",
        config.divergence_factor,
    )
    return dataclasses.replace(config, divergence_factor=None)


def _chosen(config: GuardConfig, name: str) -> bool:
    """Whether ``name`` differs from GuardConfig's default: someone set it."""
    return bool(getattr(config, name) != getattr(GuardConfig(), name))
