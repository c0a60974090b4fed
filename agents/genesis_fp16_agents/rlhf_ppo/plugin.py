"""The ``rlhf_ppo`` agent plugin: PPO with per-component precision and live diagnostics.

    >>> from genesis_fp16_agents.rlhf_ppo import plugin
    >>> plugin.name
    'rlhf_ppo'

``train(request)`` trains a :class:`~genesis_fp16_agents.rlhf_ppo.task.PPOTask` through
``fit()``, which honours the whole request: the precision request (a measured ``auto``
times the PPO update steps), the checkpoint cadence (at iteration ends), resume, the
guard and its demotions, the carried loss scale. It reads these ``request.options``
(all optional): ``preset`` (one of the library's
:data:`~genesis_fp16_infrastructure.rl.precision_presets.PRESETS`), ``rollout_precision``
(fp32/bf16/fp16) and the PPO settings ``batch_size``, ``group_size``, ``ppo_epochs``,
``minibatches``, ``lr``, ``critic_lr``, ``kl_coef``, ``clip_eps``. ``request.steps``
counts optimizer steps (each PPO iteration takes ``ppo_epochs * minibatches`` of them);
``request.epochs`` counts PPO iterations, and a request with neither trains
:data:`DEFAULT_ITERATIONS`.

``request.guard`` turns on the precision guard: on a trigger the run rolls back to an
iteration's start and continues in the next precision's preset, reported in
``TrainResult.demotions`` (docs/precision-guard.md); its divergence trigger is off
(:mod:`genesis_fp16_infrastructure.rl.ppo_guard`). Refused in one line: ``compile=on``
(the update step is never compiled), a process group of more than one rank (the PPO
loop has no DDP and no data sharding, so every rank would train an identical copy), and
a preset the decided precision cannot run (the library's ``PresetError``).

Judged models (:meth:`RlhfPpoPlugin.score_records`): a candidate and the served policy
are judged on the task file's evaluation episodes, paired per episode with common random
numbers, each episode's loss ``1 - reward``; the live watch watches the episodes of the
current task file (a changed task file brings new ones). Every run trains a candidate
that continues the served policy.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genesis_fp16.plugin_api import (
    API_VERSION,
    JUDGING_VERSION,
    AgentOption,
    ProbeSetup,
    RecordLosses,
    TrainRequest,
    TrainRequestError,
    TrainResult,
    model_weights,
    parse_options,
)
from genesis_fp16_agents.rlhf_ppo.task import (
    ActorCritic,
    Policy,
    PPOConfig,
    PPOTask,
    RewardModel,
    TaskConfig,
    random_prompts,
    replayed,
)
from genesis_fp16_infrastructure.agent_folder.files import write_json_atomic
from genesis_fp16_infrastructure.precision_names import PRECISIONS
from genesis_fp16_infrastructure.rl.ppo_guard import ppo_guard
from genesis_fp16_infrastructure.rl.ppo_math import clipped_policy_loss, gae, value_loss, whiten
from genesis_fp16_infrastructure.rl.precision_presets import (
    DEFAULT_PRESET,
    PRESETS,
    PresetError,
    preset_request,
    resolve_preset,
)
from genesis_fp16_infrastructure.rl.rollout import gen_logp, sample
from genesis_fp16_infrastructure.training import StepTuning, fit
from genesis_fp16_infrastructure.training.distributed import rank_and_world
from genesis_fp16_infrastructure.training.run.task import FitResult

# The task file's warnings keep the logger they were always logged under.
logger = logging.getLogger("genesis_fp16_agents.rlhf_ppo.task_file")

DEFAULT_ITERATIONS = 60
JUDGED_EPISODES = 5_000
PROBE_BATCHES = 5
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


class RlhfPpoPlugin:
    """PPO on the "count up by one" digit task, each component in its preset's dtype."""

    api_version = API_VERSION
    name = "rlhf_ppo"
    options = DECLARED_OPTIONS
    judging_version = JUDGING_VERSION
    loss_span = 1.0  # 1 - reward, the default task's reward being in [0, 1]
    # The margin is 5% of the served loss, but never under 0.001 of reward: a policy that
    # solves the task (loss ~2e-4) is measured to +-2e-4 on 2,000-5,000 episodes, and 5%
    # of it (1e-5) held every candidate as good as it inconclusive (docs/judging.md).
    judging_margin_floor = 0.001
    # Its records are evaluation episodes, not what it trains on: every run trains.
    records_are_training_data = False
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
        task = TaskConfig()
        prompts = random_prompts(count, task, torch.Generator().manual_seed(seed))
        doc = {"task": dataclasses.asdict(task), "seed": seed, "eval_prompts": prompts.tolist()}
        write_json_atomic(path, doc)  # its folder made if missing
        return path

    def probe_setup(self, data_path: Path | None, seed: int) -> ProbeSetup:
        """What the precision probe runs for this agent: one PPO loss over frozen fp32
        rollouts of the initial policy (batches[0] is the frozen probe batch).

        The probe's model (:class:`ProbeModel`) holds the three components it may keep in
        fp32 (``policy``, ``value`` and ``reward``); the loss (:func:`probe_loss`) re-runs
        the reward model and the critic inside the forward, so each component's precision
        reaches the loss.
        """
        cfg = PPOConfig(task=read_task(data_path, None)[0])
        task = PPOTask(cfg, seed)  # before any iteration its rollouts are fp32
        batches: list[Any] = []
        for epoch in range(PROBE_BATCHES):
            gen, sample_gen = task.generators(epoch, seed)
            prompts = task.prompts(gen)
            seqs, old_logp = sample(task.frozen.rollout, prompts, cfg.task.gen_len, sample_gen)
            batches.append({"seqs": seqs, "old_logp": old_logp})
        return ProbeSetup(
            build_model=lambda: ProbeModel(task),
            loss=probe_loss,
            batches=batches,
            components={"policy": ["policy"], "value": ["critic"], "reward": ["reward"]},
            learning_rate=cfg.lr,
        )

    def score_records(self, checkpoint: Path, request: TrainRequest) -> RecordLosses:
        """``checkpoint``'s policy on the task file's evaluation episodes (the first
        :data:`JUDGED_EPISODES`): ``1 - reward`` per episode, by id ``<digest>:<prompt index>``.

        An episode is one eval prompt of the task file, completed by sampling the policy
        (in fp32) with a generator seeded from the task file's digest: a candidate and the
        served policy draw the *same* random numbers on each episode (common random
        numbers), so their per-episode difference is the policies' and not the sampler's
        luck. An episode's loss is ``1 - reward`` (the exact fp32 reward model's; with the
        default task's ``reward_scale`` 1 and ``reward_offset`` 0 the reward is in [0, 1],
        so the loss is too: ``loss_span`` 1, and a task that scales rewards otherwise has
        its losses clipped to [0, 1]).

        A policy is judged on the task file's first :data:`JUDGED_EPISODES` eval prompts
        (all of them in a smaller file). Each episode costs a rollout of every policy
        scored, three a run, so judging 100,000 took 54% of a default run's CPU (train
        evaluates on all of them itself); at 5,000 episodes the gate's tests have the
        power of its 1,000-5,000 rows (docs/judging.md), and issue 68's cases were all
        decided at 2,000.

        An episode's id is the task file's digest and the prompt's index: what the live
        watch watches is the episodes of the current task file. A task file that changes
        (new prompts, a new reward) brings new ids, its "later labels", on which the
        served policy is judged against its predecessor. rlhf_ppo's training does not
        learn these episodes (it draws fresh prompts each iteration), so every run trains
        (``records_are_training_data = False``): there is no "up to date" for it.
        """
        if request.data_path is None:
            raise TrainRequestError("rlhf_ppo: judged models need a task file (data path)")
        task_config, prompts, _, digest = read_task(request.data_path, None)
        assert prompts is not None  # read_task refuses a file without a usable prompt
        device = request.device
        prompts = prompts[:JUDGED_EPISODES].to(device)
        # The policy alone, in fp32 (a run's whole task, critic and frozen copies, is not
        # needed to sample it), and the exact reward model.
        policy = Policy(task_config).to(device).eval()
        weights = model_weights(checkpoint)
        policy.load_state_dict({k[7:]: v for k, v in weights.items() if k.startswith("policy.")})
        # Common random numbers: every model of this run draws the same numbers on these
        # episodes (on the run's device: candidate and served are scored on the same one).
        generator = torch.Generator(device=device).manual_seed(int(digest[:15], 16))
        with torch.no_grad():
            seqs, _ = sample(policy, prompts, task_config.gen_len, generator)
            rewards = RewardModel(task_config).to(device)(seqs).double()
        ids = [f"{digest[:16]}:{index}" for index in range(len(prompts))]
        return RecordLosses.of(ids, (1.0 - rewards).tolist())

    def replay_task(self, context: Mapping[str, Any]) -> PPOTask:
        """A fault bundle's update step rebuilt for ``genesis-fp16 replay``, from the
        bundle's ``rebuild`` (:meth:`PPOTask.replay_spec`); its rollouts are the bundle's."""
        spec = context.get("rebuild")
        if not isinstance(spec, Mapping) or "ppo" not in spec:
            raise ValueError("the bundle holds no PPO record (rebuild.ppo): re-run to write one")
        return replayed(spec, str(context.get("device") or "cpu"))

    def train(self, request: TrainRequest) -> TrainResult:
        """Run PPO through ``fit()`` for the request's budget, in the decided precision's preset."""
        world = rank_and_world()[1]
        if world > 1:  # refused before any work: the PPO loop is not sharded
            raise TrainRequestError(
                f"rlhf_ppo: world size {world}: this agent trains in one process only (its PPO "
                "loop has no DDP or data sharding, so every rank would train an identical "
                "copy); run it without torchrun, in the daemon with "
                "GENESIS_FP16_AGENTS__RLHF_PPO__NPROC=1 (the default)"
            )
        if request.compile == "on":  # the update step is a plain eager or captured step
            raise TrainRequestError(
                "rlhf_ppo: compile=on is not supported (its update step is never compiled); "
                "set GENESIS_FP16_AGENTS__RLHF_PPO__COMPILE (or --compile) to off"
            )
        try:
            return self._train(request)
        except PresetError as exc:  # the library's preset rule, refused in this agent's name
            raise TrainRequestError(f"rlhf_ppo: {exc}") from None

    def _train(self, request: TrainRequest) -> TrainResult:
        options: dict[str, Any] = parse_options(self.name, self.options, request.options)
        preset = options.pop("preset", None)
        rollout = options.pop("rollout_precision", None)
        task_config, eval_prompts, quarantined, _ = read_task(
            request.data_path, request.quarantine_path
        )
        # The rest of ``options`` are PPOConfig's: parse_options refuses any name outside
        # DECLARED_OPTIONS.
        cfg = PPOConfig(task=task_config, **options)
        task = PPOTask(
            cfg,
            request.seed,
            request.device,
            preset,
            rollout,
            eval_prompts,
            request.on_diagnostics,
            # the candidate's id; a forced run's steps go on top of what it resumes
            run=None if request.forced else Path(request.checkpoint_dir).name,
        )
        no_budget = request.steps is None and request.epochs is None
        fitted = fit(
            task,
            request.fit_options(
                precision=preset_request(request.precision, preset),
                guard=ppo_guard(request.guard, cfg.steps_per_iteration),
                trainer=StepTuning(max_grad_norm=cfg.max_grad_norm),
                **({"epochs": DEFAULT_ITERATIONS} if no_budget else {}),
            ),
        )
        return _report(request, task, fitted, quarantined)


def _report(
    request: TrainRequest, task: PPOTask, fitted: FitResult, quarantined: int
) -> TrainResult:
    """fit()'s result for ``request``, with the presets run and the PPO diagnostics."""
    # A run that ended before its first iteration ran no preset: say which it would have.
    choices = task.choices or [
        resolve_preset(fitted.precision, task.requested, task.rollout_override)
    ]
    first, last = choices[0], choices[-1].preset
    # The preset's choice says why the policy trains in this precision; a demotion's
    # reason (the guard's, which names the first) follows it.
    reason = f"{first.reason}; {fitted.precision.reason}" if fitted.demotions else first.reason
    fitted = dataclasses.replace(
        fitted, precision=dataclasses.replace(fitted.precision, reason=reason)
    )
    diagnostics = {k: float(v) for k, v in task.stats.items()}
    extra = {
        "preset": last.name,
        "preset_requested": task.requested,
        "preset_reason": first.reason,
        "presets_run": [c.preset.name for c in choices],
        "components": last.as_dict(),
        "master_weights": last.master_weights,
        "kl_dtype_seen": str(task.kl_dtype_seen),
        "iterations": task.iterations,
        "resumed_from": str(fitted.resumed_from) if fitted.resumed_from else None,
        "diagnostics": diagnostics,
        "history": [h for _, h in task.history],
    }
    # The per-component dtypes and the diagnostics are typed fields for the daemon too.
    typed = {"components": last.as_dict(), "diagnostics": diagnostics}
    return TrainResult.from_fit(request, fitted, quarantined=quarantined, extra=extra, **typed)


def read_task(
    data_path: Path | None, quarantine: Path | None
) -> tuple[TaskConfig, torch.Tensor | None, int, str]:
    """The task config, the eval prompts, how many prompts were quarantined and the
    task's digest (:func:`parse_task`; "" without a task file) of the task file
    ``generate_sample_data`` writes: the task's sizes and the held-out eval prompts, as
    ``train``, ``probe_setup`` and ``score_records`` read it.

    A file that cannot be used (a folder, not UTF-8 JSON, not ``{"task": {...},
    "eval_prompts": [...]}``, task fields this agent does not know) is a
    :class:`TrainRequestError`: one line naming the file. An eval prompt that is not
    ``prompt_len`` tokens below ``vocab`` is skipped and appended to ``quarantine``.
    """
    if data_path is None:
        return TaskConfig(), None, 0, ""
    path = Path(data_path)
    if path.is_dir():
        raise TrainRequestError(f"rlhf_ppo: data {path}: is a folder; give the task file")
    try:
        task, prompts, bad, digest = parse_task(str(path), path.read_text(encoding="utf-8"))
    except TrainRequestError:
        raise
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON
        why = str(exc).splitlines()[0]
        raise TrainRequestError(f"rlhf_ppo: data {path}: not a JSON task file ({why})") from None
    if bad and quarantine is not None:  # never lose data: the rejects are kept, with where
        quarantine.parent.mkdir(parents=True, exist_ok=True)
        with quarantine.open("a") as file:
            for prompt in bad:
                file.write(json.dumps({"source": str(path), "record": prompt}) + "\n")
    if prompts is None:
        raise TrainRequestError(
            f"rlhf_ppo: data {path}: no usable eval prompt of {len(bad)} (each must be "
            f"{task.prompt_len} integers in [0, {task.vocab}))"
        )
    if bad:
        logger.warning("rlhf_ppo: %s: %d eval prompts quarantined", path, len(bad))
    return task, prompts, len(bad), digest


# A judged run reads the task file four times (its train, and three policies scored):
# the last text's parse is kept, and an unchanged text is not parsed again (0.25 s a
# read at 100,000 eval prompts). Nothing changes the tensor it returns in place.
@functools.lru_cache(maxsize=1)
def parse_task(path: str, text: str) -> tuple[TaskConfig, torch.Tensor | None, list[Any], str]:
    """(task, eval prompts or None, rejected prompts, digest) of the task file
    ``path``'s ``text``; a :class:`TrainRequestError` when it cannot be used, a
    ValueError when it is not JSON (:func:`read_task`). The digest is the SHA-256 of the
    JSON, keys sorted: the same task, the same digest (the judged episodes' ids)."""
    shape = '{"task": {...}, "eval_prompts": [[tokens], ...]} (see data generate rlhf_ppo)'
    raw = json.loads(text)  # not JSON: a ValueError, refused by read_task
    if not isinstance(raw, dict) or not isinstance(raw.get("task"), dict):
        raise TrainRequestError(f"rlhf_ppo: data {path}: expected {shape}")
    known = {f.name for f in dataclasses.fields(TaskConfig)}
    unknown = sorted(set(raw["task"]) - known)
    if unknown:
        raise TrainRequestError(
            f"rlhf_ppo: data {path}: unknown task fields {unknown}; known: {sorted(known)}"
        )
    task = TaskConfig(**raw["task"])  # known names only, each with a default: no TypeError
    prompts = raw.get("eval_prompts")
    if not isinstance(prompts, list):
        raise TrainRequestError(f"rlhf_ppo: data {path}: expected {shape}")
    good: list[Any] = []
    bad: list[Any] = []
    for prompt in prompts:
        (good if _is_prompt(prompt, task) else bad).append(prompt)
    digest = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()
    return task, torch.tensor(good, dtype=torch.long) if good else None, bad, digest


def _is_prompt(value: Any, task: TaskConfig) -> bool:
    return (
        isinstance(value, list)
        and len(value) == task.prompt_len
        and all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < task.vocab for t in value
        )
    )


class ProbeModel(ActorCritic):
    """The task's policy and critic, and the reward model (it has no trainable weights)."""

    def __init__(self, task: PPOTask) -> None:
        model = task.build_model()
        super().__init__(model.policy, model.critic)
        self.cfg, self.reward = task.cfg, RewardModel(task.cfg.task)


def probe_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The PPO loss (clipped policy + value) on a frozen batch, rewards recomputed in-forward."""
    if not isinstance(model, ProbeModel):
        raise TypeError(f"probe_loss needs a ProbeModel, got {type(model).__name__}")
    cfg = model.cfg
    p = cfg.task.prompt_len
    seqs = batch["seqs"]
    logp = gen_logp(model.policy, seqs, p)
    values = model.critic(seqs)[:, p - 1 : -1]
    rewards = torch.zeros_like(batch["old_logp"])
    rewards[:, -1] += model.reward(seqs).float()
    adv, returns = gae(rewards, values, cfg.gamma, cfg.lam)
    p_loss, _ = clipped_policy_loss(logp, batch["old_logp"], whiten(adv), cfg.clip_eps)
    return p_loss + cfg.vf_coef * value_loss(values, returns)


plugin = RlhfPpoPlugin()
