"""rlhf_ppo's judged models: its evaluation episodes scored with common random numbers,
ids that follow the task file, and losses in [0, 1]."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from genesis_fp16.plugin_api import (
    PrecisionRequest,
    RecordLosses,
    TrainRequest,
    TrainRequestError,
)
from genesis_fp16_agents.rlhf_ppo import plugin
from genesis_fp16_infrastructure.contract.judging import judging_margin, judging_of
from genesis_fp16_infrastructure.judging.gate import compare, decide


def _request(tmp_path: Path, data: Path | None) -> TrainRequest:
    return TrainRequest(
        agent="rlhf_ppo",
        precision=PrecisionRequest("fp32"),
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "checkpoints",
        device="cpu",
        seed=1,
        steps=4,
        data_path=data,
        options={"batch_size": 16},
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TrainRequest]:
    """One PPO iteration's checkpoint and the request that trained it."""
    root = tmp_path_factory.mktemp("rlhf_judged")
    request = _request(root, plugin.generate_sample_data(root / "task", 24, 0))
    result = plugin.train(request)
    assert result.checkpoint is not None
    return Path(result.checkpoint), request


def test_rlhf_ppo_declares_judged_models_that_train_every_run() -> None:
    """The capability is whole (version, span), and its records are no training data."""
    assert judging_of(plugin) is plugin and plugin.loss_span == 1.0
    assert plugin.records_are_training_data is False


def test_episodes_are_scored_with_common_random_numbers(
    trained: tuple[Path, TrainRequest],
) -> None:
    """The same checkpoint on the same task file scores the same losses, episode for
    episode (the sampler's draws are fixed by the task): one per eval prompt, in [0, 1]."""
    checkpoint, request = trained
    first = plugin.score_records(checkpoint, request)
    again = plugin.score_records(checkpoint, request)
    assert first == again and len(first.ids) == 24
    assert all(0.0 <= loss <= 1.0 for loss in first.column())


def test_a_changed_task_file_brings_new_episode_ids(
    trained: tuple[Path, TrainRequest], tmp_path: Path
) -> None:
    """Another task file (here: other eval prompts) gives other ids, which the live watch
    takes for later records; the same file copied elsewhere gives the same ids."""
    checkpoint, request = trained
    assert request.data_path is not None
    before = plugin.score_records(checkpoint, request)
    copied = tmp_path / "copy.json"
    copied.write_text(Path(request.data_path).read_text())
    assert plugin.score_records(checkpoint, _request(tmp_path, copied)).ids == before.ids
    other = plugin.generate_sample_data(tmp_path / "other", 24, 7)
    after = plugin.score_records(checkpoint, _request(tmp_path, other))
    assert not set(after.ids) & set(before.ids)


def test_a_policy_is_judged_on_the_first_judged_episodes_of_the_task_file(
    trained: tuple[Path, TrainRequest], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task file with more eval prompts than JUDGED_EPISODES is judged on its first
    ones: their ids are the prompts' indices, and the same every time."""
    checkpoint, request = trained
    monkeypatch.setattr(sys.modules[type(plugin).__module__], "JUDGED_EPISODES", 10)
    capped = plugin.score_records(checkpoint, request)
    digest = capped.ids[0].split(":")[0]
    assert list(capped.ids) == [f"{digest}:{index}" for index in range(10)]
    assert plugin.score_records(checkpoint, request) == capped


def test_scoring_without_a_task_file_or_with_a_bad_one_is_one_line(
    trained: tuple[Path, TrainRequest], tmp_path: Path
) -> None:
    """No data path, or a file that is no task file: TrainRequestError in one line."""
    checkpoint = trained[0]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nope": 1}))
    for data in (None, bad):
        with pytest.raises(TrainRequestError) as caught:
            plugin.score_records(checkpoint, _request(tmp_path, data))
        assert "\n" not in str(caught.value)


def _whole_sequence(
    model: torch.nn.Module, prompts: torch.Tensor, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler before it kept keys and values: the whole sequence through the model
    at each step, 8 tokens drawn (or the most likely, without a generator)."""
    seqs, logps = prompts, []
    for _ in range(8):
        logits = model(seqs)[:, -1].float()
        logp_all = torch.log_softmax(logits, dim=-1)
        if generator is None:
            nxt = logits.argmax(-1, keepdim=True)
        else:
            nxt = torch.multinomial(logp_all.exp(), 1, generator=generator)
        logps.append(logp_all.gather(-1, nxt))
        seqs = torch.cat([seqs, nxt], dim=1)
    return seqs, torch.cat(logps, dim=1)


def test_the_sampler_draws_what_the_whole_sequence_sampler_draws() -> None:
    """The one sampler (training's rollouts, evaluation's greedy completions, the judged
    episodes; the policy's keys and values kept, one new token a step) draws in fp32 the
    sequences the whole-sequence sampler drew from the same generator, row for row, on
    10,000 rows of a trained policy, sampled and greedy; the log-probs agree to rounding
    (a row could differ only where a cached key's rounding moves a draw across a
    boundary: none here)."""
    from genesis_fp16_agents.rlhf_ppo.task import PPOConfig, PPOTask
    from genesis_fp16_infrastructure.rl.rollout import sample
    from genesis_fp16_infrastructure.training import FitOptions, fit

    task = PPOTask(PPOConfig(), 0)
    fit(task, FitOptions(precision="fp32", epochs=10))
    assert task.stats["reward_true_mean"] > 0.5  # peaked probabilities, not uniform ones
    policy = task.frozen.rollout  # fp32, synced to the trained policy by the last rollout
    prompts = torch.randint(0, 10, (10_000, 4), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        for seed in (9, None):
            generator = None if seed is None else torch.Generator().manual_seed(seed)
            ours, our_logp = sample(policy, prompts, 8, generator)
            generator = None if seed is None else torch.Generator().manual_seed(seed)
            theirs, their_logp = _whole_sequence(policy, prompts, generator)
            assert torch.equal(ours, theirs)
            torch.testing.assert_close(our_logp, their_logp, rtol=0, atol=1e-5)


def _solved_episodes(mistakes: float, seed: int) -> RecordLosses:
    """2,000 episodes of a policy that all but solves the task: most episodes lose
    nothing, a share ``mistakes`` lose 0.125 (one digit of eight wrong)."""
    rng = np.random.default_rng(seed)
    losses = np.where(rng.random(2000) < mistakes, 0.125, 0.0)
    return RecordLosses.of([f"task:{i}" for i in range(2000)], losses)


def test_a_candidate_as_good_as_a_solved_policy_is_promoted_and_a_worse_one_rejected() -> None:
    """Served near zero loss (seed 0 of issue 93's daemon runs: about 2e-4), a candidate
    drawn alike is promoted, not held inconclusive on a margin (5% of 2e-4) below the
    records' noise; one that lost 0.01 of reward is still rejected."""
    served = _solved_episodes(0.0016, seed=0)  # mean loss 2e-4
    margin = lambda served_mean: judging_margin(plugin, served_mean, "loss")  # noqa: E731
    alike = compare("current", _solved_episodes(0.0016, seed=1), served, 1.0, margin)
    assert alike.upper > 0.05 * served.mean(), "the relative margin alone cannot show it"
    assert decide([alike])[0] == "promoted", alike.reason()
    worse = compare("current", _solved_episodes(0.08, seed=2), served, 1.0, margin)
    assert decide([worse])[0] == "rejected", worse.reason()
