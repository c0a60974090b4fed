"""How rlhf_ppo's models are judged: evaluation episodes of the task file, paired.

An episode is one eval prompt of the task file, completed by sampling the policy (in
fp32) with a generator seeded from the task file's digest: a candidate and the served
policy draw the *same* random numbers on each episode (common random numbers), so their
per-episode difference is the policies' and not the sampler's luck. An episode's loss is
``1 - reward`` (the exact fp32 reward model's; with the default task's ``reward_scale``
1 and ``reward_offset`` 0 the reward is in [0, 1], so the loss is too: ``loss_span`` 1,
and a task that scales rewards otherwise has its losses clipped to [0, 1]).

A policy is judged on the task file's first :data:`JUDGED_EPISODES` eval prompts (all of
them in a smaller file). Each episode costs a rollout of every policy scored, three a
run, so judging 100,000 took 54% of a default run's CPU (train evaluates on all of them
itself); at 5,000 episodes the gate's tests have the power of its 1,000-5,000 rows
(docs/judging.md), and issue 68's cases were all decided at 2,000.

An episode's id is the task file's digest and the prompt's index: what the live watch
watches is the episodes of the current task file. A task file that changes (new prompts,
a new reward) brings new ids, its "later labels", on which the served policy is judged
against its predecessor. rlhf_ppo's training does not learn these episodes (it draws
fresh prompts each iteration), so every run trains (``records_are_training_data =
False``): there is no "up to date" for it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from genesis_fp16.plugin_api import RecordLosses, TrainRequest, TrainRequestError, model_weights
from genesis_fp16_agents.rlhf_ppo.model import Policy, RewardModel
from genesis_fp16_agents.rlhf_ppo.task_file import read_task
from genesis_fp16_infrastructure.rl.rollout import sample

JUDGED_EPISODES = 5_000


def score_episodes(checkpoint: Path, request: TrainRequest) -> RecordLosses:
    """``checkpoint``'s policy on the task file's evaluation episodes (the first
    :data:`JUDGED_EPISODES`): ``1 - reward`` per episode, by id ``<digest>:<prompt index>``."""
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
