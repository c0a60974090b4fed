"""PPO as a ``fit()`` task with iterations: each epoch rolls out, then takes
``ppo_epochs * minibatches`` optimizer steps over the rollouts.

``fit()`` runs the loop, checkpoints, the guard and its demotions (see
:func:`genesis_fp16_infrastructure.training.run.loop.run_iterations`); this task gives it the
model (policy and critic as one :class:`ActorCritic`, fp32 master weights), the rollouts
of each iteration (:mod:`~genesis_fp16_infrastructure.rl.rollout`) and the PPO loss.

The preset follows the precision the trainer runs in (``resolve_preset``): fit()'s one
decision at the first iteration, and after a demotion the next precision's preset
(fp16 -> bf16 runs ``mixed_recommended``, fp32 ``fp32_baseline``; a rollout override is
not carried over, it may be what failed). Before the first iteration (the calibration
of a measured ``auto``, the check of a captured step) rollouts are fp32.

Randomness is fixed by ``(seed, epoch)``: the prompts and minibatch orders are drawn on
the host, the samples on the run's device, so ``train_batches`` yields the same batches
for the same weights and a resumed or rolled-back run replays its iterations exactly.

The task's networks: the policy and critic (the library's tiny causal transformer, sized
by the task) and the reward model of the task's rule. The task: a prompt of random
digits, then ``gen_len`` generated digits; each generated digit should be its
predecessor plus one (mod 10). The reward model scores that rule with partial credit for
near misses, as a fixed (not learned) bilinear network, so that running it in bf16
really rounds the reward like a low-precision reward model would.

    >>> from genesis_fp16_infrastructure.training import FitOptions, fit
    >>> task = PPOTask(PPOConfig(batch_size=8, group_size=4), seed=0)
    >>> result = fit(task, FitOptions(precision="fp32", epochs=1))
    >>> task.preset.name, 0.0 <= task.stats["reward_true_mean"] <= 1.0
    ('fp32_baseline', True)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Optimizer

from genesis_fp16.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.rl.ppo_math import clipped_policy_loss, value_loss
from genesis_fp16_infrastructure.rl.precision_presets import (
    PRESETS,
    ComponentPrecision,
    PresetChoice,
    resolve_preset,
)
from genesis_fp16_infrastructure.rl.rollout import (
    Frozen,
    Rollout,
    Shaping,
    frozen_copy,
    gen_logp,
    report,
    sample,
    score,
)
from genesis_fp16_infrastructure.rl.tiny_transformer import TinyTransformer, init_weights
from genesis_fp16_infrastructure.training import Trainer
from genesis_fp16_infrastructure.training.precision.precision import autocast_to
from genesis_fp16_infrastructure.training.run.task import index_to

logger = logging.getLogger(__name__)

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
HISTORY_KEYS = (
    "reward_true_mean",
    "kl_k3",
    "kl_log_ratio_below_ulp_frac",
    "mismatch_abs_dlogp_mean",
    "reward_dead_groups",
)
# The sampling stream's seed is the host stream's plus this, so that it never replays the
# host stream's numbers on a CPU run, where both generators are CPU generators.
SAMPLE_SEED_OFFSET = 1_000_003


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """Sizes of the synthetic task and of the networks (all small enough for a CPU)."""

    vocab: int = 10
    prompt_len: int = 4
    gen_len: int = 8
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 1
    reward_sigma: float = 1.0  # partial-credit width, in digits
    reward_scale: float = 1.0
    reward_offset: float = 0.0

    @property
    def seq_len(self) -> int:
        return self.prompt_len + self.gen_len


def _sizes(cfg: TaskConfig) -> tuple[int, int, int, int, int]:
    return cfg.vocab, cfg.seq_len, cfg.d_model, cfg.n_heads, cfg.n_layers


class Policy(TinyTransformer):
    """Next-token logits [B, T, vocab]."""

    def __init__(self, cfg: TaskConfig) -> None:
        super().__init__(*_sizes(cfg), out_dim=cfg.vocab)


class Critic(TinyTransformer):
    """A value per position [B, T]: the expected return after emitting that position's token."""

    def __init__(self, cfg: TaskConfig) -> None:
        super().__init__(*_sizes(cfg), out_dim=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return super().forward(tokens).squeeze(-1)


class RewardModel(nn.Module):
    """Scores a full sequence [B, prompt_len + gen_len] -> [B], in its parameters' dtype.

    ``credit`` holds, for each previous digit i, the credit exp(-d^2 / 2 sigma^2) of each
    next digit j, where d is the circular distance of j from i + 1. The score is the mean
    credit over generated positions, mapped to ``offset + scale * score``.

        >>> rm = RewardModel(TaskConfig())
        >>> round(float(rm(torch.tensor([[3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4]]))[0]), 3)
        1.0
    """

    def __init__(self, cfg: TaskConfig) -> None:
        super().__init__()
        self.cfg = cfg
        v = cfg.vocab
        i = torch.arange(v).unsqueeze(1)
        j = torch.arange(v).unsqueeze(0)
        raw = (j - (i + 1)) % v
        dist = torch.minimum(raw, v - raw).double()
        credit = torch.exp(-(dist**2) / (2 * cfg.reward_sigma**2))
        self.credit = nn.Linear(v, v, bias=False)
        self.affine = nn.Linear(1, 1)
        with torch.no_grad():
            self.credit.weight.copy_(credit.T.float())  # Linear computes x @ W.T
            self.affine.weight.fill_(cfg.reward_scale)
            self.affine.bias.fill_(cfg.reward_offset)
        self.requires_grad_(False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        dtype = self.credit.weight.dtype
        onehot = F.one_hot(tokens, self.cfg.vocab).to(dtype)
        p = self.cfg.prompt_len
        expected = self.credit(onehot[:, p - 1 : -1])  # credit row of each previous digit
        score = (expected * onehot[:, p:]).sum(-1).mean(-1, keepdim=True)
        return self.affine(score).squeeze(-1)


def random_prompts(batch: int, cfg: TaskConfig, gen: torch.Generator) -> torch.Tensor:
    """Uniform random digit prompts [batch, prompt_len]."""
    return torch.randint(0, cfg.vocab, (batch, cfg.prompt_len), generator=gen)


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyper-parameters (the ``request.options`` of the same names); the defaults
    train visibly on a CPU in under a minute.

    >>> PPOConfig(batch_size=16).steps_per_iteration
    4
    """

    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
    batch_size: int = 64  # rollouts per iteration
    group_size: int = 4  # completions per prompt (the reward-resolution groups)
    ppo_epochs: int = 2
    minibatches: int = 2
    lr: float = 3e-3
    critic_lr: float = 3e-3
    clip_eps: float = 0.2
    kl_coef: float = 0.05
    vf_coef: float = 0.5
    gamma: float = 1.0
    lam: float = 0.95
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        if self.batch_size % self.group_size or self.batch_size % self.minibatches:
            raise TrainRequestError(
                f"rlhf_ppo: batch_size {self.batch_size} must be a multiple of group_size "
                f"{self.group_size} and of minibatches {self.minibatches}"
            )

    @property
    def steps_per_iteration(self) -> int:
        return self.ppo_epochs * self.minibatches


def frozen_models(
    task: TaskConfig, preset: ComponentPrecision, reference: TinyTransformer
) -> Frozen:
    """The frozen models of ``preset``, from the run's fp32 reference weights: the
    sampling copy of the policy, the reference and the reward model in their dtypes."""
    device = next(reference.parameters()).device
    return Frozen(
        rollout=frozen_copy(reference, preset.dtype("rollout")),
        reference=frozen_copy(reference, preset.dtype("reference")),
        reference_fp32=reference,
        reward=RewardModel(task).to(device, preset.dtype("reward")),
        reward_fp32=RewardModel(task).to(device),
    )


class ActorCritic(nn.Module):
    """The two trained networks as one module, so that one Trainer steps them together."""

    def __init__(self, policy: Policy, critic: Critic) -> None:
        super().__init__()
        self.policy: Policy = policy
        self.critic: Critic = critic


class PPOTask:
    """PPO on the digit task; ``preset``/``rollout`` as the operator named them (or None)."""

    def __init__(
        self,
        cfg: PPOConfig,
        seed: int,
        device: str = "cpu",
        preset: str | None = None,
        rollout: str | None = None,
        eval_prompts: torch.Tensor | None = None,
        on_diagnostics: Callable[[Mapping[str, float]], object] | None = None,
        run: str | None = None,
    ) -> None:
        self.cfg, self.seed, self.device = cfg, seed, device
        # This run's name (its candidate's id): a checkpoint of another run is a policy
        # this one continues, whose KL reference it takes (load_extra_state). None: the
        # run goes on from any checkpoint as its own (a forced run's steps on top).
        self.run = run
        self.requested, self.rollout_override = preset, rollout
        self.eval_prompts, self.on_diagnostics = eval_prompts, on_diagnostics
        self.steps_per_epoch = cfg.steps_per_iteration  # fit() sizes a measured auto by it
        self.model = self.build_model().to(device)  # the trainer's, once it runs
        reference = frozen_copy(self.model.policy, torch.float32)  # the exact initial policy
        self.preset = PRESETS["fp32_baseline"]
        self.frozen = frozen_models(cfg.task, self.preset, reference)
        self.trainer: Trainer | None = None
        self.choices: list[PresetChoice] = []  # the presets run, the first decision's first
        self.iterations = 0
        self.stats: dict[str, float] = {}
        self.history: list[tuple[int, dict[str, float]]] = []  # (iteration, HISTORY_KEYS)
        self.kl_dtype_seen: torch.dtype | None = None
        # Each step's clip fraction and value loss, summed on the device in place (a
        # step replayed from a CUDA graph writes here too; a Python list would not).
        self._sums = torch.zeros(2, dtype=torch.float64, device=device)
        self._rollout: Rollout | None = None
        self._first_step = 0

    # -- what fit() builds -----------------------------------------------------------

    def build_model(self) -> ActorCritic:
        policy, critic = Policy(self.cfg.task), Critic(self.cfg.task)
        init_weights(policy, self.seed)
        init_weights(critic, self.seed + 10_000)
        # The last one built is fit()'s, the trainer's: a resume reads its loaded policy.
        self.built = ActorCritic(policy, critic)
        return self.built

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        # On CUDA the optimizer keeps its step counters on the device and skips an
        # overflowing fp16 step by itself, so a whole update step can be captured into a
        # CUDA graph. The CPU keeps torch's default AdamW.
        parts = cast(ActorCritic, model)
        groups = [
            {"params": parts.policy.parameters(), "lr": self.cfg.lr},
            {"params": parts.critic.parameters(), "lr": self.cfg.critic_lr},
        ]
        if torch.device(self.device).type == "cuda":
            return [torch.optim.AdamW(groups, weight_decay=0.0, fused=True, capturable=True)]
        return [torch.optim.AdamW(groups, weight_decay=0.0)]

    # -- one iteration ---------------------------------------------------------------

    def begin_iteration(self, trainer: Trainer, epoch: int) -> None:
        """Roll out with ``trainer``'s weights, in the preset of its precision."""
        self.trainer, self.model = trainer, cast(ActorCritic, trainer.model)
        if not self.choices or self.choices[-1].preset.policy != trainer.policy.name:
            rollout = self.rollout_override if not self.choices else None
            choice = resolve_preset(trainer.policy.resolved, self.requested, rollout)
            logger.info("rlhf_ppo preset %s (%s)", choice.preset.name, choice.reason)
            self.preset = choice.preset
            self.frozen = frozen_models(self.cfg.task, self.preset, self.frozen.reference_fp32)
            self.choices.append(choice)
        self._sums.zero_()
        self._first_step = trainer.step_count

    def generators(self, epoch: int, seed: int) -> tuple[torch.Generator, torch.Generator]:
        """The host stream (prompts, minibatch orders) and the device's (sampling)."""
        base = seed * 100_003 + epoch
        host = torch.Generator().manual_seed(base)
        return host, torch.Generator(device=self.device).manual_seed(base + SAMPLE_SEED_OFFSET)

    def prompts(self, gen: torch.Generator) -> torch.Tensor:
        cfg = self.cfg
        prompts = random_prompts(cfg.batch_size // cfg.group_size, cfg.task, gen)
        return prompts.repeat_interleave(cfg.group_size, 0).to(self.device)

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Batch, int]]:
        """Roll out, then each PPO epoch's minibatches, gathered eagerly (the step, a pure
        function of its minibatch, can then replay from a CUDA graph)."""
        gen, sample_gen = self.generators(epoch, seed)
        cfg = self.cfg
        self.frozen.sync_rollout(self.model.policy)
        sampled = sample(self.frozen.rollout, self.prompts(gen), cfg.task.gen_len, sample_gen)
        shaping = Shaping(cfg.kl_coef, self.preset.dtype("kl"), cfg.gamma, cfg.lam)
        seqs, groups = sampled[0], cfg.batch_size // cfg.group_size
        r = score(self.frozen, sampled, self.policy_logp(seqs), self.values(seqs), groups, shaping)
        self._rollout, self.kl_dtype_seen = r, r.k3.dtype
        size = cfg.batch_size // cfg.minibatches
        # Every PPO epoch's order drawn now (the same draws as one at a time) and uploaded
        # in one copy: a CPU index into device tensors is copied from pageable memory at
        # each minibatch, and that waits for the step before it (a host sync a step).
        draws = [torch.randperm(cfg.batch_size, generator=gen) for _ in range(cfg.ppo_epochs)]
        orders = index_to(torch.stack(draws), r.seqs.device)
        fields = (r.seqs, r.rollout_logp, r.adv, r.returns)
        for order in orders:
            # Each PPO epoch's rows gathered once, in its order (four index kernels an
            # epoch, not a minibatch); a minibatch is a slice of them: the same rows.
            seqs, logp, adv, returns = (field[order] for field in fields)
            for i in range(cfg.minibatches):
                rows = slice(i * size, (i + 1) * size)
                yield (seqs[rows], logp[rows], adv[rows], returns[rows]), size

    @torch.no_grad()
    def policy_logp(self, seqs: torch.Tensor) -> torch.Tensor:
        with autocast_to(self.preset.dtype("policy"), seqs.device.type):
            return gen_logp(self.model.policy, seqs, self.cfg.task.prompt_len)

    @torch.no_grad()
    def values(self, seqs: torch.Tensor) -> torch.Tensor:
        p = self.cfg.task.prompt_len
        with autocast_to(self.preset.dtype("value"), seqs.device.type):
            return self.model.critic(seqs)[:, p - 1 : -1]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Clipped policy loss plus the value loss; the policy runs in the trainer's
        autocast (the run's precision), the critic in the preset's value dtype."""
        seqs, old_logp, adv, returns = batch
        p, parts = self.cfg.task.prompt_len, cast(ActorCritic, model)
        logp = gen_logp(parts.policy, seqs, p)
        p_loss, clip_frac = clipped_policy_loss(logp, old_logp, adv, self.cfg.clip_eps)
        # No cast cache: the values are the same, and a captured step needs none.
        with autocast_to(self.preset.dtype("value"), seqs.device.type, cache_enabled=False):
            values = parts.critic(seqs)[:, p - 1 : -1]
        v_loss = value_loss(values, returns)
        self._sums.add_(torch.stack((clip_frac.detach().double(), v_loss.detach().double())))
        return p_loss + self.cfg.vf_coef * v_loss

    def end_iteration(self, trainer: Trainer, epoch: int) -> None:
        """This iteration's diagnostics: kept, and sent to ``on_diagnostics``."""
        stats: dict[str, float] = {}
        steps = trainer.step_count - self._first_step
        if steps:
            clip_frac, v_loss = (self._sums / steps).tolist()  # one host read
            stats = {"policy_clip_frac": clip_frac, "value_loss": v_loss}
        assert self._rollout is not None  # train_batches ran: fit() stepped its batches
        dtypes = {c: self.preset.dtype(c) for c in ("kl", "rollout", "reward", "value")}
        stats.update(report(self._rollout, dtypes, self.cfg.clip_eps))
        stats["loss_scale"] = trainer.scaler.get_scale()
        self.stats, self.iterations = stats, epoch + 1
        self.history.append((epoch, {k: stats[k] for k in HISTORY_KEYS}))
        if self.on_diagnostics is not None:
            self.on_diagnostics(dict(stats))

    # -- fault bundles -----------------------------------------------------------------

    def replay_spec(self) -> dict[str, Any]:
        """What a fault bundle keeps to rebuild this task's update step (:func:`replayed`):
        the PPO settings (the task's sizes in them), the seed and the preset it ran."""
        return {"ppo": dataclasses.asdict(self.cfg), "seed": self.seed, "preset": self.preset.name}

    # -- state and evaluation ----------------------------------------------------------

    def extra_state(self) -> dict[str, Any]:
        """Checkpointed and snapshotted beside the trainer's state (tensors alias the
        live reference: the guard copies them)."""
        reference = self.frozen.reference_fp32.state_dict()
        return {
            "reference": reference,
            "reference_of": self.run,
            "iterations": self.iterations,
            "preset": self.preset.name,
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """On resume and on a rollback: the reference, and the iterations that stand.

        A checkpoint of another run (the served policy, copied into this run's folder to
        be continued) gives its policy as this run's KL reference: the penalty keeps the
        continued policy near the one it improves on, not near the first run's initial
        policy, which pulled every continued run back (issue 93). This run's own
        checkpoints (a killed run resumed, a guard's rollback) keep the reference they
        saved, so a resumed run ends bitwise where an unbroken one does. A forced run (``train
        --resume --steps N``: N steps on top) goes on with the checkpoint's reference, so
        N + N steps end where 2N straight do (check-agent's ``resumes_bit_for_bit``)."""
        reference = state["reference"]
        if self.run is None:  # steps on top of the checkpoint: its reference, its lineage
            self.run = state.get("reference_of")
        elif state.get("reference_of") != self.run:
            reference = self.built.policy.state_dict()  # loaded by the trainer just before
        self.frozen.reference_fp32.load_state_dict(reference)
        self.frozen.reference.load_state_dict(reference)  # copy_ rounds to its dtype
        self.iterations = int(state.get("iterations", 0))
        if self.history and self.history[-1][0] >= self.iterations:  # rolled back
            self.history = [h for h in self.history if h[0] < self.iterations]
            self.stats = {}

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """The exact (fp32) reward of completions sampled on the eval prompts (a fixed
        draw when the task file gives none), and of greedy ones."""
        prompts = self.eval_prompts
        if prompts is None:
            gen = torch.Generator().manual_seed(10_000 + self.seed)
            prompts = random_prompts(256, self.cfg.task, gen)
        self.frozen.sync_rollout(cast(ActorCritic, model).policy)
        sample_gen = torch.Generator(device=self.device).manual_seed(20_000 + self.seed)
        out = self.frozen.rewards(prompts.to(self.device), self.cfg.task.gen_len, sample_gen)
        if self.history:
            out["reward_first_iteration"] = self.history[0][1]["reward_true_mean"]
        return out


def replayed(spec: Mapping[str, Any], device: str = "cpu") -> PPOTask:
    """The task a bundle's ``replay_spec()`` names, in the preset its step ran: the same
    model (from the settings and seed) and the same loss. The step's rollouts are the
    bundle's batches; nothing is rolled out here."""
    settings = dict(spec["ppo"])
    cfg = PPOConfig(task=TaskConfig(**dict(settings.pop("task"))), **settings)
    preset = str(spec["preset"])
    if preset not in PRESETS:
        raise ValueError(f"preset {preset!r}: not one of {', '.join(PRESETS)}")
    task = PPOTask(cfg, int(spec["seed"]), device, preset)
    task.preset = PRESETS[preset]  # begin_iteration would choose it; replay runs no iteration
    return task
