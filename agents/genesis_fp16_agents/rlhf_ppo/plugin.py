"""The ``rlhf_ppo`` agent plugin: PPO with per-component precision and live diagnostics.

    >>> from genesis_fp16_agents.rlhf_ppo import plugin
    >>> plugin.name
    'rlhf_ppo'

``train(request)`` reads these ``request.options`` (all optional): ``preset`` (one of
:data:`~genesis_fp16_agents.rlhf_ppo.presets.PRESETS`),
``rollout_precision`` (fp32/bf16/fp16) and the
PPO settings ``batch_size``, ``group_size``, ``ppo_epochs``, ``minibatches``, ``lr``,
``critic_lr``, ``kl_coef``, ``clip_eps``. ``request.steps`` counts optimizer steps (each
PPO iteration takes ``ppo_epochs * minibatches`` of them); ``request.epochs``, when given
without steps, counts PPO iterations.

``request.guard`` turns on the precision guard (:mod:`genesis_fp16_agents.rlhf_ppo.guarding`): on a
trigger the run rolls back and continues in the next precision's preset, reported in
``TrainResult.demotions`` (docs/precision-guard.md); a trigger at the ladder's last rung
ends the run ``failed``, without an end checkpoint, as in ``fit()``.

One process only: under ``torchrun`` (a process group of more than one rank) ``train``
refuses to start, because its PPO loop has no DDP and no data sharding and every rank
would train an identical copy (docs/distributed.md).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from genesis_fp16_agents.rlhf_ppo.checkpointing import resume_engine, run_record, save_engine
from genesis_fp16_agents.rlhf_ppo.engine import PPOConfig, PPOEngine
from genesis_fp16_agents.rlhf_ppo.guarding import GuardedEngine
from genesis_fp16_agents.rlhf_ppo.model import TaskConfig, random_prompts
from genesis_fp16_agents.rlhf_ppo.presets import (
    DEFAULT_PRESET,
    PRESETS,
    ComponentPrecision,
    PresetChoice,
    preset_request,
    resolve_preset,
)
from genesis_fp16_agents.rlhf_ppo.probe import build_probe_setup
from genesis_fp16_infrastructure.atomic import write_json_atomic
from genesis_fp16_infrastructure.contract.plugin_api import (
    API_VERSION,
    AgentOption,
    ProbeSetup,
    TrainRequest,
    TrainRequestError,
    TrainResult,
    parse_options,
)
from genesis_fp16_infrastructure.contract.reports import Demotion
from genesis_fp16_infrastructure.training import PrecisionPolicy
from genesis_fp16_infrastructure.training.distributed import rank_and_world
from genesis_fp16_infrastructure.training.precision.decide import decide
from genesis_fp16_infrastructure.training.precision.precision_names import PRECISIONS
from genesis_fp16_infrastructure.training.run.demotion import failure_at_last_rung
from genesis_fp16_infrastructure.training.run.fit import start_scale_at
from genesis_fp16_infrastructure.training.run.loop import final_summary
from genesis_fp16_infrastructure.training.run.options import FitResult

logger = logging.getLogger(__name__)

DEFAULT_ITERATIONS = 60
HISTORY_KEYS = (
    "reward_true_mean",
    "kl_k3",
    "kl_log_ratio_below_ulp_frac",
    "mismatch_abs_dlogp_mean",
    "reward_dead_groups",
)
_PPO_HELP = {
    "batch_size": "rollouts per PPO iteration (a multiple of group_size and minibatches)",
    "group_size": "completions per prompt (the reward-resolution groups)",
    "ppo_epochs": "passes over each iteration's rollouts",
    "minibatches": "minibatches per PPO epoch (one optimizer step each)",
    "lr": "policy learning rate",
    "critic_lr": "value head learning rate",
    "kl_coef": "weight of the KL penalty to the frozen reference",
    "clip_eps": "PPO ratio clipping",
}
PPO_OPTIONS = tuple(_PPO_HELP)
_PPO_DEFAULTS = {f.name: f for f in dataclasses.fields(PPOConfig)}
# What `genesis-fp16 agents --json` lists, `--option KEY=VALUE` and
# GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__<KEY> set, checked before any training.
DECLARED_OPTIONS: tuple[AgentOption, ...] = (
    AgentOption(
        "preset",
        "str",
        None,
        f"per-component precision preset (default: by the decided precision, {DEFAULT_PRESET} "
        "for bf16; fp32 forces fp32_baseline, fp16 needs fp16_all; under auto it names one)",
        choices=tuple(PRESETS),
    ),
    AgentOption(
        "rollout_precision",
        "str",
        None,
        "dtype of the rollout (inference) copy of the policy (default: the preset's)",
        choices=PRECISIONS,
    ),
    *(
        AgentOption(
            name,
            type(_PPO_DEFAULTS[name].default).__name__,
            _PPO_DEFAULTS[name].default,  # type: ignore[arg-type]
            text,
        )
        for name, text in _PPO_HELP.items()
    ),
)
OPTIONS = tuple(option.name for option in DECLARED_OPTIONS)


def load_task(data_path: Path | None) -> tuple[TaskConfig, torch.Tensor | None]:
    """The task config and eval prompts from a file written by generate_sample_data."""
    task, prompts, _ = read_task(data_path, None)
    return task, prompts


def read_task(
    data_path: Path | None, quarantine: Path | None
) -> tuple[TaskConfig, torch.Tensor | None, int]:
    """The task config, the eval prompts and how many prompts were quarantined.

    A file that cannot be used (a folder, not UTF-8 JSON, not ``{"task": {...},
    "eval_prompts": [...]}``, task fields this agent does not know) is a
    :class:`TrainRequestError`: one line naming the file. An eval prompt that is not
    ``prompt_len`` tokens below ``vocab`` is skipped and appended to ``quarantine``.
    """
    if data_path is None:
        return TaskConfig(), None, 0
    path = Path(data_path)
    shape = '{"task": {...}, "eval_prompts": [[tokens], ...]} (see data generate rlhf_ppo)'
    if path.is_dir():
        raise TrainRequestError(f"rlhf_ppo: data {path}: is a folder; give the task file")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = str(exc).splitlines()[0]
        raise TrainRequestError(f"rlhf_ppo: data {path}: not a JSON task file ({why})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("task"), dict):
        raise TrainRequestError(f"rlhf_ppo: data {path}: expected {shape}")
    known = {f.name for f in dataclasses.fields(TaskConfig)}
    unknown = sorted(set(raw["task"]) - known)
    if unknown:
        raise TrainRequestError(
            f"rlhf_ppo: data {path}: unknown task fields {unknown}; known: {sorted(known)}"
        )
    try:
        task = TaskConfig(**raw["task"])
    except TypeError as exc:
        raise TrainRequestError(f"rlhf_ppo: data {path}: task: {exc}") from None
    prompts = raw.get("eval_prompts")
    if not isinstance(prompts, list):
        raise TrainRequestError(f"rlhf_ppo: data {path}: expected {shape}")
    good = [p for p in prompts if _is_prompt(p, task)]
    bad = [p for p in prompts if not _is_prompt(p, task)]
    if bad and quarantine is not None:  # never lose data: the rejects are kept, with where
        quarantine.parent.mkdir(parents=True, exist_ok=True)
        with quarantine.open("a") as file:
            for prompt in bad:
                file.write(json.dumps({"source": str(path), "record": prompt}) + "\n")
    if not good:
        raise TrainRequestError(
            f"rlhf_ppo: data {path}: no usable eval prompt of {len(prompts)} (each must be "
            f"{task.prompt_len} integers in [0, {task.vocab}))"
        )
    if bad:
        logger.warning("rlhf_ppo: %s: %d eval prompts quarantined", path, len(bad))
    return task, torch.tensor(good, dtype=torch.long), len(bad)


def _is_prompt(value: Any, task: TaskConfig) -> bool:
    return (
        isinstance(value, list)
        and len(value) == task.prompt_len
        and all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < task.vocab for t in value
        )
    )


def check_single_process() -> None:
    """Refuse a multi-rank process group before any work: the PPO loop is not sharded."""
    world = rank_and_world()[1]
    if world > 1:
        raise TrainRequestError(
            f"rlhf_ppo: world size {world}: this agent trains in one process only (its PPO "
            "loop has no DDP or data sharding, so every rank would train an identical "
            "copy); run it without torchrun, in the daemon with "
            "GENESIS_FP16_AGENTS__RLHF_PPO__NPROC=1 (the default)"
        )


def _ppo_config(task: TaskConfig, options: Mapping[str, Any]) -> PPOConfig:
    # ``options`` come from parse_options, which refuses any name outside OPTIONS.
    overrides = {k: options[k] for k in PPO_OPTIONS if k in options}
    return PPOConfig(task=task, **overrides)


# Request fields this agent does not use, and what it does instead: the daemon and `train`
# say so to an operator who sets one (genesis_fp16/jobs/run_request.py).
IGNORED_REQUEST_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "checkpoint_steps": "it checkpoints once, when the run ends or stops",
        "checkpoint_seconds": "it checkpoints once, when the run ends or stops",
        "precision.mode": "it decides auto by the device rule, never by measuring",
        "precision.cache": "it never measures, so it keeps no calibration",
    }
)


class RlhfPpoPlugin:
    """PPO on the "count up by one" digit task, each component in its preset's dtype."""

    api_version = API_VERSION
    name = "rlhf_ppo"
    options = DECLARED_OPTIONS
    ignored_request_fields = IGNORED_REQUEST_FIELDS
    description = (
        "PPO policy training (tiny transformer, value head, GAE, KL to a frozen reference) "
        "with per-component precision presets and trainer-rollout mismatch diagnostics"
    )

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        """Write the task file: the task config and ``count`` held-out eval prompts.

        The training prompts are drawn fresh every iteration (the task is synthetic);
        the file fixes the task sizes and the prompts ``train`` evaluates on. ``out`` is
        a folder (the file is ``out/rlhf_ppo_task.json``) or a ``.json`` path.
        """
        if count < 1:
            raise ValueError(f"rlhf_ppo: count={count!r} must be >= 1")
        path = out if out.suffix == ".json" else out / "rlhf_ppo_task.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        task = TaskConfig()
        prompts = random_prompts(count, task, torch.Generator().manual_seed(seed))
        doc = {"task": dataclasses.asdict(task), "seed": seed, "eval_prompts": prompts.tolist()}
        write_json_atomic(path, doc)
        return path

    def probe_setup(self, data_path: Path | None, seed: int) -> ProbeSetup:
        """A frozen PPO batch from fp32 rollouts; components policy / value / reward."""
        task, _ = load_task(data_path)
        return build_probe_setup(PPOConfig(task=task), seed)

    def train(self, request: TrainRequest) -> TrainResult:
        """Run PPO for ``request.steps`` optimizer steps in the chosen preset."""
        check_single_process()
        if request.compile == "on":  # the engine builds its Trainer uncompiled
            raise TrainRequestError(
                "rlhf_ppo: compile=on is not supported (its update step is never compiled); "
                "set GENESIS_FP16_AGENTS__RLHF_PPO__COMPILE (or --compile) to off"
            )
        options: dict[str, Any] = parse_options(self.name, self.options, request.options)
        preset = options.pop("preset", None)  # the preset follows decide()'s answer
        decision = decide(preset_request(request.precision, preset), request.device)
        choice = resolve_preset(decision, preset, options.pop("rollout_precision", None))
        logger.info("rlhf_ppo preset %s (%s)", choice.preset.name, choice.reason)
        task, eval_prompts, quarantined = read_task(request.data_path, request.quarantine_path)
        cfg = _ppo_config(task, options)

        def build(preset: ComponentPrecision, precision: PrecisionPolicy) -> PPOEngine:
            return PPOEngine(
                cfg,
                preset,
                seed=request.seed,
                device=request.device,
                log_interval=request.log_interval,
                on_log=request.on_log,
                precision=precision,
                cuda_graph=request.cuda_graph,
            )

        engine = build(choice.preset, PrecisionPolicy.from_decision(decision, request.device))
        if request.initial_loss_scale is not None:  # a resumed checkpoint's scale replaces it
            start_scale_at(engine.precision, request.initial_loss_scale)
        resumed = resume_engine(engine, request.checkpoint_dir) if request.resume else None
        start_step = engine.trainer.step_count
        iterations = request.epochs if request.epochs is not None else DEFAULT_ITERATIONS
        budget = iterations * cfg.steps_per_iteration if request.steps is None else request.steps
        # The guard starts after the resume: its first snapshot is the state resumed from.
        guarded = GuardedEngine(engine, request.guard, build) if request.guard else None
        record = run_record(resumed, request.steps, request.epochs, start_step, budget)
        run = _Run(engine, record, guarded, request.on_diagnostics)
        result = self._run(request, choice, run, eval_prompts, resumed and resumed.path)
        return dataclasses.replace(result, quarantined=quarantined)

    def _run(
        self,
        request: TrainRequest,
        choice: PresetChoice,
        run: _Run,
        eval_prompts: torch.Tensor | None,
        resumed: Path | None,
    ) -> TrainResult:
        start = time.perf_counter()
        start_step = run.engine.trainer.step_count
        # The resumed chain's counts (one host read): the run reports its own.
        before = run.engine.trainer.summary()
        stopped = run.loop(request.should_stop)
        engine, history = run.engine, run.history
        # A failed run writes no end-of-run checkpoint: its state is the last that learned;
        # a stopped one's is finished by the next run (checkpointing.run_record).
        done = {**run.record, "complete": not stopped}
        checkpoint = save_engine(engine, request.checkpoint_dir, done) if not run.failure else None
        trainer = engine.trainer
        steps_run = trainer.step_count - start_step
        summary = final_summary(trainer, steps_run, request.on_log, request.log_interval)
        evaluation = evaluate(engine, eval_prompts, request.seed)
        if history:
            evaluation["reward_first_iteration"] = history[0]["reward_true_mean"]
        # The preset's choice says why the policy trains in this precision; a demotion's
        # reason (the guard's, which names the first) follows it.
        resolved, execution = trainer.policy.resolved, trainer.execution
        reason = f"{choice.reason}; {resolved.reason}" if run.demotions else choice.reason
        fitted = FitResult(
            summary=summary,
            eval=evaluation,
            checkpoint=checkpoint,
            precision=dataclasses.replace(resolved, reason=reason),
            steps_run=steps_run,
            stopped_early=stopped,
            execution=dataclasses.replace(
                execution, reason=f"rlhf_ppo update steps: {execution.reason}"
            ),
            resumed_from=resumed,
            demotions=tuple(run.demotions),
            failure=run.failure,
            skipped_run=summary.skipped_steps - before.skipped_steps,
            nonfinite_run=summary.nonfinite_losses - before.nonfinite_losses,
        )
        extra = self._extra(choice, run, resumed)
        result = TrainResult.from_fit(request, fitted, extra=extra)
        # The run's wall clock, rollouts and evaluation included: the trainer's own counts
        # from its first step, and a demoted engine's trainer from the demotion. The
        # per-component dtypes and the diagnostics are typed fields for the daemon too.
        return dataclasses.replace(
            result,
            wall_seconds=time.perf_counter() - start,
            components=extra["components"],
            diagnostics=extra["diagnostics"],
        )

    @staticmethod
    def _extra(choice: PresetChoice, run: _Run, resumed: Path | None) -> dict[str, Any]:
        """rlhf_ppo's own report: the presets run, the PPO state and the diagnostics."""
        engine = run.engine
        return {
            "preset": engine.preset.name,
            "preset_requested": choice.requested_preset,
            "preset_reason": choice.reason,
            "presets_run": run.presets,
            "components": engine.preset.as_dict(),
            "master_weights": engine.preset.master_weights,
            "kl_dtype_seen": str(engine.kl_dtype_seen),
            "iterations": engine.iterations,
            "resumed_from": str(resumed) if resumed else None,
            "diagnostics": {k: float(v) for k, v in run.stats.items()},
            "history": run.history,
        }


class _Run:
    """The iteration loop of one run, to its record's target step, guarded or not."""

    def __init__(
        self,
        engine: PPOEngine,
        record: dict[str, Any],
        guarded: GuardedEngine | None,
        on_diagnostics: Callable[[Mapping[str, float]], None] | None = None,
    ) -> None:
        self.engine, self.record, self.guarded = engine, record, guarded
        self.target: int = record["target_step"]
        self.on_diagnostics = on_diagnostics
        self.history: list[dict[str, float]] = []
        self.stats: dict[str, float] = {}
        # Set when the guard fired at the ladder's last rung (FitResult.failure).
        self.failure: Mapping[str, str] | None = None
        self._first_iteration = engine.iterations

    @property
    def demotions(self) -> list[Demotion]:
        return self.guarded.demotions if self.guarded is not None else []

    @property
    def presets(self) -> list[str]:
        return self.guarded.presets if self.guarded is not None else [self.engine.preset.name]

    def loop(self, should_stop: Callable[[], bool]) -> bool:
        """Iterate to the target; on a guard trigger roll back, demote, go on (at the last
        rung, end with ``failure`` set, as fit() does). True if stopped."""
        while True:
            stopped = self._iterate(should_stop)
            if self.guarded is None or not self.guarded.check(final=True):
                return stopped
            self.failure = failure_at_last_rung(self.guarded.guard, self.engine.precision.name)
            if self.failure is not None:  # nowhere to demote to: the run ends failed
                return stopped
            self.engine = self.guarded.demote()
            # The rolled-back iterations did not happen in the run that goes on.
            del self.history[self.engine.iterations - self._first_iteration :]
            self.stats = {}

    def _iterate(self, should_stop: Callable[[], bool]) -> bool:
        engine = self.engine
        while engine.trainer.step_count < self.target:
            if should_stop():
                return True
            self.stats = engine.iteration(max_steps=self.target)
            self.history.append({k: self.stats[k] for k in HISTORY_KEYS})
            if self.on_diagnostics is not None:
                self.on_diagnostics({k: float(v) for k, v in self.stats.items()})
            if self.guarded is not None and self.guarded.check():
                return False  # loop() rolls back; the troubled state is never checkpointed
        return False


@torch.no_grad()
def evaluate(engine: PPOEngine, prompts: torch.Tensor | None, seed: int) -> dict[str, float]:
    """Mean exact (fp32) reward of completions sampled on fixed prompts, and of greedy ones."""
    task = engine.cfg.task
    if prompts is None:
        prompts = random_prompts(256, task, torch.Generator().manual_seed(10_000 + seed))
    saved = engine.sample_gen.get_state()
    engine.sample_gen.manual_seed(20_000 + seed)
    seqs, _ = engine.generate(prompts.to(engine.device))
    engine.sample_gen.set_state(saved)  # evaluation must not shift the training sample stream
    greedy = prompts.to(engine.device)
    for _ in range(task.gen_len):
        nxt = engine.rollout_policy(greedy)[:, -1].float().argmax(-1, keepdim=True)
        greedy = torch.cat([greedy, nxt], dim=1)
    return {
        "reward": float(engine.reward_fp32(seqs).mean()),
        "reward_greedy": float(engine.reward_fp32(greedy).mean()),
    }


plugin = RlhfPpoPlugin()
