"""Data-parallel and sharded training on ``torch.distributed``, for ``fit()``.

Nothing here starts a process group: the caller does (``torchrun`` plus
``torch.distributed.init_process_group``; the daemon's ``genesis_fp16.launch.distributed``).
When no group is initialised, or it has one rank, every function is a pass-through and
``fit()`` runs exactly as in a single process::

    model = wrap_model(model, policy, fsdp=False)      # DDP (or FSDP2 fully_shard)
    micro, loss_fn, n = shard_step(group, task.loss)    # this rank's slice of each batch
    manager = checkpoint_manager(directory, keep=3)     # rank 0 writes, every rank reads

How a global batch is split: each batch ``fit()`` draws is cut along dimension 0 into
``world_size`` contiguous parts (``torch.tensor_split``: sizes differ by at most one),
and rank ``r`` trains on part ``r``. Every rank draws the same batches (same seed), so
within an epoch every sample is used by exactly one rank: no duplicates, no drops, and
the shard is a pure function of ``(seed, epoch, rank, world_size)``. Each rank's loss is
multiplied by ``n_rank * world_size / n_batch`` before backward; DDP averages gradients
over ranks, so the step equals one step on the whole batch in a single process for any
loss that is a mean over samples (equal parts make the factor exactly 1).

Gradient accumulation (several micro-batches per optimizer step) synchronises once per
step, not once per micro-batch: ``Trainer`` runs every micro-batch but the last inside
:func:`no_sync`, so the gradients are summed locally and the last backward reduces the
sum (one all-reduce round under DDP, one reduce-scatter under FSDP2, where ``k``
micro-batches made ``k``). The sum of local sums equals the sum of reduced gradients up
to floating-point order. The cost under FSDP2: between the first and the last backward a
rank holds its gradients unsharded (the model's full gradient size, not a 1/world shard).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer

from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import Accept, CheckpointManager
from genesis_fp16_infrastructure.training.checkpoint_load import Loaded
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.rng import capture_rng_state

logger = logging.getLogger(__name__)

LossFn = Callable[[nn.Module, Any], torch.Tensor]


def rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group; ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_distributed() -> bool:
    """True when a process group with more than one rank is initialised."""
    return rank_and_world()[1] > 1


# ---------------------------------------------------------------------------- the model


class _DDP(DistributedDataParallel):
    """DDP whose state dict is the wrapped module's: checkpoints carry no ``module.`` prefix.

    That keeps a checkpoint written by N ranks loadable by one process and the reverse,
    with the trainer's own ``model.state_dict()`` / ``load_state_dict()`` calls.
    """

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


def wrap_model(model: nn.Module, policy: PrecisionPolicy, fsdp: bool = False) -> nn.Module:
    """Wrap ``model`` for the initialised process group; return it unchanged without one.

    - default: ``DistributedDataParallel`` (gradients averaged over ranks in backward).
    - ``fsdp=True``: FSDP2 ``fully_shard`` with a ``MixedPrecisionPolicy`` matched to
      ``policy``: parameters gathered in the compute dtype (bf16/fp16; fp32 leaves
      them alone) and gradients reduced in fp32, so fp16 gradients of a scaled loss
      cannot overflow in the reduction. The model's parameters become DTensors: build
      the optimizers after this call (``fit()`` does).

    Call it after ``policy.check_model(model)`` and before building optimizers.
    """
    if not is_distributed():
        if fsdp:
            logger.info("fsdp requested without a multi-rank process group: not sharding")
        return model
    if fsdp:
        return _fully_shard(model, policy)
    device = policy.device
    device_ids = [device.index] if device.type == "cuda" and device.index is not None else None
    logger.info("wrapping the model in DDP (world size %d)", dist.get_world_size())
    return _DDP(model, device_ids=device_ids)


def _fully_shard(model: nn.Module, policy: PrecisionPolicy) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mixed = policy.fsdp_mixed_precision()
    logger.info(
        "sharding the model with FSDP2 fully_shard (param_dtype %s, reduce_dtype %s)",
        mixed.param_dtype,
        mixed.reduce_dtype,
    )
    # The mesh follows the run's device. Without one, fully_shard builds a mesh on cuda
    # whenever CUDA is available, so a cpu/gloo run on a GPU host sharded onto the GPU
    # and failed on its CPU batches (H100, torch 2.11).
    mesh = init_device_mesh(policy.device.type, (dist.get_world_size(),))
    fully_shard(model, mesh=mesh, mp_policy=mixed)
    return model


def is_sharded(model: nn.Module) -> bool:
    """True for a model sharded by FSDP2 ``fully_shard``."""
    if not is_distributed():
        return False  # wrap_model never shards without a multi-rank group
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def no_sync(model: nn.Module) -> Callable[[], contextlib.AbstractContextManager[None]] | None:
    """What turns ``model``'s gradient synchronisation off for a backward, or None when
    its backward synchronises nothing (one process, an unwrapped model).

    DDP's ``no_sync()``; FSDP2's ``set_requires_gradient_sync(False)``, set back on exit.
    The forward and the backward of a micro-batch both run inside it::

        quiet = no_sync(model)
        with quiet() if quiet is not None else contextlib.nullcontext():
            policy.backward(loss_fn(model, batch))
    """
    if isinstance(model, DistributedDataParallel):
        return model.no_sync
    if is_sharded(model):
        return lambda: _fsdp_no_sync(model)
    return None


@contextlib.contextmanager
def _fsdp_no_sync(model: nn.Module) -> Iterator[None]:
    model.set_requires_gradient_sync(False)  # type: ignore[operator]
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)  # type: ignore[operator]


def load_sharded_state(
    model: nn.Module,
    optimizers: Sequence[Optimizer],
    model_state: Mapping[str, Any],
    optimizer_states: Sequence[Mapping[str, Any]],
) -> None:
    """Load a full, plain-tensor state into an FSDP2-sharded model and its optimizers.

    The state is what every checkpoint holds, whoever wrote it (one process, DDP or
    FSDP at any world size): parameters as full tensors, each optimizer's
    ``state_dict()`` keyed by parameter index. ``set_model_state_dict`` and
    ``set_optimizer_state_dict`` (full state dict, broadcast from rank 0) cut each
    full tensor into this rank's shard, so rank 0's copy is the one every rank gets.
    Collective: every rank calls it, with the same optimizers built the same way.
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, dict(model_state), options=options)  # it pops keys
    for optimizer, saved in zip(optimizers, optimizer_states, strict=True):
        by_name = _keyed_by_name(model, optimizer, saved)
        set_optimizer_state_dict(model, optimizer, by_name, options=options)


def _keyed_by_name(
    model: nn.Module, optimizer: Optimizer, saved: Mapping[str, Any]
) -> dict[str, Any]:
    """``optimizer.state_dict()`` output re-keyed from parameter indices to parameter names.

    The full-state-dict loaders match optimizer state to parameters by name. Index ``i``
    of a saved group is the ``i``-th parameter of the same group of ``optimizer``, which
    the task built the same way (the same rule ``Optimizer.load_state_dict`` relies on).
    """
    names = {id(p): name for name, p in model.named_parameters()}
    groups, state = [], {}
    for live, group in zip(optimizer.param_groups, saved["param_groups"], strict=True):
        fqns = [names[id(p)] for p in live["params"]]
        if len(fqns) != len(group["params"]):
            raise ValueError(
                f"the checkpoint's optimizer group has {len(group['params'])} parameters, "
                f"this run's has {len(fqns)}: the task must build the same optimizers"
            )
        for fqn, index in zip(fqns, group["params"], strict=True):
            if index in saved["state"]:
                state[fqn] = saved["state"][index]
        groups.append({**group, "params": fqns})
    return {"state": state, "param_groups": groups}


# ---------------------------------------------------------------------------- the data


def slice_batch(batch: Any, num_samples: int, rank: int, world_size: int) -> tuple[Any, int]:
    """Part ``rank`` of ``world_size`` contiguous parts of ``batch`` along dimension 0.

    ``batch`` is a tensor or a (named) tuple, list or dict of them (nested), each with
    ``num_samples`` rows. Returns ``(part, rows in part)``::

        slice_batch(torch.arange(5), 5, rank=1, world_size=2)  # (tensor([3, 4]), 2)
    """
    if num_samples < world_size:
        raise ValueError(
            f"a batch of {num_samples} sample(s) cannot be split over {world_size} ranks: "
            f"use a batch size of at least {world_size}"
        )
    bounds = torch.tensor_split(torch.arange(num_samples), world_size)[rank]
    start, stop = int(bounds[0]), int(bounds[-1]) + 1
    return _slice(batch, start, stop, num_samples), stop - start


def _slice(value: Any, start: int, stop: int, rows: int) -> Any:
    if isinstance(value, torch.Tensor):
        if value.dim() == 0 or value.shape[0] != rows:
            raise ValueError(
                f"a batch tensor of shape {tuple(value.shape)} has no dimension 0 of "
                f"{rows} samples: every tensor in a batch needs one row per sample"
            )
        return value[start:stop]
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_slice(v, start, stop, rows) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(_slice(v, start, stop, rows) for v in value)
    if isinstance(value, dict):
        return {k: _slice(v, start, stop, rows) for k, v in value.items()}
    raise TypeError(
        f"cannot split a batch of type {type(value).__name__} over ranks: batches must be "
        "tensors or (named) tuples, lists or dicts of tensors"
    )


def shard_step(group: Sequence[tuple[Any, int]], loss: LossFn) -> tuple[list[Any], LossFn, int]:
    """``(micro_batches, loss_fn, num_samples)`` for ``Trainer.step`` on this rank.

    Without a multi-rank group this is ``([batch, ...], loss, total)`` unchanged. With
    one, each micro-batch becomes ``(part, weight)``: this rank's part and the factor its
    mean loss is multiplied by (see the module docstring), which ``loss_fn`` applies.
    ``num_samples`` stays the global count, so ``samples_per_second`` is the whole job's
    throughput.
    """
    total = sum(n for _, n in group)
    rank, world = rank_and_world()
    if world == 1:
        return [b for b, _ in group], loss, total
    shards = []
    for batch, n in group:
        part, rows = slice_batch(batch, n, rank, world)
        shards.append((part, rows * world / n))

    def weighted(model: nn.Module, shard: tuple[Any, float]) -> torch.Tensor:
        part, weight = shard
        value = loss(model, part)
        return value if weight == 1.0 else value * weight

    return shards, weighted, total


def agreed_stop(should_stop: Callable[[], bool], lag: int | None = None) -> Callable[[], bool]:
    """``should_stop`` made collective: True on every rank when it is True on any.

    Ranks that stopped at different step boundaries would hang in the next collective.
    Each call starts one small all-reduce (MAX) of this rank's flag and answers with the
    result of the all-reduce started ``lag`` calls earlier, so every rank reads the same
    collective at the same call and they stop together, ``lag`` steps after the request.
    ``lag`` defaults to 2 on NCCL, where the result is copied to pinned memory behind an
    event: reading a result two steps old finds the copy done, with no host sync per step
    (reading the fresh flag would wait for the device). On gloo the all-reduce is already
    finished when it returns, so the default is 0. A pass-through without a group.
    """
    if not is_distributed():
        return should_stop
    device = collective_device()
    on_cuda = device.type == "cuda"
    lag = (2 if on_cuda else 0) if lag is None else lag
    started: deque[tuple[torch.Tensor, torch.cuda.Event | None]] = deque()

    def agreed() -> bool:
        # torch.full, not torch.tensor: a fill kernel, not a synchronous host-to-device copy.
        flag = torch.full((1,), 1.0 if should_stop() else 0.0, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        event = None
        if on_cuda:
            host = torch.empty(1, pin_memory=True)
            host.copy_(flag, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            flag = host
        started.append((flag, event))
        if len(started) <= lag:
            return False
        result, done = started.popleft()
        if done is not None:
            done.synchronize()  # recorded ``lag`` steps ago: normally already passed
        return bool(result[0] > 0)

    return agreed


def collective_device() -> torch.device:
    """Where a small tensor for a collective must live: the current GPU on NCCL, else CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ---------------------------------------------------------------------------- checkpoints


def checkpoint_manager(directory: Path | str, keep: int = 3) -> CheckpointManager:
    """A :class:`CheckpointManager`, or its rank-0-writes variant in a multi-rank group."""
    if is_distributed():
        return RankZeroCheckpointManager(directory, keep)
    return CheckpointManager(directory, keep)


class RankZeroCheckpointManager(CheckpointManager):
    """Checkpoints of a data-parallel run: one file, written atomically by rank 0.

    ``save`` is collective (every rank calls it): the ranks' RNG states are gathered into
    the state under ``rng_per_rank`` (``rng`` stays rank 0's, which is what a single
    process resuming the file restores), rank 0 writes and prunes, and a barrier holds
    every rank until the file is in place. ``load_latest`` is collective too: every rank
    reads the newest valid file (the folder must be shared between nodes), the ranks
    check that they read the same one, and each restores its own RNG state when the
    file was written at the same world size (otherwise rank 0's, with a log line).
    The file is the same format as a single process writes, so either resumes the other.
    """

    def claim(self, owner: str) -> None:
        """Rank 0 writes, so rank 0 alone owns the folder (:meth:`CheckpointManager.claim`)."""
        if rank_and_world()[0] == 0:
            super().claim(owner)

    def save(self, state: Mapping[str, Any]) -> Path:
        rank, world = rank_and_world()
        gathered = _all_gather_states(capture_rng_state(), world)
        path = self.path_for(int(state[keys.STEP]))
        state = unshard(state)  # collective under FSDP: every rank gathers its shards
        if rank == 0:
            path = super().save({**state, keys.RNG_PER_RANK: gathered})
        dist.barrier()
        return path

    def load_latest(
        self, accept: Accept | None = None, loaded: Loaded | None = None
    ) -> tuple[dict[str, Any], Path] | None:
        rank, world = rank_and_world()
        found = super().load_latest(accept, loaded)
        names: list[Any] = [None] * world
        dist.all_gather_object(names, found[1].name if found else None)
        if len(set(names)) != 1:
            raise RuntimeError(
                f"ranks found different newest checkpoints in {self.directory} ({names}): "
                "every node must see the same checkpoint folder (shared storage)"
            )
        if found is None:
            return None
        state, path = found
        per_rank = state.get(keys.RNG_PER_RANK)
        if per_rank is not None and len(per_rank) == world:
            state[keys.RNG] = per_rank[rank]
        elif rank == 0:
            saved_world = len(per_rank) if per_rank is not None else 1
            logger.info(
                "checkpoint %s was written by %d rank(s), this run has %d: every rank "
                "continues from rank 0's RNG state",
                path,
                saved_world,
                world,
            )
        return state, path


def _all_gather_states(state: dict[str, Any], world: int) -> list[dict[str, Any]]:
    # Sent as torch.save bytes: all_gather_object fails to unpickle tensors (torch 2.13),
    # and bytes read back with weights_only=True cannot smuggle in code.
    buffer = io.BytesIO()
    torch.save(state, buffer)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, buffer.getvalue())
    return [torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True) for raw in gathered]


def unshard(value: Any) -> Any:
    """``value`` with every FSDP2 DTensor replaced by its full tensor on the CPU.

    The file then holds plain tensors: ``weights_only`` loads it in any process, sharded
    or not. Dict order is the same on every rank, so the gathers line up.
    """
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        return value.full_tensor().cpu()
    if isinstance(value, Mapping):
        return {k: unshard(v) for k, v in value.items()}
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return type(value)(unshard(v) for v in value)
    return value
