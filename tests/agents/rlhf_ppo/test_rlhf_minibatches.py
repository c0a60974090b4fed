"""PPO's minibatches are slices of each PPO epoch's rows gathered once (issue 90, item 6):
the same rows in the same order as a gather per minibatch, and no gather per minibatch."""

from __future__ import annotations

import torch
from op_counter import OpCounter

from genesis_fp16_agents.rlhf_ppo.task import PPOConfig, PPOTask

SEED = 4


def test_each_minibatch_holds_the_rows_of_its_slice_of_the_drawn_order() -> None:
    """Bit for bit, each minibatch is its slice of the PPO epoch's order, gathered from the
    rollout: the order drawn after the prompts from the iteration's host generator."""
    cfg = PPOConfig(batch_size=16, minibatches=4, ppo_epochs=2)
    task = PPOTask(cfg, SEED)
    got = list(task.train_batches(1, SEED))
    rollout = task._rollout
    assert rollout is not None
    gen, _ = task.generators(1, SEED)
    task.prompts(gen)  # the draws before the orders
    size = cfg.batch_size // cfg.minibatches
    want = []
    for _ in range(cfg.ppo_epochs):
        order = torch.randperm(cfg.batch_size, generator=gen)
        for i in range(cfg.minibatches):
            idx = order[i * size : (i + 1) * size]
            fields = (rollout.seqs, rollout.rollout_logp, rollout.adv, rollout.returns)
            want.append(tuple(field[idx] for field in fields))
    assert len(got) == len(want) == cfg.steps_per_iteration
    for (batch, samples), expected in zip(got, want, strict=True):
        assert samples == size
        assert all(torch.equal(a, b) for a, b in zip(batch, expected, strict=True))


def _gathers(minibatches: int) -> int:
    task = PPOTask(PPOConfig(batch_size=16, minibatches=minibatches, ppo_epochs=2), SEED)
    with OpCounter(torch.ops.aten.index.Tensor) as counter:
        assert len(list(task.train_batches(0, SEED))) == 2 * minibatches
    return counter.count


def test_an_iteration_gathers_as_often_whatever_its_number_of_minibatches() -> None:
    """The rollout's own gathers aside, a PPO epoch gathers its four fields once: an
    iteration of 8 minibatches gathers no more than one of 2."""
    assert _gathers(8) == _gathers(2)
