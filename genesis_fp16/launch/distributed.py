"""The process group of a run started by ``torchrun``: read its environment, init, destroy.

``torchrun --nproc-per-node N -m genesis_fp16 train AGENT`` starts N copies of the
``train`` command with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``MASTER_ADDR``/
``MASTER_PORT`` set. This module is the only place that reads them (the library takes
the initialised group from ``torch.distributed``)::

    env = TorchrunEnv.from_environ(os.environ)   # None: not launched by torchrun
    with process_group(env, "cuda") as device:   # "cuda:<LOCAL_RANK>" under torchrun
        ...
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

log = logging.getLogger("genesis_fp16.distributed")

# How long a collective waits for a slow or dead peer before failing.
COLLECTIVE_TIMEOUT = timedelta(minutes=10)


@dataclass(frozen=True)
class TorchrunEnv:
    """This process's place in a torchrun job."""

    rank: int
    world_size: int
    local_rank: int

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> TorchrunEnv | None:
        """The torchrun variables, or None when the process was not started by torchrun."""
        if "WORLD_SIZE" not in environ or "RANK" not in environ:
            return None
        try:
            rank, world = int(environ["RANK"]), int(environ["WORLD_SIZE"])
            local = int(environ.get("LOCAL_RANK", environ["RANK"]))
        except ValueError:
            found = {k: environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
            raise ValueError(f"torchrun environment {found}: each must be an integer") from None
        if not 0 <= rank < world:
            raise ValueError(f"RANK={rank} WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
        return cls(rank, world, local)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def rank_device(env: TorchrunEnv | None, device: str) -> str:
    """The device of this rank: a bare ``cuda`` becomes ``cuda:<LOCAL_RANK>``."""
    if env is not None and device == "cuda":
        return f"cuda:{env.local_rank}"
    return device


@contextmanager
def process_group(env: TorchrunEnv | None, device: str) -> Iterator[str]:
    """Initialise the default group (NCCL on CUDA, gloo on CPU); destroy it on exit.

    Yields this rank's device. Without ``env`` it initialises nothing and yields
    ``device`` as given.
    """
    if env is None:
        yield device
        return
    device = rank_device(env, device)
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
    log.info(
        "joined process group: rank %d of %d (local rank %d), backend %s, device %s",
        env.rank,
        env.world_size,
        env.local_rank,
        backend,
        device,
    )
    try:
        yield device
    finally:
        dist.destroy_process_group()


@contextmanager
def rank_zero_first(env: TorchrunEnv | None) -> Iterator[None]:
    """Run the block on rank 0 first, then on the others (e.g. generating sample data once)."""
    if env is None or env.world_size == 1:
        yield
        return
    if not env.is_main:
        dist.barrier()
    try:
        yield
    finally:
        if env.is_main:
            dist.barrier()
