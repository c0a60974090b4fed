"""rlhf_ppo refuses to train under a multi-rank process group (it has no DDP or sharding)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from genesis_fp16.plugin_api import TrainRequest
from genesis_fp16_agents.rlhf_ppo import plugin

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed missing")


def _rank(rank: int, init: str, folder: str) -> None:
    """One of two gloo ranks: ask for a run and write down the error it got."""
    dist.init_process_group(
        "gloo", init_method=f"file://{init}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    out = Path(folder) / f"rank{rank}.txt"
    try:
        request = TrainRequest(
            agent="rlhf_ppo",
            precision="fp32",
            precision_reason="test",
            state_dir=Path(folder),
            checkpoint_dir=Path(folder) / "checkpoints",
            steps=4,
        )
        plugin.train(request)
        out.write_text("trained")
    except ValueError as exc:
        out.write_text(f"ValueError: {exc}")
    finally:
        # Both ranks meet before either tears down: on a loaded host one rank could finish
        # and close its gloo pairs while the other was still connecting ("connection
        # closed by peer" in that rank, and the test failed though both were refused).
        dist.barrier()
        dist.destroy_process_group()


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_two_ranks_are_refused_before_training(tmp_path: Path) -> None:
    """Under two gloo ranks both ranks get one error naming the world size and NPROC=1."""
    # spawn, not fork: the parent's OpenMP pool can hang a forked child.
    init = str(tmp_path / "init")
    mp.start_processes(_rank, (init, str(tmp_path)), nprocs=2, start_method="spawn")
    for rank in (0, 1):
        message = (tmp_path / f"rank{rank}.txt").read_text()
        assert message.startswith("ValueError: rlhf_ppo: world size 2"), message
        assert "NPROC=1" in message and "\n" not in message
    assert not (tmp_path / "checkpoints").exists()  # refused before any training
